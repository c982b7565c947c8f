package gateway

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/upstream"
)

// The bridge's state machine, driven as the gateway's handlers drive it:
// the upstream call is a func that asks the bridge for input as an
// upstream session does mid-call.

// askingCall is an upstream call that asks for one sampling and, once
// answered, one elicitation, then returns what it got.
func askingCall(ctx context.Context, d *bridgedCall) (mcp.Result, error) {
	s, err := d.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 5})
	if err != nil {
		return nil, err
	}
	e, err := d.Elicit(ctx, &mcp.ElicitParams{Message: "name?"})
	if err != nil {
		return nil, err
	}
	text := s.Content.(*mcp.TextContent).Text + "/" + e.Action
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil
}

func onlyKey(t *testing.T, m mcp.InputRequestMap) string {
	t.Helper()
	if len(m) != 1 {
		t.Fatalf("input requests %v, want one", m)
	}
	for k := range m {
		return k
	}
	return ""
}

// Two rounds of input, then the result; the call is forgotten after it.
func TestInputBridgeRounds(t *testing.T) {
	var b inputBridge
	ctx := context.Background()
	_, asks, state, err := b.run(ctx, nil, "", nil, nil, askingCall)
	if err != nil || state == "" {
		t.Fatalf("first round: asks %v, state %q, err %v", asks, state, err)
	}
	k := onlyKey(t, asks)
	if _, ok := asks[k].(*mcp.CreateMessageParams); !ok {
		t.Fatalf("first ask is a %T, want sampling", asks[k])
	}
	// A retry that answers nothing is asked the same again.
	_, again, state2, err := b.run(ctx, nil, state, nil, nil, askingCall)
	if err != nil || state2 != state || onlyKey(t, again) != k {
		t.Fatalf("unanswered retry: asks %v, state %q, err %v", again, state2, err)
	}
	_, asks, state2, err = b.run(ctx, nil, state, mcp.InputResponseMap{
		k: &mcp.CreateMessageWithToolsResult{Role: "assistant", Model: "m", Content: []mcp.Content{&mcp.TextContent{Text: "hi"}}},
	}, nil, askingCall)
	if err != nil || state2 != state {
		t.Fatalf("second round: asks %v, state %q, err %v", asks, state2, err)
	}
	k2 := onlyKey(t, asks)
	if _, ok := asks[k2].(*mcp.ElicitParams); !ok || k2 == k {
		t.Fatalf("second ask is a %T under %q, want an elicitation under a new key", asks[k2], k2)
	}
	res, asks, _, err := b.run(ctx, nil, state, mcp.InputResponseMap{k2: &mcp.ElicitResult{Action: "decline"}}, nil, askingCall)
	if err != nil || asks != nil {
		t.Fatalf("last round: asks %v, err %v", asks, err)
	}
	if got := res.(*mcp.CallToolResult).Content[0].(*mcp.TextContent).Text; got != "hi/decline" {
		t.Fatalf("result %q, want hi/decline", got)
	}
	if _, _, _, err := b.run(ctx, nil, state, nil, nil, askingCall); err != errUnknownRequestState {
		t.Fatalf("retry after the result: %v, want the unknown-state error", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.calls) != 0 {
		t.Fatalf("%d calls kept after the result", len(b.calls))
	}
}

// A client that never comes back: after inputWait the upstream call is
// cancelled (its ask returns the cancellation) and forgotten.
func TestInputBridgeAbandonedCall(t *testing.T) {
	defer func(d time.Duration) { inputWait = d }(inputWait)
	inputWait = 50 * time.Millisecond
	var b inputBridge
	ended := make(chan error, 1)
	_, _, state, err := b.run(context.Background(), nil, "", nil, nil, func(ctx context.Context, d *bridgedCall) (mcp.Result, error) {
		_, err := d.ListRoots(ctx, &mcp.ListRootsParams{})
		ended <- err
		return nil, err
	})
	if err != nil || state == "" {
		t.Fatalf("first round: state %q, err %v", state, err)
	}
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the abandoned call's ask ended with %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the abandoned call was not cancelled")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		n := len(b.calls)
		b.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the abandoned call is still kept")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, _, _, err := b.run(context.Background(), nil, state, nil, nil, askingCall); err != errUnknownRequestState {
		t.Fatalf("late retry: %v, want the unknown-state error", err)
	}
}

// A client that cancels a round cancels the upstream call.
func TestInputBridgeCancelledRound(t *testing.T) {
	var b inputBridge
	ctx := context.Background()
	ended := make(chan error, 1)
	call := func(ctx context.Context, d *bridgedCall) (mcp.Result, error) {
		if _, err := d.Elicit(ctx, &mcp.ElicitParams{Message: "?"}); err != nil {
			ended <- err
			return nil, err
		}
		<-ctx.Done() // the upstream works until cancelled
		ended <- ctx.Err()
		return nil, ctx.Err()
	}
	_, asks, state, err := b.run(ctx, nil, "", nil, nil, call)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(50*time.Millisecond, cancel)
	_, _, _, err = b.run(rctx, nil, state, mcp.InputResponseMap{onlyKey(t, asks): &mcp.ElicitResult{Action: "accept"}}, nil, call)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled round: %v, want context.Canceled", err)
	}
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("upstream call ended with %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream call was not cancelled")
	}
}

// At most maxBridgedCalls calls wait for answers; the next one that would
// wait is refused with an error saying so and its upstream call cancelled.
// Calls that never ask take no place.
func TestInputBridgeLimit(t *testing.T) {
	defer func(n int) { maxBridgedCalls = n }(maxBridgedCalls)
	maxBridgedCalls = 2
	var b inputBridge
	ctx := context.Background()
	for i := range 3 {
		res, _, _, err := b.run(ctx, nil, "", nil, nil, func(context.Context, *bridgedCall) (mcp.Result, error) {
			return &mcp.CallToolResult{}, nil
		})
		if err != nil || res == nil {
			t.Fatalf("plain call %d: %v", i, err)
		}
	}
	var states []string
	for range 2 {
		_, _, state, err := b.run(ctx, nil, "", nil, nil, askingCall)
		if err != nil {
			t.Fatal(err)
		}
		states = append(states, state)
	}
	ended := make(chan error, 1)
	_, _, _, err := b.run(ctx, nil, "", nil, nil, func(ctx context.Context, d *bridgedCall) (mcp.Result, error) {
		_, err := d.Elicit(ctx, &mcp.ElicitParams{})
		ended <- err
		return nil, err
	})
	if err == nil || !strings.Contains(err.Error(), "calls waiting for their clients' answers") {
		t.Fatalf("third waiting call: %v, want the limit's error", err)
	}
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("the refused call's upstream ended with %v, want context.Canceled", err)
	}
	// Clean up: the waiting calls end when cancelled.
	b.mu.Lock()
	for _, s := range states {
		b.calls[s].cancel()
	}
	b.mu.Unlock()
}

// The capabilities a 2026-07-28 request declared are read (the go-sdk
// decodes them out of its _meta with a 32 KiB decoder buffer each time) only
// when the upstream makes a request that needs them, and then once per call
// however many requests it makes (host/bench/README.md,
// BenchmarkCallAllocation).
func TestBridgedReadsDeclaredCapabilitiesOnlyWhenAsked(t *testing.T) {
	g := &Gateway{}
	ctx := context.Background()
	reads := 0
	caps := func() *mcp.ClientCapabilities {
		reads++
		return &mcp.ClientCapabilities{Sampling: &mcp.SamplingCapabilities{}}
	}
	var state string
	var answers mcp.InputResponseMap
	plain := func(ctx context.Context, d upstream.Downstream) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	}
	if _, err := bridged(g, ctx, nil, caps, &state, &answers, nil, plain, func(mcp.InputRequestMap, string) *mcp.CallToolResult { return nil }); err != nil {
		t.Fatal(err)
	}
	if reads != 0 {
		t.Fatalf("a call that made no upstream request read the declared capabilities %d times, want 0", reads)
	}
	asking := func(ctx context.Context, d upstream.Downstream) (*mcp.CallToolResult, error) {
		for range 3 {
			if ip := d.InitializeParams(); ip == nil || ip.Capabilities == nil || ip.Capabilities.Sampling == nil {
				t.Errorf("the upstream call sees declared %+v, want the request's capabilities", ip)
			}
		}
		return &mcp.CallToolResult{}, nil
	}
	if _, err := bridged(g, ctx, nil, caps, &state, &answers, nil, asking, func(mcp.InputRequestMap, string) *mcp.CallToolResult { return nil }); err != nil {
		t.Fatal(err)
	}
	if reads != 1 {
		t.Fatalf("a call that looked at them three times read the declared capabilities %d times, want 1", reads)
	}
}
