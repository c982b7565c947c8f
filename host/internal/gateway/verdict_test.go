package gateway_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/gateway"
	"github.com/mcpvisor/mcpvisor/host/internal/policy"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// TestRefusedSubscriptionAndCompletionAreVerdicts: a subscription and a
// completion the policies refuse get -32011 and reach OnVerdict (which
// the host audits), like a refused call.
func TestRefusedSubscriptionAndCompletionAreVerdicts(t *testing.T) {
	e := policy.New([]*config.Policy{{Name: "me", Subjects: []string{"local"}, Tools: []string{"*"}}}, "alice", nil)
	var mu sync.Mutex
	var got []*gateway.Verdict
	env := newEnv(t, gateway.Options{
		Policy: func() *policy.Engine { return e },
		OnVerdict: func(_ context.Context, v *gateway.Verdict) {
			mu.Lock()
			got = append(got, v)
			mu.Unlock()
		},
	})
	ctx := testCtx(t)
	// A 2025-11-25 client: resources/subscribe answers the refusal.
	st, ct := mcp.NewInMemoryTransports()
	ss, err := env.gw.Server().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "downstream"}, nil).Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); ss.Wait() })
	var we *jsonrpc.Error
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "mem://alpha/notes/1"}); !errors.As(err, &we) || we.Code != recovery.CodeDenied {
		t.Fatalf("a subscription no policy allows: %v; want -32011", err)
	}
	_, err = cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "alpha__greet"},
		Argument: mcp.CompleteParamsArgument{Name: "who", Value: "a"}})
	if !errors.As(err, &we) || we.Code != recovery.CodeDenied {
		t.Fatalf("a completion of a prompt no policy allows: %v; want -32011", err)
	}
	// A 2026-07-28 client subscribes inside subscriptions/listen, which no
	// middleware sees: refused all the same.
	env.connect(t, nil).Subscribe(ctx, &mcp.SubscribeParams{URI: "mem://alpha/notes/2"})
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 3 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the 2026-07-28 subscription reached no verdict: %d verdicts", n)
		case <-time.After(10 * time.Millisecond):
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if got[2].Method != "resources/subscribe" || got[2].Allowed() || got[2].Name != "mem://alpha/notes/2" {
		t.Errorf("the 2026-07-28 subscription's verdict %+v; want it refused", got[2])
	}
	got = got[:2]
	if len(got) != 2 || got[0].Method != "resources/subscribe" || got[1].Method != "completion/complete" ||
		got[0].Allowed() || got[1].Allowed() || got[1].Kind != policy.Prompt || got[0].Subject == nil {
		t.Fatalf("verdicts %+v; want the refused subscription and completion, with the local subject", got)
	}
}
