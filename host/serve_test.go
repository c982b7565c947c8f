//go:build unix

package host_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host"
)

// servedHost starts a host on src with opts, waits for its servers and
// serves its Handler on a loopback httptest server.
func servedHost(t *testing.T, src string, opts ...host.Option) (*host.Host, *httptest.Server) {
	t.Helper()
	h := settledHost(t, src, opts...)
	srv := httptest.NewServer(h.Handler())
	t.Cleanup(srv.Close)
	return h, srv
}

// request sends method to path on srv with extra headers ("Host" sets the
// Host header) and returns the status and body.
func request(t *testing.T, srv *httptest.Server, method, path string, header map[string]string) (int, string) {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	}
	req, err := http.NewRequest(method, srv.URL+path, body)
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
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Every endpoint sits behind the same ingress checks: a rebinding Host or
// a foreign Origin is refused on /mcp, /status and /healthz alike.
func TestIngressChecksEveryEndpoint(t *testing.T) {
	_, srv := servedHost(t, fmt.Sprintf("server \"echo\" {\n  command = %q\n}\n", bins["echo"]))
	endpoints := []struct{ method, path string }{{http.MethodPost, "/mcp"}, {http.MethodGet, "/status"}, {http.MethodGet, "/healthz"}}
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
	} {
		for _, ep := range endpoints {
			t.Run(tc.name+" "+ep.path, func(t *testing.T) {
				if got, body := request(t, srv, ep.method, ep.path, tc.header); got != tc.want {
					t.Errorf("status %d (%s), want %d", got, strings.TrimSpace(body), tc.want)
				}
			})
		}
	}
	// A session id the host never issued is a 404, so clients know to
	// start a new session.
	if got, _ := request(t, srv, http.MethodPost, "/mcp", map[string]string{"Mcp-Session-Id": "no-such-session"}); got != http.StatusNotFound {
		t.Errorf("unknown session: status %d, want 404", got)
	}
}

// With a bearer token configured, every endpoint requires it.
func TestBearerTokenOnEveryEndpoint(t *testing.T) {
	_, srv := servedHost(t, fmt.Sprintf("host {\n  auth { bearer_token = \"s3cret-token\" }\n}\nserver \"echo\" {\n  command = %q\n}\n", bins["echo"]))
	for _, path := range []string{"/mcp", "/status", "/healthz"} {
		method := http.MethodGet
		if path == "/mcp" {
			method = http.MethodPost
		}
		for _, tc := range []struct{ name, auth string }{
			{"missing", ""},
			{"wrong", "Bearer nope"},
			{"wrong scheme", "Basic s3cret-token"},
			{"prefix of the token", "Bearer s3cret"},
		} {
			t.Run(path+" "+tc.name, func(t *testing.T) {
				got, body := request(t, srv, method, path, map[string]string{"Authorization": tc.auth})
				if path == "/healthz" && tc.auth == "" {
					// An orchestrator's probe sends no token: it gets the
					// status code and nothing about the servers.
					if got != http.StatusOK || strings.TrimSpace(body) != "ok" {
						t.Errorf("probe without a token: status %d %q, want 200 ok", got, body)
					}
					return
				}
				if got != http.StatusUnauthorized {
					t.Errorf("status %d, want 401", got)
				}
			})
		}
		t.Run(path+" with token", func(t *testing.T) {
			if got, body := request(t, srv, method, path, map[string]string{"Authorization": "bearer s3cret-token"}); got != http.StatusOK {
				t.Errorf("status %d (%s), want 200", got, body)
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "no-token"}, nil)
	if cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp", MaxRetries: -1}, nil); err == nil {
		cs.Close()
		t.Error("a client without the token connected")
	}
}

// A middleware set with WithMiddleware sees every request, tools/call
// included, and only requests that passed the ingress checks.
func TestMiddlewareSeesToolCalls(t *testing.T) {
	var (
		mu      sync.Mutex
		methods []string
		hosts   []string
	)
	mw := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && r.URL.Path == "/mcp" {
				b, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(strings.NewReader(string(b)))
				mu.Lock()
				if i := strings.Index(string(b), `"method":"`); i >= 0 {
					m := string(b)[i+len(`"method":"`):]
					methods = append(methods, m[:strings.IndexByte(m, '"')])
				}
				hosts = append(hosts, r.Host)
				mu.Unlock()
			}
			next.ServeHTTP(w, r)
		})
	}
	_, srv := servedHost(t, fmt.Sprintf("server \"echo\" {\n  command = %q\n}\n", bins["echo"]), host.WithMiddleware(mw))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "t"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatal(err)
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__echo", Arguments: map[string]any{"text": "seen"}})
		cs.Close()
		if err != nil || textOf(t, res.Content[0]) != "seen" {
			t.Fatalf("%s: call: %v", version, err)
		}
	}
	request(t, srv, http.MethodPost, "/mcp", map[string]string{"Host": "evil.example:80"})
	mu.Lock()
	defer mu.Unlock()
	calls := 0
	for _, m := range methods {
		if m == "tools/call" {
			calls++
		}
	}
	if calls != 2 {
		t.Errorf("middleware saw %d tools/call requests (methods %v), want 2", calls, methods)
	}
	for _, h := range hosts {
		if strings.HasPrefix(h, "evil") {
			t.Errorf("middleware saw a request the ingress refused (Host %q)", h)
		}
	}
}

// Past max_sessions a newcomer takes the place of the session idle the
// longest, which is closed (404 from then on); when every session is busy
// (here each has its GET stream open) a newcomer is refused with 503 and a
// message saying why. Sessions a client abandons (initialize, then never a
// DELETE) are closed after session_idle_timeout.
func TestSessionsAreCappedAndReaped(t *testing.T) {
	echo := fmt.Sprintf("server \"echo\" {\n  command = %q\n}\n", bins["echo"])
	_, srv := servedHost(t, "host {\n  max_sessions = 3\n  session_idle_timeout = \"10m\"\n}\n"+echo)
	var ids []string
	for i := range 4 {
		id, code := openSession(t, srv)
		if id == "" {
			t.Fatalf("session %d: status %d", i+1, code)
		}
		ids = append(ids, id)
	}
	// It is closed in the background.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got := inSession(t, srv, http.MethodPost, ids[0], nil)
		if got == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session idle the longest still answers %d 30s after a newcomer past max_sessions, want 404", got)
		}
	}
	// Every session busy: a newcomer is refused.
	for _, id := range ids[1:] {
		resp := inSession(t, srv, http.MethodGet, id, t.Context())
		if resp != http.StatusOK {
			t.Fatalf("GET stream of session %s: status %d", id, resp)
		}
	}
	got, body := request(t, srv, http.MethodPost, "/mcp", nil)
	if got != http.StatusServiceUnavailable || !strings.Contains(body, "max_sessions") {
		t.Fatalf("a session past max_sessions with every session busy: status %d (%s), want 503 naming max_sessions", got, strings.TrimSpace(body))
	}
	// A stateless (2026-07-28) request opens no session: it is served.
	if got, body := request(t, srv, http.MethodPost, "/mcp", map[string]string{"Mcp-Protocol-Version": "2026-07-28"}); got == http.StatusServiceUnavailable {
		t.Errorf("a stateless request was refused for the session cap: %s", body)
	}

	h, srv := servedHost(t, "host {\n  max_sessions = 3\n  session_idle_timeout = \"1s\"\n}\n"+echo)
	if id, code := openSession(t, srv); id == "" {
		t.Fatalf("session: status %d", code)
	}
	deadline := time.Now().Add(30 * time.Second)
	for h.Sessions() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("an abandoned session was not closed within 30s of its idle timeout of 1s")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// openSession sends an initialize to srv and returns the new session's id
// (empty when refused) and the status.
func openSession(t *testing.T, srv *httptest.Server) (string, int) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", resp.StatusCode
	}
	return resp.Header.Get("Mcp-Session-Id"), resp.StatusCode
}

// inSession sends a ping (POST) or opens the GET stream of session id and
// returns the status. A GET stream stays open until stream ends.
func inSession(t *testing.T, srv *httptest.Server, method, id string, stream context.Context) int {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	}
	ctx := context.Background()
	if stream != nil {
		ctx = stream
	}
	req, _ := http.NewRequestWithContext(ctx, method, srv.URL+"/mcp", body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if stream == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	} else {
		context.AfterFunc(stream, func() { resp.Body.Close() })
	}
	return resp.StatusCode
}
