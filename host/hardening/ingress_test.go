//go:build unix

package hardening_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	// stalledConns is how many connections announce a body they never send.
	stalledConns = 500
	// stalledBodyLength is the Content-Length each of them announces.
	stalledBodyLength = 4 << 20
	// stalledRSSBudget bounds mcpvisor's RSS growth while they are open:
	// 500 goroutines and their buffers fit in far less; a body buffer
	// sized by the announced length (2 GB in all) does not.
	stalledRSSBudget = 50 * mb
	// stalledObserve is how long the connections are held open while RSS
	// is sampled.
	stalledObserve = 3 * time.Second
	// silentCloseBound bounds how long a connection that never sends a
	// byte may stay open: the header timeout is 10 s, this leaves room.
	silentCloseBound = 30 * time.Second
)

// TestStalledBodiesKeepMemoryBounded opens 500 connections that each send
// a POST /mcp head announcing a 4 MB body and then nothing. Holding them
// open must not grow mcpvisor's RSS by more than 50 MB, and /healthz must
// keep answering while they are open.
func TestStalledBodiesKeepMemoryBounded(t *testing.T) {
	mv := startMcpvisor(t, echoBlock())
	mv.healthz(t, "before")
	before := mv.rssKB(t)

	head := fmt.Sprintf("POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n", mv.addr, stalledBodyLength)
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	peak := mv.trackPeak(t)
	for i := range stalledConns {
		c, err := net.DialTimeout("tcp", mv.addr, 10*time.Second)
		if err != nil {
			t.Fatalf("connection %d: dial: %v", i, err)
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatalf("connection %d: writing the head: %v", i, err)
		}
		// Past the budget already: the test has failed, and opening the
		// rest would only cost the machine gigabytes.
		if (i+1)%50 == 0 {
			if grow := mv.rssKB(t) - before; grow > stalledRSSBudget {
				t.Logf("stopping after %d connections: RSS already +%d MB", i+1, grow/mb)
				break
			}
		}
	}
	t.Logf("%d connections sent a head announcing %d bytes and nothing more", len(conns), stalledBodyLength)

	mv.healthz(t, "right after the stalled heads")
	time.Sleep(stalledObserve)
	mv.healthz(t, fmt.Sprintf("%s after the stalled heads", stalledObserve))
	mv.alive(t)

	// Still open: the peak covers the whole time they were held.
	open := 0
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); isTimeout(err) {
			open++
		}
	}
	peakKB := peak.peakKB()
	after := mv.rssKB(t)
	t.Logf("RSS before %d kB, peak %d kB (+%d kB), now %d kB; %d/%d connections still open",
		before, peakKB, peakKB-before, after, open, len(conns))
	if grow := peakKB - before; grow > stalledRSSBudget {
		t.Errorf("%d stalled bodies grew mcpvisor's RSS by %d MB (from %d MB to %d MB), budget %d MB for %d",
			len(conns), grow/mb, before/mb, peakKB/mb, stalledRSSBudget/mb, stalledConns)
	}
}

// TestSilentConnectionClosed dials mcpvisor and sends nothing: the header
// timeout must close the connection (EOF or reset, possibly after a 408)
// within 30 s.
func TestSilentConnectionClosed(t *testing.T) {
	t.Parallel()
	mv := startMcpvisor(t, echoBlock())

	c, err := net.DialTimeout("tcp", mv.addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	start := time.Now()
	c.SetReadDeadline(start.Add(silentCloseBound))
	var got strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		got.Write(buf[:n])
		if err == nil {
			continue // a response before the close (408) is fine
		}
		if isTimeout(err) {
			t.Fatalf("a connection that sent nothing was still open after %s (read %q)", silentCloseBound, got.String())
		}
		t.Logf("closed after %s: %v (read %q)", time.Since(start).Round(time.Millisecond), err, got.String())
		break
	}
	mv.healthz(t, "after the silent connection")
}

// TestRebindingHostRefused sends requests with a foreign Host header to
// the loopback listener: /mcp, /status and /healthz must all answer 403
// (DNS rebinding), and a Host of "127.0.0.1:PORT@evil.com" must not be
// served on /mcp (400 or 403). Loopback Host headers are served (200),
// so the refusals are about the Host and nothing else.
func TestRebindingHostRefused(t *testing.T) {
	mv := startMcpvisor(t, echoBlock())
	_, port, _ := net.SplitHostPort(mv.addr)

	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + sessionProtocol +
		`","capabilities":{},"clientInfo":{"name":"hardening-test","version":"1"}}}`
	request := func(path, host string) string {
		if path == "/mcp" {
			return fmt.Sprintf("POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"+
				"Accept: application/json, text/event-stream\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
				host, len(initialize), initialize)
		}
		return fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host)
	}

	cases := []struct {
		path, host string
		want       []int
	}{
		// Controls: the listener's own address and localhost are served.
		{"/mcp", mv.addr, []int{http.StatusOK}},
		{"/status", mv.addr, []int{http.StatusOK}},
		{"/healthz", mv.addr, []int{http.StatusOK}},
		{"/healthz", "localhost:" + port, []int{http.StatusOK}},
		{"/status", "localhost:" + port, []int{http.StatusOK}},
		// DNS rebinding: a foreign name resolved to 127.0.0.1.
		{"/mcp", "evil.example.com", []int{http.StatusForbidden}},
		{"/status", "evil.example.com", []int{http.StatusForbidden}},
		{"/healthz", "evil.example.com", []int{http.StatusForbidden}},
		{"/mcp", "evil.example.com:" + port, []int{http.StatusForbidden}},
		{"/status", "evil.example.com:" + port, []int{http.StatusForbidden}},
		{"/healthz", "evil.example.com:" + port, []int{http.StatusForbidden}},
		// A loopback-looking prefix with userinfo-style junk after it.
		{"/mcp", mv.addr + "@evil.com", []int{http.StatusBadRequest, http.StatusForbidden}},
	}
	for _, tc := range cases {
		t.Run(tc.path+"/Host="+tc.host, func(t *testing.T) {
			resp, body, err := rawExchange(t, mv.addr, request(tc.path, tc.host))
			if err != nil {
				t.Fatalf("%s with Host %q: no response: %v", tc.path, tc.host, err)
			}
			t.Logf("%s with Host %q: %s", tc.path, tc.host, resp.Status)
			for _, w := range tc.want {
				if resp.StatusCode == w {
					return
				}
			}
			t.Errorf("%s with Host %q answered %s, want one of %v; body: %.200q",
				tc.path, tc.host, resp.Status, tc.want, body)
		})
	}
	mv.alive(t)
}
