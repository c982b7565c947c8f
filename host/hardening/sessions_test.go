package hardening_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// abandonedSessions is how many sessions a client opens and never closes:
// the default max_sessions.
const abandonedSessions = 10000

// reclaimedRSSBudget bounds mcpvisor's RSS once the abandoned sessions are
// closed, over its RSS before they were opened.
const reclaimedRSSBudget = 30 * mb

// TestAbandonedSessionsAreCappedAndReaped: a client that opens sessions
// (initialize) and never DELETEs them is held to max_sessions — the next
// one gets 503 — and the sessions close after session_idle_timeout, after
// which new sessions are served again and mcpvisor's memory is back near
// where it started.
func TestAbandonedSessionsAreCappedAndReaped(t *testing.T) {
	mv := startMcpvisorWith(t, fmt.Sprintf("  max_sessions = %d\n  session_idle_timeout = \"15s\"\n", abandonedSessions), echoBlock())
	before := mv.rssKB(t)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}, Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	initialize := func() (int, error) {
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"abandoner","version":"1"}}}`
		req, _ := http.NewRequest(http.MethodPost, "http://"+mv.addr+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		refused  int
		firstErr error
	)
	next := make(chan struct{})
	go func() {
		for range abandonedSessions {
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
	if code, err := initialize(); err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("a session past max_sessions: status %d (%v), want 503", code, err)
	}
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
