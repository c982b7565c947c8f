//go:build unix

package hardening_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

const (
	// closeBound bounds one session's DELETE: far above what a close
	// takes, below the 5 s a client waits and the 10 s mcpvisor waits for
	// a client's roots.
	closeBound = 4 * time.Second
	// termBound bounds SIGTERM → exit with a session whose client never
	// answers mcpvisor's question: below the 10 s mcpvisor waits for
	// roots.
	termBound = 8 * time.Second
	// sessionsOpenedAndClosed is how many go-sdk client sessions open and
	// close in a row; a close that waited on the host hit 2 of 60.
	sessionsOpenedAndClosed = 60
)

// connectWithRoots opens a go-sdk client session with the roots
// capability (root uri) to mcpvisor's /mcp; it is closed when the test
// ends.
func connectWithRoots(t *testing.T, mv *mcpvisor, uri string) (*mcp.Client, *mcp.ClientSession) {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	c := mcp.NewClient(&mcp.Implementation{Name: "hardening-roots", Version: "1"}, nil)
	c.AddRoots(&mcp.Root{URI: uri, Name: uri})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   "http://" + mv.addr + "/mcp",
		HTTPClient: &http.Client{Transport: tr},
		MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: sessionProtocol})
	if err != nil {
		t.Fatalf("connecting to mcpvisor's /mcp: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return c, cs
}

// listRoots calls the everything server's list_roots through mcpvisor and
// returns the root URIs it was given, one per line.
func listRoots(t *testing.T, cs *mcp.ClientSession) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__list_roots"})
	if err != nil {
		t.Fatalf("list_roots through mcpvisor: %v", err)
	}
	var text *mcp.TextContent
	if len(res.Content) == 1 {
		text, _ = res.Content[0].(*mcp.TextContent)
	}
	if text == nil || res.IsError {
		t.Fatalf("list_roots through mcpvisor: isError=%v %s", res.IsError, jsonText(res.Content))
	}
	return text.Text
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// Regression (#24, item 7): a 2026-07-28 upstream asks for roots in an
// input_required result, and the go-sdk client answered it from its own
// root list, which mcpvisor fills with the roots of the client that last
// connected: a call of client A got client B's roots. Each call must get
// its own client's roots, and only those, also when both call at once.
func TestRootsOf2026UpstreamAreTheCallers(t *testing.T) {
	srv := testutil.StartServer(t, bins["everything"], "-stateless", "-http", freeAddr(t))
	mv := startMcpvisor(t, fmt.Sprintf("server \"up\" {\n  url = %s\n  protocol_version = \"2026-07-28\"\n}\n", hclString(srv.URL)))
	const rootA, rootB = "file:///clients/a", "file:///clients/b"
	_, a := connectWithRoots(t, mv, rootA)
	waitTool(t, a, "up__list_roots")
	cb, b := connectWithRoots(t, mv, rootB)
	// B says its roots changed, so mcpvisor surely holds B's as the
	// roots of the client that last connected (whatever the GET stream's
	// timing), and B's own call sees them.
	cb.AddRoots(&mcp.Root{URI: rootB + "/more", Name: "more"})
	deadline := time.Now().Add(readyTimeout)
	for got := listRoots(t, b); !strings.Contains(got, rootB+"/more"); got = listRoots(t, b) {
		if time.Now().After(deadline) {
			t.Fatalf("client B's list_roots never reported its own roots; last: %q", got)
		}
		time.Sleep(50 * time.Millisecond)
	}

	if got := listRoots(t, a); got != rootA {
		t.Fatalf("client A's call got roots %q, want only its own %q", got, rootA)
	}
	var wg sync.WaitGroup
	for _, c := range []struct {
		cs   *mcp.ClientSession
		want string
	}{{a, rootA}, {b, rootB + "\n" + rootB + "/more"}} {
		for range 5 {
			wg.Go(func() {
				if got := listRoots(t, c.cs); got != c.want {
					t.Errorf("a call got roots %q, want only its own client's %q", got, c.want)
				}
			})
		}
	}
	wg.Wait()
}

// askedSession is a session whose client declared roots, opened its GET
// stream and is being asked for its roots on it, and will never answer.
type askedSession struct {
	*rawSession
	stream *http.Response
}

// openAskedSession opens an askedSession: initialize with the roots
// capability, the GET stream, then notifications/roots/list_changed, and
// waits until mcpvisor's roots/list arrives on the stream.
func openAskedSession(t *testing.T, mv *mcpvisor) *askedSession {
	t.Helper()
	s := &rawSession{mv: mv, hc: newHTTPClient(t, 0)}
	resp, body := s.post(t, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+sessionProtocol+
		`","capabilities":{"roots":{"listChanged":true}},"clientInfo":{"name":"hardening-silent","version":"1"}}}`)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"result"`) {
		t.Fatalf("initialize: %s %s", resp.Status, body)
	}
	s.id = resp.Header.Get("Mcp-Session-Id")
	if resp, body := s.post(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %s %s", resp.Status, body)
	}
	req, err := http.NewRequest(http.MethodGet, "http://"+mv.addr+"/mcp", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("MCP-Protocol-Version", sessionProtocol)
	req.Header.Set("Mcp-Session-Id", s.id)
	stream, err := s.hc.Do(req)
	if err != nil {
		t.Fatalf("GET /mcp: %v", err)
	}
	t.Cleanup(func() { stream.Body.Close() })
	if stream.StatusCode != http.StatusOK {
		t.Fatalf("GET /mcp: %s", stream.Status)
	}
	asked := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stream.Body)
		for sc.Scan() {
			if strings.Contains(sc.Text(), `"roots/list"`) {
				asked <- true
				return
			}
		}
		asked <- false
	}()
	// The GET stream is open: a list_changed now is asked about on it.
	if resp, body := s.post(t, `{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/roots/list_changed: %s %s", resp.Status, body)
	}
	select {
	case ok := <-asked:
		if !ok {
			t.Fatal("the GET stream ended before mcpvisor asked for roots on it")
		}
	case <-time.After(readyTimeout):
		t.Fatal("mcpvisor never asked for roots on the GET stream")
	}
	return &askedSession{rawSession: s, stream: stream}
}

// del sends DELETE for the session and returns how long it took.
func (s *rawSession) del(t *testing.T) time.Duration {
	t.Helper()
	req, err := http.NewRequest(http.MethodDelete, "http://"+s.mv.addr+"/mcp", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("MCP-Protocol-Version", sessionProtocol)
	req.Header.Set("Mcp-Session-Id", s.id)
	hc := newHTTPClient(t, 30*time.Second)
	start := time.Now()
	resp, err := hc.Do(req)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("DELETE /mcp: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE /mcp: %s", resp.Status)
	}
	return took
}

// Regression (#24, item 8): mcpvisor asks a client for its roots when it
// connects; a client that deleted its session while the question was
// unanswered waited for mcpvisor's 10 s roots timeout (the go-sdk closes a
// session only once its outgoing requests end), and so did mcpvisor's
// shutdown. A client's departure and SIGTERM must never wait on such a
// question.
func TestSessionCloseDoesNotWaitForRootsAsk(t *testing.T) {
	mv := startMcpvisor(t, echoBlock())

	// A client that never answers, deleting its session.
	if took := openAskedSession(t, mv).del(t); took >= closeBound {
		t.Fatalf("DELETE of a session being asked for roots took %s; it must not wait for the question", took)
	}

	// Real clients with a GET stream and roots, opening and closing.
	for i := range sessionsOpenedAndClosed {
		_, cs := connectWithRoots(t, mv, fmt.Sprintf("file:///clients/%d", i))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if _, err := cs.ListTools(ctx, nil); err != nil {
			t.Fatalf("session %d: tools/list: %v", i, err)
		}
		cancel()
		start := time.Now()
		if err := cs.Close(); err != nil {
			t.Errorf("session %d: close: %v", i, err)
		}
		if took := time.Since(start); took >= closeBound {
			t.Fatalf("session %d took %s to close; a close must not wait on the host", i, took)
		}
	}

	// SIGTERM with a session still being asked.
	openAskedSession(t, mv)
	start := time.Now()
	if err := syscall.Kill(mv.pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-mv.done:
		if took := time.Since(start); took >= termBound {
			t.Fatalf("mcpvisor took %s to exit on SIGTERM; it waited for a client's answer", took)
		}
	case <-time.After(termBound):
		t.Fatalf("mcpvisor did not exit within %s of SIGTERM while a client was being asked for roots", termBound)
	}
}
