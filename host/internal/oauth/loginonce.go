package oauth

/*
Design note: one authorization per login.

The go-sdk's streamable client hands every 401 (and every 403
insufficient_scope) to the OAuth handler and retries the request once. When
the server refuses the tokens a login just got, or the first authorization
failed (the token endpoint answered 400), the client came back to the
handler, which sent the user to the authorization server a second time for
the same scope and then failed with the server's bare "Unauthorized".
singleAuthorization lets the handler run once: a later 401 is the server's
refusal, reported with its HTTP status; a later challenge after a failed
authorization reports that failure again. Only a 403 insufficient_scope
(the server asks for more scope: a step-up) may run it again.

Error bodies are summarised before the go-sdk sees them: it quotes an
unexpected answer's body in its errors (a failed client registration), and
an authorization server behind a proxy answers with an HTML page.
*/

import (
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"unicode"

	"github.com/modelcontextprotocol/go-sdk/auth"
)

// singleAuthorization wraps the login's OAuth handler (see the note at the
// top).
type singleAuthorization struct {
	auth.OAuthHandler

	mu      sync.Mutex
	tried   bool   // Authorize ran once
	failed  error  // what the first Authorize returned
	refusal string // the HTTP status with which the server refused the new tokens
}

func (h *singleAuthorization) Authorize(ctx context.Context, req *http.Request, resp *http.Response) error {
	h.mu.Lock()
	tried, failed := h.tried, h.failed
	stepUp := resp.StatusCode == http.StatusForbidden && strings.Contains(resp.Header.Get("WWW-Authenticate"), "insufficient_scope")
	if tried && !stepUp {
		if failed == nil {
			h.refusal = resp.Status
		}
		h.mu.Unlock()
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if failed != nil {
			return failed
		}
		return fmt.Errorf("HTTP %s to the new tokens", resp.Status)
	}
	h.tried = true
	h.mu.Unlock()
	err := h.OAuthHandler.Authorize(ctx, req, resp)
	h.mu.Lock()
	h.failed = err
	h.mu.Unlock()
	return err
}

// refused returns the HTTP status with which the server refused the
// tokens of the authorization, or "".
func (h *singleAuthorization) refused() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.refusal
}

// maxErrorExcerpt bounds the plain text of an error body kept for an
// error message.
const maxErrorExcerpt = 200

// summarisedErrors is a RoundTripper that replaces the body of an error
// answer that is not JSON with a short summary: a plain-text body's first
// line (control characters dropped, at most maxErrorExcerpt bytes), or
// its content type and size.
type summarisedErrors struct{ next http.RoundTripper }

func (t summarisedErrors) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.StatusCode < 400 {
		return resp, err
	}
	ct := resp.Header.Get("Content-Type")
	media, _, _ := mime.ParseMediaType(ct)
	if media == "application/json" || strings.HasSuffix(media, "+json") {
		return resp, nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	var summary string
	if media == "text/plain" {
		line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
		line = strings.Map(func(r rune) rune {
			if unicode.IsControl(r) || r == unicode.ReplacementChar {
				return -1
			}
			return r
		}, line)
		if len(line) > maxErrorExcerpt {
			line = line[:maxErrorExcerpt] + "…"
		}
		summary = fmt.Sprintf("%q", line)
	} else {
		if ct == "" {
			ct = "no content type"
		}
		summary = fmt.Sprintf("a %s body of %d bytes, not shown", ct, len(body))
		if len(body) == 1<<16 {
			summary = fmt.Sprintf("a %s body of 64 KiB or more, not shown", ct)
		}
	}
	resp.Body = io.NopCloser(strings.NewReader(summary))
	resp.ContentLength = int64(len(summary))
	resp.Header.Del("Content-Length")
	return resp, nil
}

// withSummarisedErrors returns a copy of hc whose error answers are
// summarised (summarisedErrors).
func withSummarisedErrors(hc *http.Client) *http.Client {
	c := *hc
	next := c.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	c.Transport = summarisedErrors{next: next}
	return &c
}
