//go:build unix

package hardening_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// abandonedSessions is how many sessions a client opens and never closes:
// the default max_sessions.
const abandonedSessions = 10000

// reclaimedRSSBudget bounds mcpvisor's RSS once the abandoned sessions are
// closed, over its RSS before they were opened.
const reclaimedRSSBudget = 30 * mb

// TestAbandonedSessionsAreCappedAndReaped: a client that opens sessions
// (initialize) and never DELETEs them is held to max_sessions — the next
// one takes the place of the least recently used idle session, so the
// count stays at the cap — and the sessions close after
// session_idle_timeout, after which mcpvisor's memory is back near where
// it started.
func TestAbandonedSessionsAreCappedAndReaped(t *testing.T) {
	mv := startMcpvisorWith(t, fmt.Sprintf("  max_sessions = %d\n  session_idle_timeout = \"15s\"\n", abandonedSessions), echoBlock())
	before := mv.rssKB(t)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}, Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	initializeSession := func() (int, string, error) {
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"abandoner","version":"1"}}}`
		req, _ := http.NewRequest(http.MethodPost, "http://"+mv.addr+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), nil
	}
	initialize := func() (int, error) {
		code, _, err := initializeSession()
		return code, err
	}
	// The first session is the least recently used one once all are open.
	code, first, err := initializeSession()
	if err != nil || code != http.StatusOK || first == "" {
		t.Fatalf("the first session: status %d (%v)", code, err)
	}

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		refused  int
		firstErr error
	)
	next := make(chan struct{})
	go func() {
		for range abandonedSessions - 1 {
			next <- struct{}{}
		}
		close(next)
	}()
	for range 8 {
		wg.Go(func() {
			for range next {
				code, err := initialize()
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if code != http.StatusOK {
					refused++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil || refused > 0 {
		t.Fatalf("opening %d sessions: %d refused, error %v", abandonedSessions, refused, firstErr)
	}
	if n := openSessions(t, mv.addr); n < abandonedSessions {
		t.Errorf("%d sessions open after opening %d, want them all", n, abandonedSessions)
	}
	if code, err := initialize(); err != nil || code != http.StatusOK {
		t.Fatalf("a session past max_sessions: status %d (%v), want 200 (the least recently used idle session makes room)", code, err)
	}
	waitSessionsAtMost(t, mv.addr, abandonedSessions)
	waitClosed(t, "the least recently used idle session", func() int {
		ping, _ := http.NewRequest(http.MethodPost, "http://"+mv.addr+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"ping"}`))
		ping.Header.Set("Content-Type", "application/json")
		ping.Header.Set("Accept", "application/json, text/event-stream")
		ping.Header.Set("Mcp-Session-Id", first)
		ping.Header.Set("Mcp-Protocol-Version", sessionProtocol)
		resp, err := hc.Do(ping)
		if err != nil {
			t.Fatalf("ping on the first session: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	})
	mv.healthz(t, "with every session taken")

	deadline := time.Now().Add(60 * time.Second)
	for openSessions(t, mv.addr) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d abandoned sessions still open 60s after their idle timeout of 15s", openSessions(t, mv.addr))
		}
		time.Sleep(500 * time.Millisecond)
	}
	if code, err := initialize(); err != nil || code != http.StatusOK {
		t.Fatalf("a new session after the idle ones were closed: status %d (%v)", code, err)
	}
	var now int64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
		if now = mv.rssKB(t); now-before <= reclaimedRSSBudget || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("RSS %d MB before, %d MB after the sessions were closed", before>>10, now>>10)
	if now-before > reclaimedRSSBudget {
		t.Errorf("RSS grew by %d MB after %d sessions were opened and closed, want at most %d MB", (now-before)>>10, abandonedSessions, reclaimedRSSBudget>>10)
	}
}

// waitClosed waits until ping, a request in the session that made room for
// a newcomer, gets 404: it is closed in the background.
func waitClosed(t *testing.T, what string, ping func() int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code := ping()
		if code == http.StatusNotFound {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s still answers %d 30s after a newcomer took its place, want 404", what, code)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitSessionsAtMost waits until at most limit sessions are open: the one a
// newcomer evicted is closed in the background.
func waitSessionsAtMost(t *testing.T, addr string, limit int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := openSessions(t, addr)
		if n <= limit {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%d sessions still open 30s after the last newcomer, want at most max_sessions = %d", n, limit)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// openSessions reads mcpvisor_downstream_sessions from /metrics.
func openSessions(t *testing.T, addr string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "mcpvisor_downstream_sessions") {
			f := strings.Fields(line)
			n, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return int(n)
		}
	}
	t.Fatal("no mcpvisor_downstream_sessions in /metrics")
	return 0
}

// Regression (#23, 5): at max_sessions a newcomer takes the place of the
// least recently used idle session instead of being refused, while a
// session with a call in flight is never the one closed.
func TestSessionsAtTheCapMakeRoomForNewcomers(t *testing.T) {
	const maxSessions = 50
	release := filepath.Join(t.TempDir(), "release")
	mv := startMcpvisorWith(t, fmt.Sprintf("  max_sessions = %d\n", maxSessions), askerBlock(t, map[string]string{"ASKER_RELEASE": release}))
	// Whatever happens, the held call ends before mcpvisor is stopped.
	t.Cleanup(func() { os.WriteFile(release, nil, 0o600) })
	{
		cs := connectClient(t, mv)
		waitTool(t, cs, "asker__hold")
		cs.Close()
	}

	// The busy session: the oldest, with a call that runs until released.
	busy := openRawSession(t, mv)
	held := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+mv.addr+"/mcp",
			strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"asker__hold","arguments":{}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", sessionProtocol)
		req.Header.Set("Mcp-Session-Id", busy.id)
		resp, err := busy.hc.Do(req)
		if err != nil {
			held <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		held <- resp.Status + " " + string(b)
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(release + ".held"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hold call did not reach the server within 30s")
		}
	}

	// Idle sessions up to the cap, oldest first.
	var idle []*rawSession
	for len(idle) < maxSessions-1 {
		idle = append(idle, openRawSession(t, mv))
	}
	if n := openSessions(t, mv.addr); n < maxSessions {
		t.Fatalf("%d sessions open, want %d", n, maxSessions)
	}

	// A newcomer at the cap initializes and calls a tool.
	cs := connectClient(t, mv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "asker__flood", Arguments: map[string]any{"method": "sampling", "n": 0}})
	if err != nil || res.IsError {
		t.Fatalf("a new client at max_sessions: call failed: %v %+v", err, res)
	}
	waitClosed(t, "the least recently used idle session", func() int {
		resp, _ := idle[0].post(t, `{"jsonrpc":"2.0","id":3,"method":"ping"}`)
		return resp.StatusCode
	})

	// More newcomers than there are idle sessions: every idle one goes,
	// the busy one stays.
	for range maxSessions {
		openRawSession(t, mv)
	}
	waitSessionsAtMost(t, mv.addr, maxSessions)
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-held:
		if !strings.Contains(got, "released") {
			t.Errorf("the call in flight on the oldest session did not complete: %s", got)
		}
	case <-time.After(time.Minute):
		t.Fatal("the call in flight did not complete within a minute of its release")
	}
	if resp, body := busy.post(t, `{"jsonrpc":"2.0","id":4,"method":"ping"}`); resp.StatusCode != http.StatusOK {
		t.Errorf("the session that had a call in flight was closed: %s %s", resp.Status, body)
	}
	// Every newcomer past the cap evicted one idle session: at least the
	// second wave's maxSessions, each counted under max_sessions.
	if n := mv.limitHits(t, "max_sessions"); n < maxSessions {
		t.Errorf("mcpvisor_limit_hits_total{limit=\"max_sessions\"} is %d, want at least %d evictions", n, maxSessions)
	}
}
