// Package mcpregistry reads the official MCP registry's REST API (v0): the
// server.json entries `mcpvisor search` lists and `mcpvisor add -registry`
// turns into a server block (docs/registry.md).
//
// The registry is a remote party mcpvisor does not control (docs/design.md
// §17): every answer is read through a size bound, every field it prints is
// the caller's to make terminal-safe, and every failure is an *Error naming
// the URL asked and what went wrong, so that a caller can say what to do.
package mcpregistry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultURL is the official MCP registry, used when the host block has no
// registry { url } (docs/config.md, "registry").
const DefaultURL = "https://registry.modelcontextprotocol.io"

// maxAnswerBytes bounds one answer of the registry: a page of 100 entries
// of the largest real server.json files is well under it.
const maxAnswerBytes = 8 << 20

// requestTimeout bounds one request, connection included.
const requestTimeout = 30 * time.Second

// Sentinel kinds of *Error, tested with errors.Is.
var (
	// ErrUnreachable: no HTTP answer (DNS, connection, TLS, timeout).
	ErrUnreachable = errors.New("registry unreachable")
	// ErrNotFound: the registry has no such server, or no such version.
	ErrNotFound = errors.New("not in the registry")
	// ErrBadAnswer: an answer that is not the registry's JSON, or too big.
	ErrBadAnswer = errors.New("not a registry answer")
	// ErrRefused: an HTTP error status other than 404.
	ErrRefused = errors.New("refused by the registry")
)

// Error is a failed request to the registry.
type Error struct {
	Kind   error  // one of the sentinels above
	URL    string // the URL asked
	Status int    // the HTTP status, when there was an answer
	Detail string // what went wrong, in words
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("GET %s: HTTP %d: %s", e.URL, e.Status, e.Detail)
	}
	return fmt.Sprintf("GET %s: %s", e.URL, e.Detail)
}

// Unwrap makes errors.Is(err, ErrNotFound) and its kin work.
func (e *Error) Unwrap() error { return e.Kind }

// Client asks one registry.
type Client struct {
	base string
	http *http.Client
}

// New is a client of the registry at baseURL (DefaultURL when empty).
func New(baseURL string) *Client {
	if baseURL == "" {
		baseURL = DefaultURL
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), http: &http.Client{Timeout: requestTimeout}}
}

// URL is the registry's base URL.
func (c *Client) URL() string { return c.base }

// Search lists the latest version of each server whose name contains
// query (the registry's own matching), at most limit of them, and whether
// the registry has more.
func (c *Client) Search(ctx context.Context, query string, limit int) ([]Entry, bool, error) {
	q := url.Values{"search": {query}, "version": {"latest"}}
	if limit > 0 {
		q.Set("limit", fmt.Sprint(limit))
	}
	var page entryList
	if err := c.get(ctx, "/v0/servers?"+q.Encode(), &page); err != nil {
		return nil, false, err
	}
	return page.Servers, page.Metadata.NextCursor != "", nil
}

// Versions lists every version the registry has of the server name.
func (c *Client) Versions(ctx context.Context, name string) ([]Entry, error) {
	var page entryList
	if err := c.get(ctx, "/v0/servers/"+url.PathEscape(name)+"/versions", &page); err != nil {
		return nil, err
	}
	return page.Servers, nil
}

// Server is the entry of the server name at version ("" or "latest": the
// latest version).
func (c *Client) Server(ctx context.Context, name, version string) (Entry, error) {
	if version == "" {
		version = "latest"
	}
	var e Entry
	if err := c.get(ctx, "/v0/servers/"+url.PathEscape(name)+"/versions/"+url.PathEscape(version), &e); err != nil {
		return Entry{}, err
	}
	if e.Server.Name == "" {
		return Entry{}, &Error{Kind: ErrBadAnswer, URL: c.base + "/v0/servers/" + url.PathEscape(name) + "/versions/" + url.PathEscape(version), Detail: "the answer has no server.name"}
	}
	return e, nil
}

// get decodes the JSON answer to GET base+path into into.
func (c *Client) get(ctx context.Context, path string, into any) error {
	u := c.base + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return &Error{Kind: ErrUnreachable, URL: u, Detail: err.Error()}
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is said once, by *Error
		}
		return &Error{Kind: ErrUnreachable, URL: u, Detail: err.Error()}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return &Error{Kind: ErrUnreachable, URL: u, Status: resp.StatusCode, Detail: "reading the answer: " + err.Error()}
	}
	if len(body) > maxAnswerBytes {
		return &Error{Kind: ErrBadAnswer, URL: u, Status: resp.StatusCode, Detail: fmt.Sprintf("the answer is over %d MiB", maxAnswerBytes>>20)}
	}
	if resp.StatusCode != http.StatusOK {
		kind := ErrRefused
		if resp.StatusCode == http.StatusNotFound {
			kind = ErrNotFound
		}
		return &Error{Kind: kind, URL: u, Status: resp.StatusCode, Detail: problemDetail(body)}
	}
	if err := json.Unmarshal(body, into); err != nil {
		return &Error{Kind: ErrBadAnswer, URL: u, Status: resp.StatusCode, Detail: "the answer is not the registry's JSON: " + err.Error()}
	}
	return nil
}

// problemDetail is what an error answer says: the registry's RFC 9457
// problem document (title, detail, errors[].message), or the start of
// whatever else it sent.
func problemDetail(body []byte) string {
	var p struct {
		Title  string `json:"title"`
		Detail string `json:"detail"`
		Errors []struct {
			Message  string `json:"message"`
			Location string `json:"location"`
		} `json:"errors"`
	}
	if json.Unmarshal(body, &p) == nil && (p.Title != "" || p.Detail != "") {
		parts := []string{}
		for _, s := range []string{p.Title, p.Detail} {
			if s != "" && !containsFold(parts, s) {
				parts = append(parts, s)
			}
		}
		for _, e := range p.Errors {
			if e.Message != "" {
				parts = append(parts, strings.TrimSpace(e.Location+" "+e.Message))
			}
		}
		return strings.Join(parts, ": ")
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	if s == "" {
		return "an empty answer"
	}
	return s
}

func containsFold(list []string, s string) bool {
	for _, l := range list {
		if strings.EqualFold(l, s) {
			return true
		}
	}
	return false
}
