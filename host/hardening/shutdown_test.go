//go:build unix

package hardening_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// cutCallBound bounds how long after SIGTERM a call in flight may wait for
// its answer: the drain waits up to 20 s for calls, Serve 2 s more, then
// the call is cut; this leaves room on a loaded machine.
const cutCallBound = 90 * time.Second

// TestSIGTERMRefusesNewSessionsAndAnswersCutCalls sends SIGTERM while a
// session's call to the sleep tool (60 s) is in flight. While the host
// drains, a client opening a new session must get 503 with Retry-After;
// when the host stops waiting, the call in flight must end with a
// JSON-RPC error saying the host is shutting down, not with the
// connection closed under it.
func TestSIGTERMRefusesNewSessionsAndAnswersCutCalls(t *testing.T) {
	mv := startMcpvisor(t, echoBlock())
	cs := connectClient(t, mv)
	waitTool(t, cs, "echo__sleep")

	callErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), cutCallBound)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__sleep", Arguments: map[string]any{"ms": 60000}})
		if err == nil {
			err = fmt.Errorf("the call answered %+v, want an error", res)
		}
		callErr <- err
	}()
	waitMetric(t, mv, "mcpvisor_calls_in_flight", map[string]string{"server": "echo"}, func(v float64) bool { return v == 1 })

	if err := syscall.Kill(mv.pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The drain has begun once /readyz says so.
	hc := newHTTPClient(t, healthzTimeout)
	deadline := time.Now().Add(readyTimeout)
	for {
		resp, err := hc.Get("http://" + mv.addr + "/readyz")
		if err != nil {
			t.Fatalf("/readyz after SIGTERM: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), "draining") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz did not report draining within %s of SIGTERM: %s %s", readyTimeout, resp.Status, body)
		}
		time.Sleep(20 * time.Millisecond)
	}

	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + sessionProtocol +
		`","capabilities":{},"clientInfo":{"name":"hardening-test","version":"1"}}}`
	resp, body, err := rawExchange(t, mv.addr, fmt.Sprintf("POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", mv.addr, len(initialize), initialize))
	switch {
	case err != nil:
		t.Errorf("a new session while draining: no answer: %v", err)
	case resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "":
		t.Errorf("a new session while draining answered %s (Retry-After %q), want 503 with Retry-After; body %.300q",
			resp.Status, resp.Header.Get("Retry-After"), body)
	default:
		t.Logf("a new session while draining: %s, Retry-After %s: %s", resp.Status, resp.Header.Get("Retry-After"), strings.TrimSpace(body))
	}

	select {
	case err := <-callErr:
		var wire *jsonrpc.Error
		if !errors.As(err, &wire) || !strings.Contains(wire.Message, "shutting down") {
			t.Errorf("the call cut by the shutdown ended with %v (%T), want a JSON-RPC error saying the host is shutting down", err, err)
		} else {
			t.Logf("the cut call's error: %d %s", wire.Code, wire.Message)
		}
	case <-time.After(cutCallBound):
		t.Fatalf("the call in flight had no answer %s after SIGTERM", cutCallBound)
	}
	select {
	case <-mv.done:
	case <-time.After(stopTimeout):
		t.Errorf("mcpvisor did not exit within %s of answering the cut call", stopTimeout)
	}
}

// refusingUpstream is a streamable HTTP MCP server (the go-sdk's) until
// refuse is set; from then on it forgets every session (404) and answers
// initialize with a JSON-RPC error, as a server that broke after an
// upgrade does.
type refusingUpstream struct {
	refuse atomic.Bool
	sdk    http.Handler
}

func (u *refusingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case !u.refuse.Load():
		u.sdk.ServeHTTP(w, r)
	case r.Header.Get("Mcp-Session-Id") != "":
		http.Error(w, "session not found", http.StatusNotFound)
	case r.Method != http.MethodPost:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	default:
		var msg struct {
			ID json.RawMessage `json:"id"`
		}
		if json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&msg) != nil || msg.ID == nil {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32603,"message":"initialization refused"}}`, msg.ID)
	}
}

// TestParkedCallCountedAsParked parks an HTTP server whose reconnect
// fails with a JSON-RPC error (max_retries = 0) and calls its tool: the
// call is refused because the server is parked, and /metrics must count
// it with outcome="parked", not "protocol_error" (the upstream never saw
// the call).
func TestParkedCallCountedAsParked(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "refusing", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, in struct {
		Text string `json:"text"`
	}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	})
	up := &refusingUpstream{sdk: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)}
	hs := httptest.NewServer(up)
	t.Cleanup(func() {
		hs.Close()
		// The session mcpvisor had before the upstream broke: forgotten
		// by the refusing handler, still open in the go-sdk server.
		for ss := range srv.Sessions() {
			ss.Close()
		}
	})
	mv := startMcpvisor(t, fmt.Sprintf("server \"web\" {\n  url = %s\n  reconnect {\n    max_retries = 0\n  }\n}\n", hclString(hs.URL)))
	cs := connectClient(t, mv)
	waitTool(t, cs, "web__echo")

	// The upstream breaks; its clients' connections drop, so mcpvisor
	// finds its session gone, fails to initialize a new one, and parks.
	up.refuse.Store(true)
	hs.CloseClientConnections()
	waitFor(t, "web parked", func() bool { return mv.status(t)["web"].State == "parked" })

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "web__echo", Arguments: map[string]any{"text": "x"}})
	if err == nil || !strings.Contains(err.Error(), "parked") {
		t.Fatalf("a call to the parked server answered %v, want an error saying it is parked", err)
	}
	t.Logf("the call's error: %v", err)
	got := map[string]float64{}
	for _, m := range scrapeMetrics(t, mv)["mcpvisor_calls_total"].GetMetric() {
		if l := labels(m); l["server"] == "web" && l["tool"] == "echo" {
			got[l["outcome"]] += m.GetCounter().GetValue()
		}
	}
	t.Logf("mcpvisor_calls_total{server=\"web\",tool=\"echo\"} by outcome: %v", got)
	if got["parked"] != 1 || len(got) != 1 {
		t.Errorf("one call refused because web is parked: outcomes %v, want only parked = 1", got)
	}
}

// TestStatelessRequestsAreNotSessions holds three stateless (2026-07-28)
// calls in flight and reads mcpvisor_downstream_sessions: it must still
// count the one 2025 session open, not the stateless requests.
func TestStatelessRequestsAreNotSessions(t *testing.T) {
	mv := startMcpvisor(t, echoBlock())
	waitTool(t, connectClient(t, mv), "echo__sleep")
	sessions := func() float64 {
		return sum(scrapeMetrics(t, mv)["mcpvisor_downstream_sessions"], nil)
	}
	if n := sessions(); n != 1 {
		t.Fatalf("mcpvisor_downstream_sessions = %v with one session open, want 1", n)
	}

	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stateless, err := mcp.NewClient(&mcp.Implementation{Name: "hardening-test", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: "http://" + mv.addr + "/mcp", HTTPClient: &http.Client{Transport: tr}, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: statelessProtocol})
	if err != nil {
		t.Fatalf("connecting a stateless client: %v", err)
	}
	t.Cleanup(func() { stateless.Close() })
	callCtx, stopCalls := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	t.Cleanup(stopCalls)
	for range 3 {
		wg.Go(func() {
			stateless.CallTool(callCtx, &mcp.CallToolParams{Name: "echo__sleep", Arguments: map[string]any{"ms": 60000}})
		})
	}
	waitMetric(t, mv, "mcpvisor_calls_in_flight", map[string]string{"server": "echo"}, func(v float64) bool { return v == 3 })
	if n := sessions(); n != 1 {
		t.Errorf("mcpvisor_downstream_sessions = %v with one session open and 3 stateless calls in flight, want 1", n)
	}
}

// waitFor polls cond every 50 ms until it holds, for at most readyTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, readyTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitMetric waits until the sum of the samples of name whose labels
// include want satisfies ok.
func waitMetric(t *testing.T, mv *mcpvisor, name string, want map[string]string, ok func(float64) bool) {
	t.Helper()
	var v float64
	waitFor(t, fmt.Sprintf("%s%v (last %v)", name, want, v), func() bool {
		v = sum(scrapeMetrics(t, mv)[name], want)
		return ok(v)
	})
}

// scrapeMetrics reads mcpvisor's /metrics.
func scrapeMetrics(t *testing.T, mv *mcpvisor) map[string]*dto.MetricFamily {
	t.Helper()
	hc := newHTTPClient(t, healthzTimeout)
	resp, err := hc.Get("http://" + mv.addr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// labels are a sample's labels by name.
func labels(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, lp := range m.GetLabel() {
		l[lp.GetName()] = lp.GetValue()
	}
	return l
}

// sum adds the counter and gauge samples of f whose labels include want.
func sum(f *dto.MetricFamily, want map[string]string) float64 {
	total := 0.0
next:
	for _, m := range f.GetMetric() {
		l := labels(m)
		for k, v := range want {
			if l[k] != v {
				continue next
			}
		}
		total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return total
}
