package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/gateway"
)

// startFront serves handler through the gateway's HTTP/1.1 front on a
// loopback port and shuts it down when the test ends.
func startFront(t *testing.T, e *env, handler http.Handler) (addr string, srv *gateway.Server, served chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv = e.gw.NewServer(handler, 5*time.Second)
	served = make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return ln.Addr().String(), srv, served
}

// rawConn is a client connection that writes requests by hand.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

func (r *rawConn) send(s string) {
	r.t.Helper()
	if _, err := io.WriteString(r.c, s); err != nil {
		r.t.Fatal(err)
	}
}

// read reads one response and its whole body.
func (r *rawConn) read(method string) (*http.Response, string) {
	r.t.Helper()
	resp, err := http.ReadResponse(r.br, &http.Request{Method: method})
	if err != nil {
		r.t.Fatalf("reading a response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatalf("reading a body: %v", err)
	}
	return resp, string(b)
}

// echoHandler answers with the method, path, body and the remote address
// it saw.
func echoHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s from-loopback=%v", r.Method, r.URL.Path, b, strings.HasPrefix(r.RemoteAddr, "127.0.0.1:"))
	})
}

// Requests the front does not answer itself reach net/http as the client
// sent them, one connection carrying many, pipelined or not, and whatever
// the front cannot frame hands the connection to net/http for good.
func TestFrontRelaysToNetHTTP(t *testing.T) {
	e := newEnv(t, gateway.Options{})
	addr, _, _ := startFront(t, e, echoHandler())

	rc := dialRaw(t, addr)
	rc.send("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
	if _, body := rc.read("POST"); body != "POST /a hello from-loopback=true" {
		t.Fatalf("first: %q", body)
	}
	// Two requests in one write, the second a HEAD.
	rc.send("GET /b HTTP/1.1\r\nHost: x\r\n\r\nHEAD /c HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, body := rc.read("GET"); body != "GET /b  from-loopback=true" {
		t.Fatalf("pipelined: %q", body)
	}
	if resp, body := rc.read("HEAD"); resp.StatusCode != 200 || body != "" {
		t.Fatalf("HEAD: %d %q", resp.StatusCode, body)
	}
	// A chunked body is net/http's to frame: the connection is handed
	// over, and later requests on it are still served.
	rc.send("POST /d HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
	if _, body := rc.read("POST"); body != "POST /d abc from-loopback=true" {
		t.Fatalf("chunked: %q", body)
	}
	rc.send("GET /e HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, body := rc.read("GET"); body != "GET /e  from-loopback=true" {
		t.Fatalf("after handoff: %q", body)
	}

	// Connection: close ends the connection after the answer.
	rc2 := dialRaw(t, addr)
	rc2.send("GET /f HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if resp, _ := rc2.read("GET"); !resp.Close {
		t.Fatal("the answer to Connection: close did not say close")
	}
	if _, err := rc2.br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("connection still open after Connection: close (read: %v)", err)
	}

	// A request net/http refuses (no Host) gets net/http's 400.
	rc3 := dialRaw(t, addr)
	rc3.send("GET /g HTTP/1.1\r\n\r\n")
	if resp, _ := rc3.read("GET"); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("no Host: status %d, want 400", resp.StatusCode)
	}
}

// A stream net/http writes reaches the client as it is written, and a
// client that goes away ends the handler's request context.
func TestFrontStreamsAndNoticesDisconnect(t *testing.T) {
	e := newEnv(t, gateway.Options{})
	next := make(chan struct{})
	ended := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		<-next
		io.WriteString(w, "data: two\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		ended <- r.Context().Err()
	})
	addr, _, _ := startFront(t, e, h)
	rc := dialRaw(t, addr)
	rc.send("GET /mcp HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
	resp, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := bufio.NewReader(resp.Body)
	for _, want := range []string{"data: one\n", "\n", "data: two\n", "\n"} {
		if want == "data: two\n" {
			close(next)
		}
		line, err := body.ReadString('\n')
		if err != nil || line != want {
			t.Fatalf("stream: got %q (%v), want %q", line, err, want)
		}
	}
	rc.c.Close()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("handler context ended with %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the handler's context did not end when its client went away")
	}
}

// Shutdown closes idle connections, lets a request being served finish,
// and makes Serve return http.ErrServerClosed.
func TestFrontShutdown(t *testing.T) {
	e := newEnv(t, gateway.Options{})
	release := make(chan struct{})
	entered := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		io.WriteString(w, "done")
	})
	addr, srv, served := startFront(t, e, h)
	idle := dialRaw(t, addr)
	idle.send("GET /quick HTTP/1.1\r\nHost: x\r\n\r\n")
	idle.read("GET")
	busy := dialRaw(t, addr)
	busy.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	<-entered

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		shut <- srv.Shutdown(ctx)
	}()
	if _, err := idle.br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("idle connection not closed by Shutdown (read: %v)", err)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) while a request was being served", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if _, body := busy.read("GET"); body != "done" {
		t.Fatalf("the request in flight got %q", body)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve returned %v, want http.ErrServerClosed", err)
	}
}

// flakyListener fails its first Accept the way a process out of file
// descriptors does.
type flakyListener struct {
	net.Listener
	failed bool
}

type temporaryError struct{}

func (temporaryError) Error() string   { return "accept: too many open files" }
func (temporaryError) Timeout() bool   { return false }
func (temporaryError) Temporary() bool { return true }

func (l *flakyListener) Accept() (net.Conn, error) {
	if !l.failed {
		l.failed = true
		return nil, temporaryError{}
	}
	return l.Listener.Accept()
}

// A temporary accept failure (EMFILE and the like) does not stop the
// front from serving, as it does not stop net/http.
func TestFrontRetriesTemporaryAcceptErrors(t *testing.T) {
	e := newEnv(t, gateway.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := e.gw.NewServer(echoHandler(), 5*time.Second)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(&flakyListener{Listener: ln}) }()
	rc := dialRaw(t, ln.Addr().String())
	rc.send("GET /after HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, body := rc.read("GET"); body != "GET /after  from-loopback=true" {
		t.Fatalf("after a temporary accept error: %q", body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve returned %v", err)
	}
}
