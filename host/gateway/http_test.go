package gateway_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/gateway"
)

// serveHTTP serves the gateway's handler on a loopback httptest server.
func serveHTTP(t *testing.T, e *env) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(e.gw.HTTPHandler())
	t.Cleanup(srv.Close)
	return srv
}

// headerTransport adds fixed headers to every request.
type headerTransport struct {
	header http.Header
	base   http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.header {
		r.Header[k] = v
	}
	return h.base.RoundTrip(r)
}

// connectHTTP connects a go-sdk client over streamable HTTP, speaking
// version, with extra request headers.
func connectHTTP(t *testing.T, srv *httptest.Server, version string, header http.Header, copts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	t.Helper()
	tr := &mcp.StreamableClientTransport{
		Endpoint:   srv.URL + "/mcp",
		HTTPClient: &http.Client{Transport: headerTransport{header: header, base: srv.Client().Transport}},
		MaxRetries: -1,
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "http-client"}, copts).Connect(testCtx(t), tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { cs.Close() })
	return cs, nil
}

var protocolVersions = []string{"2025-11-25", "2026-07-28"}

func TestToolResultsOverHTTP(t *testing.T) {
	for _, version := range protocolVersions {
		t.Run(version, func(t *testing.T) {
			e := newEnv(t, gateway.Options{})
			srv := serveHTTP(t, e)
			cs, err := connectHTTP(t, srv, version, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := cs.InitializeResult().ProtocolVersion; got != version {
				t.Errorf("negotiated %q, want %q", got, version)
			}
			checkToolFidelity(t, e, cs)
		})
	}
}

func TestListChangedOverHTTP(t *testing.T) {
	for _, version := range protocolVersions {
		t.Run(version, func(t *testing.T) {
			e := newEnv(t, gateway.Options{})
			srv := serveHTTP(t, e)
			copts, ch := listChangedOptions()
			cs, err := connectHTTP(t, srv, version, nil, copts)
			if err != nil {
				t.Fatal(err)
			}
			awaitListStream(t, e, ch)
			checkListChanged(t, e, cs, ch)
		})
	}
}

func TestBearerToken(t *testing.T) {
	e := newEnv(t, gateway.Options{BearerToken: "s3cret-token"})
	srv := serveHTTP(t, e)

	for _, tc := range []struct {
		name, auth string
	}{
		{"missing", ""},
		{"wrong", "Bearer nope"},
		{"wrong scheme", "Basic s3cret-token"},
		{"prefix of the token", "Bearer s3cret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, srv, map[string]string{"Authorization": tc.auth})
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("status %d, want 401", resp.StatusCode)
			}
			if h := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(h, "Bearer") {
				t.Errorf("WWW-Authenticate = %q", h)
			}
		})
	}
	if _, err := connectHTTP(t, srv, "2025-11-25", nil, nil); err == nil {
		t.Errorf("client without token connected")
	}
	for _, version := range protocolVersions {
		cs, err := connectHTTP(t, srv, version, http.Header{"Authorization": {"bearer s3cret-token"}}, nil)
		if err != nil {
			t.Fatalf("%s: client with token: %v", version, err)
		}
		if got := toolNames(t, testCtx(t), cs); len(got) != 8 {
			t.Errorf("%s: tools = %v", version, got)
		}
	}
}

func TestOriginAndHostChecks(t *testing.T) {
	e := newEnv(t, gateway.Options{AllowedOrigins: []string{"https://app.example.com"}})
	srv := serveHTTP(t, e)
	for _, tc := range []struct {
		name   string
		header map[string]string
		want   int
	}{
		{"foreign origin", map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden},
		{"loopback-looking foreign origin", map[string]string{"Origin": "http://localhost.evil.example"}, http.StatusForbidden},
		{"null origin", map[string]string{"Origin": "null"}, http.StatusForbidden},
		{"non-loopback Host", map[string]string{"Host": "evil.example:80"}, http.StatusForbidden},
		{"no origin", nil, http.StatusOK},
		{"localhost origin", map[string]string{"Origin": "http://localhost:6274"}, http.StatusOK},
		{"127.0.0.1 origin", map[string]string{"Origin": "http://127.0.0.1:3000"}, http.StatusOK},
		{"[::1] origin", map[string]string{"Origin": "http://[::1]:8080"}, http.StatusOK},
		{"configured origin", map[string]string{"Origin": "https://app.example.com/"}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, srv, tc.header)
			if resp.StatusCode != tc.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}

	// A session id the gateway never issued is a 404, so clients know to
	// start a new session.
	resp := post(t, srv, map[string]string{"Mcp-Session-Id": "no-such-session"})
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown session: status %d, want 404", resp.StatusCode)
	}
}

// post sends a legacy initialize request with extra headers and returns the
// response with its body read and closed.
func post(t *testing.T, srv *httptest.Server, header map[string]string) *http.Response {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodPost, srv.URL+"/mcp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		// Close the session the request opened.
		if id := resp.Header.Get("Mcp-Session-Id"); id != "" {
			del, _ := http.NewRequestWithContext(context.Background(), http.MethodDelete, srv.URL+"/mcp", nil)
			del.Header.Set("Mcp-Session-Id", id)
			for k, v := range header {
				if k != "Host" {
					del.Header.Set(k, v)
				}
			}
			if r, err := srv.Client().Do(del); err == nil {
				r.Body.Close()
			}
		}
	}
	return resp
}
