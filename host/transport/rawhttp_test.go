package transport

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// countingServer is an httptest server that counts the TCP connections it
// accepted.
type countingServer struct {
	*httptest.Server
	conns atomic.Int64
}

func newCountingServer(t *testing.T, h http.HandlerFunc) *countingServer {
	s := &countingServer{}
	s.Server = httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func post(t *testing.T, p Poster, ctx context.Context, body string) (int, string, error) {
	t.Helper()
	resp, err := p.Post(ctx, http.Header{"Content-Type": {"application/json"}}, []byte(body))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func rawPosterFor(t *testing.T, url string, headers map[string]string) *rawPoster {
	t.Helper()
	p := newRawPoster(url, headers, clientPoster{url: url, client: http.DefaultClient})
	if p == nil {
		t.Fatalf("no raw poster for %s", url)
	}
	t.Cleanup(p.CloseIdle)
	return p
}

// Requests reuse one connection, chunked (streamed) answers included, and
// the block's headers are sent, overriding the caller's.
func TestRawPosterReusesConnectionAndSendsHeaders(t *testing.T) {
	var got []string
	var mu sync.Mutex
	srv := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.RequestURI()+" "+r.Header.Get("X-Token")+" "+r.Header.Get("Content-Type")+" "+string(b))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush() // chunked from here on
		io.WriteString(w, "data: two\n\n")
	})
	p := rawPosterFor(t, srv.URL+"/mcp?x=1", map[string]string{"x-token": "block", "content-type": "application/json"})
	ctx := context.Background()
	for i := range 20 {
		resp, err := p.Post(ctx, http.Header{"X-Token": {"caller"}, "Content-Type": {"text/plain"}}, []byte(`{"n":1}`))
		if err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "data: one\n\ndata: two\n\n" {
			t.Fatalf("post %d: body %q", i, b)
		}
	}
	if n := srv.conns.Load(); n != 1 {
		t.Errorf("%d connections for 20 sequential posts, want 1", n)
	}
	if want := `POST /mcp?x=1 block application/json {"n":1}`; got[0] != want {
		t.Errorf("server saw %q, want %q", got[0], want)
	}
}

// A connection the server closed while idle is noticed before use: the
// next request goes out on a new connection and succeeds.
func TestRawPosterSkipsConnectionsClosedWhileIdle(t *testing.T) {
	srv := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})
	p := rawPosterFor(t, srv.URL, nil)
	ctx := context.Background()
	for i := range 3 {
		if code, body, err := post(t, p, ctx, "{}"); err != nil || code != 200 || body != "ok" {
			t.Fatalf("post %d: %d %q %v", i, code, body, err)
		}
		srv.CloseClientConnections()
		// Let the FIN arrive before the next post looks at the pool.
		time.Sleep(20 * time.Millisecond)
	}
	if n := srv.conns.Load(); n != 3 {
		t.Errorf("%d connections, want 3 (one per post)", n)
	}
}

// A body not read to its end, or a canceled call, leaves no connection
// behind to be reused.
func TestRawPosterDropsUnfinishedConnections(t *testing.T) {
	release := make(chan struct{})
	srv := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		if r.URL.Query().Get("hold") != "" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	})
	defer close(release)

	p := rawPosterFor(t, srv.URL+"/?hold=1", nil)
	resp, err := p.Post(context.Background(), nil, []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	io.ReadFull(resp.Body, buf)
	closed := make(chan struct{})
	go func() { resp.Body.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("closing an unfinished body waited for the server")
	}

	ctx, cancel := context.WithCancel(context.Background())
	resp, err = p.Post(ctx, nil, []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("reading a held stream after cancel: no error")
	}
	resp.Body.Close()
	p.mu.Lock()
	n := len(p.idle)
	p.mu.Unlock()
	if n != 0 {
		t.Errorf("%d connections pooled after unfinished calls, want 0", n)
	}
}

func TestRawPosterStatuses(t *testing.T) {
	srv := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/auth":
			http.Error(w, "token expired", http.StatusUnauthorized)
		case "/moved":
			http.Redirect(w, r, "/final", http.StatusPermanentRedirect)
		case "/final":
			b, _ := io.ReadAll(r.Body)
			io.WriteString(w, "final "+string(b))
		case "/hints":
			w.Header().Set("Link", "</x>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			io.WriteString(w, "after hints")
		case "/close":
			w.Header().Set("Connection", "close")
			io.WriteString(w, "bye")
		}
	})
	ctx := context.Background()

	_, _, err := post(t, rawPosterFor(t, srv.URL+"/auth", nil), ctx, "{}")
	if !errors.Is(err, recovery.ErrUnauthorized) {
		t.Errorf("401: err %v, want ErrUnauthorized", err)
	}
	if code, body, err := post(t, rawPosterFor(t, srv.URL+"/moved", nil), ctx, "{}"); err != nil || code != 200 || body != "final {}" {
		t.Errorf("redirect: %d %q %v, want the target's answer", code, body, err)
	}
	if code, body, err := post(t, rawPosterFor(t, srv.URL+"/hints", nil), ctx, "{}"); err != nil || code != 200 || body != "after hints" {
		t.Errorf("103 then 200: %d %q %v", code, body, err)
	}
	p := rawPosterFor(t, srv.URL+"/close", nil)
	before := srv.conns.Load()
	for range 2 {
		if code, body, err := post(t, p, ctx, "{}"); err != nil || code != 200 || body != "bye" {
			t.Fatalf("Connection: close: %d %q %v", code, body, err)
		}
	}
	if n := srv.conns.Load() - before; n != 2 {
		t.Errorf("Connection: close: %d connections for 2 posts, want 2", n)
	}
}

func TestRawPosterOnlyForPlainHTTP(t *testing.T) {
	for _, u := range []string{"https://example.com/mcp", "http://user:pw@example.com/mcp", "unix:///tmp/x", "::"} {
		if newRawPoster(u, nil, nil) != nil {
			t.Errorf("%s: raw poster made, want net/http", u)
		}
	}
	p := newRawPoster("http://example.com/mcp", nil, nil)
	if p == nil || p.addr != "example.com:80" || p.host != "example.com" || p.path != "/mcp" {
		t.Errorf("http://example.com/mcp: %+v", p)
	}
	if !strings.HasSuffix(newRawPoster("http://[::1]:8080", nil, nil).addr, "]:8080") {
		t.Error("IPv6 address lost its brackets")
	}
}

// A header value with a line break (a session id the upstream made up) is
// refused, not written; framing headers from the block are ignored, as
// net/http ignores them.
func TestRawPosterHeaderSafety(t *testing.T) {
	var seen atomic.Int64
	var host atomic.Value
	srv := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		host.Store(r.Host)
		io.WriteString(w, "ok")
	})
	p := rawPosterFor(t, srv.URL, map[string]string{"Host": "elsewhere.example", "Content-Length": "1"})
	_, err := p.Post(context.Background(), http.Header{"Mcp-Session-Id": {"abc\r\nX-Injected: 1"}}, []byte("{}"))
	if err == nil || seen.Load() != 0 {
		t.Fatalf("a header with a line break: err %v, %d requests reached the server", err, seen.Load())
	}
	if code, body, err := post(t, p, context.Background(), "{}"); err != nil || code != 200 || body != "ok" {
		t.Fatalf("post: %d %q %v", code, body, err)
	}
	if h := host.Load(); h != strings.TrimPrefix(srv.URL, "http://") {
		t.Errorf("Host %v, want the URL's", h)
	}
	if newRawPoster(srv.URL, map[string]string{"X-Token": "a\nb"}, nil) != nil {
		t.Error("a block header with a line break got a raw poster; net/http should report it")
	}
}
