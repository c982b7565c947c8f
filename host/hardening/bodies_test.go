//go:build unix

package hardening_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const (
	// partialConns is how many connections send part of a body and stop.
	partialConns = 200
	// partialDeclared is the Content-Length each of them announces.
	partialDeclared = 4 << 20
	// partialSent is how much of it each sends before stopping: 200 MB
	// in all, far more than the body budget the test configures.
	partialSent = 1 << 20
	// partialRSSBudget bounds mcpvisor's RSS growth meanwhile: the body
	// budget (16 MiB here) and 200 connections' buffers fit in far less;
	// bodies held as they arrive (200 MB and more) do not.
	partialRSSBudget = 100 * mb
	// partialCloseBound bounds how long a partial body's connection may
	// stay open: body_timeout is 2 s here, this leaves ample room.
	partialCloseBound = 30 * time.Second
)

// TestPartialBodiesBoundedAndClosed opens 200 connections that each send
// a POST /mcp announcing a 4 MB body, send 1 MB of it and stop. With
// body_timeout = "2s" and max_body_bytes_inflight = "16MiB", mcpvisor's
// RSS must not grow by more than 100 MB, every one of those connections
// must be closed within 30 s, and another client's call must succeed
// while they are open.
func TestPartialBodiesBoundedAndClosed(t *testing.T) {
	mv := startMcpvisorWith(t, "  body_timeout = \"2s\"\n  max_body_bytes_inflight = \"16MiB\"\n", echoBlock())
	cs := connectClient(t, mv)
	waitTool(t, cs, "echo__echo")
	before := mv.rssKB(t)
	peak := mv.trackPeak(t)

	head := fmt.Sprintf("POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n", mv.addr, partialDeclared)
	piece := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo__echo","arguments":{"text":"` +
		strings.Repeat("x", 64<<10))
	conns := make([]net.Conn, partialConns)
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	start := time.Now()
	var wg sync.WaitGroup
	for i := range conns {
		c, err := net.DialTimeout("tcp", mv.addr, 10*time.Second)
		if err != nil {
			t.Fatalf("connection %d: dial: %v", i, err)
		}
		conns[i] = c
		wg.Go(func() {
			// A write that blocks (mcpvisor stopped reading, or closed the
			// connection) ends this client's sending: that is the point.
			c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, head); err != nil {
				return
			}
			for sent := 0; sent < partialSent; sent += len(piece) {
				if _, err := c.Write(piece); err != nil {
					return
				}
			}
		})
	}
	t.Logf("%d connections announce %d bytes and send %d", partialConns, partialDeclared, partialSent)

	// Another client's call, while the partial bodies are arriving.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__echo", Arguments: map[string]any{"text": "meanwhile"}})
	cancel()
	if err != nil {
		t.Errorf("a call during the partial bodies failed: %v", err)
	} else if res.IsError {
		t.Errorf("a call during the partial bodies answered an error: %+v", res.Content)
	}
	mv.healthz(t, "during the partial bodies")
	wg.Wait()

	// Every partial body's connection is closed by mcpvisor (after a
	// 408 or 503, or without an answer), none left open.
	open := 0
	statuses := map[string]int{}
	for _, c := range conns {
		c.SetReadDeadline(start.Add(partialCloseBound))
		r := bufio.NewReader(c)
		if resp, err := http.ReadResponse(r, nil); err == nil {
			statuses[resp.Status]++
			resp.Body.Close()
		}
		_, err := io.Copy(io.Discard, r)
		if isTimeout(err) {
			open++
		}
	}
	peakKB := peak.peakKB()
	t.Logf("RSS before %d kB, peak %d kB (+%d MB); answers %v; %d/%d connections still open after %s",
		before, peakKB, (peakKB-before)/mb, statuses, open, partialConns, partialCloseBound)
	if open > 0 {
		t.Errorf("%d of %d connections that stopped sending their body were still open %s later (body_timeout is 2 s)",
			open, partialConns, partialCloseBound)
	}
	if grow := peakKB - before; grow > partialRSSBudget {
		t.Errorf("%d partial bodies grew mcpvisor's RSS by %d MB (from %d MB to %d MB), budget %d MB",
			partialConns, grow/mb, before/mb, peakKB/mb, partialRSSBudget/mb)
	}
	// Every partial body was refused by one of the two bounds, and
	// /metrics counts each refusal under the setting that made it.
	if n := mv.limitHits(t, "body_timeout") + mv.limitHits(t, "max_body_bytes_inflight"); n < partialConns {
		t.Errorf("mcpvisor_limit_hits_total counts %d refusals for body_timeout and max_body_bytes_inflight, want %d (one per partial body)", n, partialConns)
	}
	mv.healthz(t, "after the partial bodies")
	mv.alive(t)
}

// statelessProtocol is the first protocol version without sessions.
const statelessProtocol = "2026-07-28"

// refusalLog is an http.RoundTripper that passes requests on and records
// each 503 answer: its Retry-After header and body.
type refusalLog struct {
	next http.RoundTripper
	mu   sync.Mutex
	// refusals are the 503 answers seen, as "Retry-After|body".
	refusals []string
}

func (l *refusalLog) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		return resp, err
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	resp.Body = io.NopCloser(strings.NewReader(string(b)))
	l.mu.Lock()
	l.refusals = append(l.refusals, resp.Header.Get("Retry-After")+"|"+string(b))
	l.mu.Unlock()
	return resp, nil
}

// TestStatelessInflightCap sets max_inflight = 4 and fires 12 concurrent
// stateless (2026-07-28) calls to the echo server's sleep tool (2 s each):
// some must be refused with 503 and a Retry-After header naming
// max_inflight, the others must succeed, and none may hang.
func TestStatelessInflightCap(t *testing.T) {
	const (
		maxInflight = 4
		callers     = 12
	)
	mv := startMcpvisorWith(t, fmt.Sprintf("  max_inflight = %d\n", maxInflight), echoBlock())
	waitTool(t, connectClient(t, mv), "echo__sleep")

	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	refusals := &refusalLog{next: tr}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "hardening-test", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: "http://" + mv.addr + "/mcp", HTTPClient: &http.Client{Transport: refusals}, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: statelessProtocol})
	if err != nil {
		t.Fatalf("connecting a stateless client: %v", err)
	}
	t.Cleanup(func() { cs.Close() })

	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__sleep", Arguments: map[string]any{"ms": 2000}})
			if err == nil && res.IsError {
				err = fmt.Errorf("tool error: %+v", res.Content)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the calls did not all end within 60 s: %v", ctx.Err())
	}
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		}
	}
	refusals.mu.Lock()
	defer refusals.mu.Unlock()
	t.Logf("%d calls: %d answered, %d refused with 503 (%v)", callers, ok, len(refusals.refusals), errs)
	if len(refusals.refusals) == 0 {
		t.Errorf("%d concurrent stateless calls with max_inflight = %d: none was refused with 503", callers, maxInflight)
	}
	if ok+len(refusals.refusals) != callers {
		t.Errorf("%d answered and %d refused with 503, want %d in all: %v", ok, len(refusals.refusals), callers, errs)
	}
	if ok < maxInflight {
		t.Errorf("only %d calls answered, want at least max_inflight = %d", ok, maxInflight)
	}
	for _, r := range refusals.refusals {
		retryAfter, body, _ := strings.Cut(r, "|")
		if retryAfter == "" || !strings.Contains(body, "max_inflight") {
			t.Errorf("a 503 without Retry-After or not naming max_inflight: Retry-After %q, body %q", retryAfter, body)
		}
	}
	if n := mv.limitHits(t, "max_inflight"); n != len(refusals.refusals) {
		t.Errorf("mcpvisor_limit_hits_total{limit=\"max_inflight\"} is %d, want the %d refusals", n, len(refusals.refusals))
	}
	mv.alive(t)
}
