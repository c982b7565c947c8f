package host

// The calls a Host makes on its servers: Host.CallTool and the backend the
// gateway reaches the supervisors through (docs/design.md §6).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/gateway"
	"github.com/mcpvisor/mcpvisor/host/internal/identity"
	"github.com/mcpvisor/mcpvisor/host/internal/policy"
	"github.com/mcpvisor/mcpvisor/host/internal/registry"
	"github.com/mcpvisor/mcpvisor/host/internal/transport"
	"github.com/mcpvisor/mcpvisor/host/internal/upstream"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// Tools returns the exposed tools, sorted by exposed name.
func (h *Host) Tools() []Tool {
	entries := h.registry.Tools()
	out := make([]Tool, 0, len(entries))
	for _, e := range entries {
		out = append(out, Tool{Tool: e.Tool, Server: e.Server, Original: e.Original})
	}
	return out
}

// CallTool calls an exposed tool (e.g. "echo__echo") with args, which may be
// nil, a json.RawMessage, or any value that marshals to a JSON object. The
// call takes the same path as a gateway call (operate): the same
// supervision and recovery, Serve's shutdown cuts it like one, and the same
// policies apply, as the local user (docs/auth.md): a refused call is a
// *jsonrpc.Error with code recovery.CodeDenied or recovery.CodeRateLimited.
func (h *Host) CallTool(ctx context.Context, name string, args any) (*mcp.CallToolResult, error) {
	e, ok := h.registry.LookupTool(name)
	if !ok {
		// A tool of a parked or restarting server still reaches it.
		e, ok = h.registry.LookupDormant(name)
	}
	if !ok {
		// So does one of a server that never listed its tools.
		e, ok = h.registry.LookupUnlisted(name)
	}
	if !ok {
		return nil, fmt.Errorf("%w %q: not exposed by any ready server (see `mcpvisor tools`)", ErrUnknownTool, name)
	}
	// The caller of a library call is the local user (docs/auth.md).
	if err := h.gateway.AdmitLocal(ctx, "tools/call", policy.Tool, name); err != nil {
		return nil, err
	}
	if e := h.policyEngine(); e != nil && identity.FromContext(ctx) == nil {
		ctx = identity.NewContext(ctx, e.Local()) // for the audit line
	}
	var raw json.RawMessage
	switch a := args.(type) {
	case nil:
	case json.RawMessage:
		raw = a
	default:
		b, err := json.Marshal(a)
		if err != nil {
			return nil, fmt.Errorf("tool %q: encoding arguments: %w", name, err)
		}
		raw = b
	}
	p := &mcp.CallToolParamsRaw{Name: e.Original, Arguments: raw}
	return operate(ctx, h, e.Server, "tools/call", func(ctx context.Context, s *upstream.Supervisor) (*mcp.CallToolResult, error) {
		return s.CallTool(ctx, nil, p)
	})
}

// operate runs one operation (op names it in errors) on the server's
// supervisor. It is the one path from every entry to a supervisor: the
// gateway's, HTTP and stdio, dormant tools included (backend, through
// wireOperate), and the Host's own (Host.CallTool). It looks the
// supervisor up and lets shutdown cut the call (cuttable, cutError). Its
// error is a Go error: mcpvisor's own refusals are *recovery.Error values
// made by the supervisor's recovery path (docs/design.md §6).
func operate[R any](ctx context.Context, h *Host, server, op string, f func(context.Context, *upstream.Supervisor) (R, error)) (R, error) {
	s, err := h.sup(server)
	if err != nil {
		var zero R
		return zero, err
	}
	ctx, done := h.cuttable(ctx)
	defer done()
	res, err := f(ctx, s)
	return res, cutError(ctx, server, op, err)
}

func (h *Host) sup(name string) (*upstream.Supervisor, error) {
	set := h.servers.Load()
	s, ok := set.sups[name]
	if !ok {
		for _, srv := range set.cfg.Servers {
			if srv.Name == name && srv.Disabled {
				return nil, fmt.Errorf("%w %q: it is disabled (enabled = false in its block); set enabled = true and reload", ErrUnknownServer, name)
			}
		}
		return nil, fmt.Errorf("%w %q", ErrUnknownServer, name)
	}
	return s, nil
}

// gatewaySink forwards registry changes to the gateway once it exists. No
// change can arrive before then: supervisors start only in Start.
type gatewaySink struct{ g *gateway.Gateway }

func (s *gatewaySink) Apply(ch registry.Changes) { s.g.Apply(ch) }

// backend adapts the Host to gateway.Backend: route by server name to that
// server's supervisor. Every operation goes through wireOperate. The
// gateway's context for a call ends once its answer is written to the
// client: the upstream response's bytes of a tools/call, resources/read or
// prompts/get count against max_inflight_bytes until then
// (transport.HoldResultsFor).
type backend struct{ h *Host }

// wireOperate is operate for the gateway: its error is the one a downstream
// client gets (wireError).
func wireOperate[R any](ctx context.Context, b backend, server, op string, f func(context.Context, *upstream.Supervisor) (R, error)) (R, error) {
	res, err := operate(ctx, b.h, server, op, f)
	return res, wireError(err)
}

func (b backend) CallTool(ctx context.Context, d upstream.Downstream, server string, p *mcp.CallToolParamsRaw) (*mcp.CallToolResult, error) {
	return wireOperate(transport.HoldResultsFor(ctx), b, server, "tools/call", func(ctx context.Context, s *upstream.Supervisor) (*mcp.CallToolResult, error) {
		return s.CallTool(ctx, d, p)
	})
}

func (b backend) Forward(ctx context.Context, d upstream.Downstream, server, method, name string, params json.RawMessage) (json.RawMessage, error) {
	return wireOperate(transport.HoldResultsFor(ctx), b, server, method, func(ctx context.Context, s *upstream.Supervisor) (json.RawMessage, error) {
		return s.Forward(ctx, d, method, name, params)
	})
}

func (b backend) ReadResource(ctx context.Context, d upstream.Downstream, server string, p *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
	return wireOperate(transport.HoldResultsFor(ctx), b, server, "resources/read", func(ctx context.Context, s *upstream.Supervisor) (*mcp.ReadResourceResult, error) {
		return s.ReadResource(ctx, d, p)
	})
}

func (b backend) GetPrompt(ctx context.Context, d upstream.Downstream, server string, p *mcp.GetPromptParams) (*mcp.GetPromptResult, error) {
	return wireOperate(transport.HoldResultsFor(ctx), b, server, "prompts/get", func(ctx context.Context, s *upstream.Supervisor) (*mcp.GetPromptResult, error) {
		return s.GetPrompt(ctx, d, p)
	})
}

func (b backend) Complete(ctx context.Context, d upstream.Downstream, server string, p *mcp.CompleteParams) (*mcp.CompleteResult, error) {
	return wireOperate(ctx, b, server, "completion/complete", func(ctx context.Context, s *upstream.Supervisor) (*mcp.CompleteResult, error) {
		return s.Complete(ctx, d, p)
	})
}

func (b backend) Subscribe(ctx context.Context, server string, p *mcp.SubscribeParams) error {
	_, err := wireOperate(ctx, b, server, "resources/subscribe", func(ctx context.Context, s *upstream.Supervisor) (struct{}, error) {
		return struct{}{}, s.Subscribe(ctx, p)
	})
	return err
}

func (b backend) Unsubscribe(ctx context.Context, server string, p *mcp.UnsubscribeParams) error {
	_, err := wireOperate(ctx, b, server, "resources/unsubscribe", func(ctx context.Context, s *upstream.Supervisor) (struct{}, error) {
		return struct{}{}, s.Unsubscribe(ctx, p)
	})
	return err
}

// wireError is how a downstream client gets an operation's error, made in
// one place (recovery.WireError): mcpvisor's own errors carry
// recovery.CodeUpstream and their kind, an upstream's JSON-RPC error stays
// what it is, and so does a client's cancellation (the go-sdk answers
// nothing for a canceled request).
func wireError(err error) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return err
	}
	return recovery.WireError(err)
}
