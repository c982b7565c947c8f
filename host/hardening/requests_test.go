//go:build unix

package hardening_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// defaultMaxPending is max_pending_requests when a server block leaves it
// unset.
const defaultMaxPending = 16

// floodRequests is how many sampling requests the hostile server sends at
// once: on an unbounded mcpvisor each is a goroutine and a request held
// open at the client (60,000 took 1.7 GB).
const floodRequests = 20000

// floodRSSBudget bounds mcpvisor's RSS growth while the hostile server
// floods it with requests to the client.
const floodRSSBudget = 100 * mb

var askerOnce struct {
	sync.Once
	path string
	err  error
}

// askerBlock builds the hostile server (host/hardening/internal/asker) once
// and returns a server block "asker" running it with env.
func askerBlock(t *testing.T, env map[string]string) string {
	t.Helper()
	return askerBlockWith(t, env, "")
}

// askerBlockWith is askerBlock with extra server attributes (lines).
func askerBlockWith(t *testing.T, env map[string]string, attrs string) string {
	t.Helper()
	askerOnce.Do(func() {
		dir, err := os.MkdirTemp("", "asker")
		if err != nil {
			askerOnce.err = err
			return
		}
		askerOnce.path = filepath.Join(dir, "asker")
		askerOnce.err = testutil.GoBuild(askerOnce.path, "./host/hardening/internal/asker")
	})
	if askerOnce.err != nil {
		t.Fatal(askerOnce.err)
	}
	envHCL := ""
	for k, v := range env {
		envHCL += fmt.Sprintf("%s = %s, ", k, hclString(v))
	}
	return fmt.Sprintf("server \"asker\" {\n  command = %s\n  env = { %s }\n%s}\n", hclString(askerOnce.path), envHCL, attrs)
}

// floodReport is the asker's report of a flood (its "flood" tool).
type floodReport struct {
	Sent               int    `json:"sent"`
	Answered           int    `json:"answered"`
	CapDeclined        int    `json:"cap_declined"`
	CapabilityDeclined int    `json:"capability_declined"`
	Other              int    `json:"other"`
	FirstError         string `json:"first_error"`
	Done               bool   `json:"done"`
}

// flood calls the asker's "flood" tool and decodes its report.
func flood(ctx context.Context, cs *mcp.ClientSession, method string, n int) (floodReport, error) {
	var rep floodReport
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "asker__flood", Arguments: map[string]any{"method": method, "n": n}})
	if err != nil {
		return rep, err
	}
	if res.IsError || len(res.Content) != 1 {
		return rep, fmt.Errorf("flood failed: %+v", res.Content)
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		return rep, fmt.Errorf("flood answered a %T", res.Content[0])
	}
	return rep, json.Unmarshal([]byte(tc.Text), &rep)
}

// connectWith opens a go-sdk client session with opts to mcpvisor's /mcp,
// closed when the test ends.
func connectWith(t *testing.T, mv *mcpvisor, opts *mcp.ClientOptions, middleware ...mcp.Middleware) *mcp.ClientSession {
	t.Helper()
	return connectVersion(t, mv, sessionProtocol, opts, middleware...)
}

// connectVersion is connectWith speaking protocol version.
func connectVersion(t *testing.T, mv *mcpvisor, version string, opts *mcp.ClientOptions, middleware ...mcp.Middleware) *mcp.ClientSession {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	client := mcp.NewClient(&mcp.Implementation{Name: "hardening-test", Version: "1"}, opts)
	client.AddReceivingMiddleware(middleware...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   "http://" + mv.addr + "/mcp",
		HTTPClient: &http.Client{Transport: tr},
		MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connecting to mcpvisor's /mcp: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// Regression (#23, 3): a server that sends sampling requests in a loop
// during a call gets at most max_pending_requests of them to the client at
// once (the default, and a configured one); every one past the cap is
// declined at once with an error naming max_pending_requests, and
// mcpvisor's memory stays bounded.
func TestSamplingFloodIsBoundedPerServer(t *testing.T) {
	for _, tc := range []struct {
		name  string
		attrs string
		cap   int
	}{
		{"default", "", defaultMaxPending},
		{"configured", "  max_pending_requests = 5\n", 5},
	} {
		t.Run(tc.name, func(t *testing.T) { testSamplingFlood(t, tc.attrs, tc.cap) })
	}
}

func testSamplingFlood(t *testing.T, attrs string, maxPending int) {
	status := filepath.Join(t.TempDir(), "status.json")
	mv := startMcpvisor(t, askerBlockWith(t, map[string]string{"ASKER_STATUS": status}, attrs))

	release := make(chan struct{})
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) })
	var now, most, seen atomic.Int64
	cs := connectWith(t, mv, &mcp.ClientOptions{
		CreateMessageHandler: func(ctx context.Context, _ *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			seen.Add(1)
			n := now.Add(1)
			defer now.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			select {
			case <-release:
				return &mcp.CreateMessageResult{Model: "test", Role: "assistant", Content: &mcp.TextContent{Text: "ok"}}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	})
	waitTool(t, cs, "asker__flood")
	before := mv.rssKB(t)
	peak := mv.trackPeak(t)

	type outcome struct {
		rep floodReport
		err error
	}
	done := make(chan outcome, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	go func() {
		rep, err := flood(ctx, cs, "sampling", floodRequests)
		done <- outcome{rep, err}
	}()

	// Every request but those the client holds is declined; the client
	// holds them until then, so more would show here.
	deadline := time.Now().Add(2 * time.Minute)
	var rep floodReport
	for {
		if m := most.Load(); m > int64(maxPending) {
			t.Fatalf("the client had %d sampling requests of one server at once, want at most max_pending_requests = %d", m, maxPending)
		}
		if b, err := os.ReadFile(status); err == nil && json.Unmarshal(b, &rep) == nil &&
			rep.CapDeclined+rep.Other+rep.CapabilityDeclined >= floodRequests-maxPending {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server's %d requests were not all answered or declined within 2m while the client held %d (most at once: %d); server's report: %+v",
				floodRequests, now.Load(), most.Load(), rep)
		}
		time.Sleep(50 * time.Millisecond)
	}
	peakKB := peak.peakKB()
	mv.healthz(t, "while the client holds the pending requests")
	releaseOnce.Do(func() { close(release) })
	var out outcome
	select {
	case out = <-done:
	case <-ctx.Done():
		t.Fatal("the flood call did not return after the client answered")
	}
	if out.err != nil {
		t.Fatalf("the flood call failed: %v", out.err)
	}
	rep = out.rep
	t.Logf("report %+v; the client saw %d requests, at most %d at once; RSS %d MB before, peak %d MB",
		rep, seen.Load(), most.Load(), before>>10, peakKB>>10)
	if m := most.Load(); m > int64(maxPending) || m == 0 {
		t.Errorf("the client had at most %d sampling requests at once, want 1 to %d", m, maxPending)
	}
	if rep.Answered != int(seen.Load()) || rep.Answered > maxPending {
		t.Errorf("the server got %d answers and the client saw %d requests; want the same, at most %d", rep.Answered, seen.Load(), maxPending)
	}
	if rep.CapDeclined != floodRequests-rep.Answered || rep.Other != 0 || rep.CapabilityDeclined != 0 {
		t.Errorf("past the cap: %d declined naming max_pending_requests, %d other errors (first: %q); want all %d past it declined",
			rep.CapDeclined, rep.Other+rep.CapabilityDeclined, rep.FirstError, floodRequests-rep.Answered)
	}
	if grew := peakKB - before; grew > floodRSSBudget {
		t.Errorf("mcpvisor's RSS grew by %d MB during a flood of %d requests to the client, want at most %d MB", grew>>10, floodRequests, floodRSSBudget>>10)
	}
	if n := mv.limitHits(t, "max_pending_requests"); n != rep.CapDeclined {
		t.Errorf("mcpvisor_limit_hits_total{limit=\"max_pending_requests\"} is %d, want the %d requests declined at the cap", n, rep.CapDeclined)
	}
}

// Regression (#23, 3): a server's sampling, roots and elicitation requests
// never reach a client that did not declare the capability, whether it
// gets them as requests (session-based versions) or as input requests of
// an input_required result (2026-07-28); the server gets an error saying
// so.
func TestRequestsNeverReachAClientWithoutTheCapability(t *testing.T) {
	for _, version := range []string{sessionProtocol, "2026-07-28"} {
		t.Run(version, func(t *testing.T) { testRequestsWithoutCapability(t, version) })
	}
}

func testRequestsWithoutCapability(t *testing.T, version string) {
	mv := startMcpvisor(t, askerBlock(t, nil))
	var received sync.Map // method → *atomic.Int64
	count := func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch method {
			case "sampling/createMessage", "roots/list", "elicitation/create":
				n, _ := received.LoadOrStore(method, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
			}
			return next(ctx, method, req)
		}
	}
	// Capabilities set and empty: no roots (the go-sdk's default), no
	// sampling or elicitation (no handlers).
	cs := connectVersion(t, mv, version, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}}, count)
	waitTool(t, cs, "asker__flood")
	for _, method := range []string{"sampling", "roots", "elicitation"} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		rep, err := flood(ctx, cs, method, 1)
		cancel()
		if err != nil {
			t.Fatalf("%s: the flood call failed: %v", method, err)
		}
		if rep.CapabilityDeclined != 1 {
			t.Errorf("%s: the server's request was not declined for the missing capability: %+v", method, rep)
		}
	}
	received.Range(func(method, n any) bool {
		t.Errorf("the client received %d %s request(s) without declaring the capability", n.(*atomic.Int64).Load(), method)
		return true
	})
}
