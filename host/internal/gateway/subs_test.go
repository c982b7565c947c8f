package gateway_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/gateway"
	"github.com/mcpvisor/mcpvisor/host/internal/limits"
)

// legacyClient connects a session-based (2025-11-25) client to the
// gateway, the kind that subscribes with resources/subscribe. Closing the
// returned client session ends the session without unsubscribing.
func legacyClient(t *testing.T, e *env) (*mcp.ClientSession, *mcp.ServerSession) {
	t.Helper()
	ctx := testCtx(t)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := e.gw.Server().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c"}, nil).Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); ss.Wait() })
	return cs, ss
}

func subscribe(t *testing.T, cs *mcp.ClientSession, uri string) {
	t.Helper()
	if err := cs.Subscribe(testCtx(t), &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatalf("subscribe to %s: %v", uri, err)
	}
}

// TestSubscriptionEndsWithSession: a client that subscribes and goes away
// without unsubscribing releases the upstream subscription.
func TestSubscriptionEndsWithSession(t *testing.T) {
	e := newEnv(t, gateway.Options{})
	ctx := testCtx(t)
	events := e.rec["alpha"].subEvents
	cs, ss := legacyClient(t, e)
	const uri = "mem://alpha/notes/7"
	subscribe(t, cs, uri)
	if ev := nextEvent(t, ctx, events); ev != uri {
		t.Fatalf("upstream event %q, want %q", ev, uri)
	}
	cs.Close()
	ss.Wait()
	if ev := nextEvent(t, ctx, events); ev != "-"+uri {
		t.Errorf("upstream event %q after the client went away, want unsubscribe", ev)
	}
}

// TestSubscriptionOutlivesOneOfTwoSessions: the upstream subscription two
// clients share is released only when the second one goes away.
func TestSubscriptionOutlivesOneOfTwoSessions(t *testing.T) {
	e := newEnv(t, gateway.Options{})
	ctx := testCtx(t)
	events := e.rec["alpha"].subEvents
	cs0, ss0 := legacyClient(t, e)
	cs1, ss1 := legacyClient(t, e)
	const shared, own, later = "mem://alpha/notes/1", "mem://alpha/notes/2", "mem://alpha/notes/3"
	subscribe(t, cs0, shared)
	subscribe(t, cs1, shared)
	subscribe(t, cs0, own)
	for _, want := range []string{shared, own} {
		if ev := nextEvent(t, ctx, events); ev != want {
			t.Fatalf("upstream event %q, want %q", ev, want)
		}
	}

	cs0.Close()
	ss0.Wait()
	// The first client's own URI is released when it goes away...
	if ev := nextEvent(t, ctx, events); ev != "-"+own {
		t.Fatalf("upstream event %q after the first client went away, want -%s", ev, own)
	}
	// ...and the shared one is not: the next upstream event is the second
	// client's next subscription, which waits for the first one's cleanup.
	subscribe(t, cs1, later)
	if ev := nextEvent(t, ctx, events); ev != later {
		t.Fatalf("upstream event %q, want %q (the shared subscription must outlive the first client)", ev, later)
	}

	cs1.Close()
	ss1.Wait()
	got := map[string]bool{nextEvent(t, ctx, events): true, nextEvent(t, ctx, events): true}
	if !got["-"+shared] || !got["-"+later] {
		t.Errorf("upstream events %v after the last client went away, want -%s and -%s", got, shared, later)
	}
	noEvent(t, events)
}

// refused checks that err is the refusal of a subscription at a bound.
func refused(t *testing.T, err error, bound string) {
	t.Helper()
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) || werr.Code != jsonrpc.CodeInvalidRequest || !strings.Contains(werr.Message, bound) {
		t.Errorf("subscription past the bound: got %v, want JSON-RPC %d naming %q", err, jsonrpc.CodeInvalidRequest, bound)
	}
}

// TestSubscriptionsPerSessionBound: a session at its bound is refused
// before any upstream call; other sessions are not.
func TestSubscriptionsPerSessionBound(t *testing.T) {
	hits := limits.New()
	e := newEnv(t, gateway.Options{MaxSessionSubscriptions: 2, LimitHits: hits})
	ctx := testCtx(t)
	events := e.rec["alpha"].subEvents
	cs, _ := legacyClient(t, e)
	other, _ := legacyClient(t, e)
	subscribe(t, cs, "mem://alpha/notes/1")
	subscribe(t, cs, "mem://alpha/notes/2")
	nextEvent(t, ctx, events)
	nextEvent(t, ctx, events)

	err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "mem://alpha/notes/3"})
	refused(t, err, "the most one session may hold")
	noEvent(t, events)
	if n := hits.Count(limits.MaxSubscriptions); n != 1 {
		t.Errorf("max_subscriptions hits = %d, want 1", n)
	}

	subscribe(t, cs, "mem://alpha/notes/1") // held already: no new one
	subscribe(t, other, "mem://alpha/notes/3")
	if ev := nextEvent(t, ctx, events); ev != "mem://alpha/notes/3" {
		t.Errorf("upstream event %q, want the other session's subscription", ev)
	}

	// Unsubscribing makes room again.
	if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: "mem://alpha/notes/2"}); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, ctx, events); ev != "-mem://alpha/notes/2" {
		t.Errorf("upstream event %q, want unsubscribe", ev)
	}
	subscribe(t, cs, "mem://alpha/notes/3") // shared with the other session
	noEvent(t, events)
}

// TestSubscriptionsHostBound: a subscription to one more distinct URI
// than the host allows is refused before any upstream call; sharing a URI
// already subscribed is not.
func TestSubscriptionsHostBound(t *testing.T) {
	hits := limits.New()
	e := newEnv(t, gateway.Options{MaxSubscriptions: 2, LimitHits: hits})
	ctx := testCtx(t)
	events := e.rec["alpha"].subEvents
	cs0, _ := legacyClient(t, e)
	cs1, _ := legacyClient(t, e)
	subscribe(t, cs0, "mem://alpha/notes/1")
	subscribe(t, cs1, "mem://alpha/notes/2")
	nextEvent(t, ctx, events)
	nextEvent(t, ctx, events)

	err := cs1.Subscribe(ctx, &mcp.SubscribeParams{URI: "mem://alpha/notes/3"})
	refused(t, err, "the most it allows at once")
	noEvent(t, events)
	if n := hits.Count(limits.MaxSubscriptions); n != 1 {
		t.Errorf("max_subscriptions hits = %d, want 1", n)
	}
	subscribe(t, cs1, "mem://alpha/notes/1") // no new distinct URI
	noEvent(t, events)
}
