package gateway

// Policies on the downstream side (docs/auth.md, docs/design.md §19): the
// outermost receiving middleware of the go-sdk server filters the lists
// each request gets by its caller, and refuses a call outside the caller's
// policies, or past one of their rate limits, before any handler (and so
// any upstream) sees it. The stdio forwarding path (forward.go) asks the
// same questions through admit before it forwards a tools/call as bytes.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/identity"
	"github.com/mcpvisor/mcpvisor/host/internal/policy"
	"github.com/mcpvisor/mcpvisor/host/internal/registry"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// Verdict is a policy decision on one call (tools/call, prompts/get,
// resources/read), as Options.OnVerdict receives it.
type Verdict struct {
	// Subject is the caller; nil for an anonymous one.
	Subject *identity.Subject
	// Method is the MCP method; Kind and Name what it names (the exposed
	// tool or prompt name, or the URI).
	Method string
	Kind   policy.Kind
	Name   string
	// Server and Original are the server block and upstream name the
	// name routes to, when the registry knows it.
	Server, Original string
	// Downstream is the session the request came on (nil when unknown).
	Downstream *mcp.ServerSession
	// Decision is the policy decision; Limited, when set, the rate limit
	// that refused an allowed call.
	Decision policy.Decision
	Limited  *policy.Limited
	// Start is when the decision was made.
	Start time.Time
}

// Allowed reports whether the call went on to its server.
func (v *Verdict) Allowed() bool { return v.Decision.Allowed && v.Limited == nil }

// policyEngine is the policies in force, nil without any.
func (g *Gateway) policyEngine() *policy.Engine {
	if g.opts.Policy == nil {
		return nil
	}
	return g.opts.Policy()
}

// subjectOf is the caller of a request: the subject the HTTP ingress put
// in the request's token info or context; nil for an HTTP request without
// one (a host without auth: anonymous); the local user for stdio and
// in-memory (library) transports, whose requests carry no HTTP header.
func subjectOf(ctx context.Context, req mcp.Request, e *policy.Engine) *identity.Subject {
	var extra *mcp.RequestExtra
	if req != nil {
		extra = req.GetExtra()
	}
	if extra != nil && extra.TokenInfo != nil {
		if s, ok := extra.TokenInfo.Extra[identity.TokenInfoKey].(*identity.Subject); ok && s != nil {
			return s
		}
	}
	if s := identity.FromContext(ctx); s != nil {
		return s
	}
	if extra != nil && extra.Header != nil {
		return nil // over HTTP, without auth
	}
	return e.Local()
}

// policies is the receiving middleware that applies the policies.
func (g *Gateway) policies(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		e := g.policyEngine()
		if e == nil {
			return next(ctx, method, req)
		}
		who := subjectOf(ctx, req, e)
		var ss *mcp.ServerSession
		if s, ok := req.GetSession().(*mcp.ServerSession); ok {
			ss = s
		}
		switch r := req.(type) {
		case *mcp.CallToolRequest:
			if r.Params != nil {
				if err := g.admit(ctx, e, who, ss, method, policy.Tool, r.Params.Name); err != nil {
					return nil, err
				}
			}
		case *mcp.GetPromptRequest:
			if r.Params != nil {
				if err := g.admit(ctx, e, who, ss, method, policy.Prompt, r.Params.Name); err != nil {
					return nil, err
				}
			}
		case *mcp.ReadResourceRequest:
			if r.Params != nil {
				if err := g.admit(ctx, e, who, ss, method, policy.Resource, r.Params.URI); err != nil {
					return nil, err
				}
			}
		case *mcp.CompleteRequest:
			if r.Params != nil && r.Params.Ref != nil {
				kind, name := policy.Prompt, r.Params.Ref.Name
				if r.Params.Ref.Type == "ref/resource" {
					kind, name = policy.Resource, r.Params.Ref.URI
				}
				if err := g.decideOnly(ctx, e, who, ss, method, kind, name); err != nil {
					return nil, err
				}
			}
		}
		// The audit line of the call names its caller: over stdio the
		// context has none yet.
		if who != nil && identity.FromContext(ctx) == nil {
			ctx = identity.NewContext(ctx, who)
		}
		// The handlers that decide for themselves (subscribe) get the
		// caller decided here, an anonymous one included.
		ctx = context.WithValue(ctx, callerKey{}, callerOfRequest{who})
		res, err := next(ctx, method, req)
		if err != nil {
			return res, err
		}
		// The lists the go-sdk server builds are fresh for each request:
		// filtering them in place touches no other caller's answer.
		switch l := res.(type) {
		case *mcp.ListToolsResult:
			ok := e.Visible(who, policy.Tool)
			l.Tools = slices.DeleteFunc(l.Tools, func(t *mcp.Tool) bool { return !ok(t.Name, g.aliases(policy.Tool, t.Name)...) })
			l.CacheScope = "private"
		case *mcp.ListPromptsResult:
			ok := e.Visible(who, policy.Prompt)
			l.Prompts = slices.DeleteFunc(l.Prompts, func(p *mcp.Prompt) bool { return !ok(p.Name, g.aliases(policy.Prompt, p.Name)...) })
			l.CacheScope = "private"
		case *mcp.ListResourcesResult:
			ok := e.Visible(who, policy.Resource)
			l.Resources = slices.DeleteFunc(l.Resources, func(r *mcp.Resource) bool { return !ok(r.URI) })
			l.CacheScope = "private"
		case *mcp.ListResourceTemplatesResult:
			ok := e.Visible(who, policy.Resource)
			l.ResourceTemplates = slices.DeleteFunc(l.ResourceTemplates, func(r *mcp.ResourceTemplate) bool { return !ok(r.URITemplate) })
			l.CacheScope = "private"
		}
		return res, err
	}
}

// callerKey is the context key of the caller the policies middleware
// found for a request (callerOfRequest).
type callerKey struct{}

// callerOfRequest is the caller of a request, nil for an anonymous one.
type callerOfRequest struct{ s *identity.Subject }

// decideSubscription applies the policies to a subscription: decided,
// never rate limited (a subscription is no call), audited when refused.
func (g *Gateway) decideSubscription(ctx context.Context, req *mcp.SubscribeRequest) error {
	e := g.policyEngine()
	if e == nil || req.Params == nil {
		return nil
	}
	var who *identity.Subject
	if c, ok := ctx.Value(callerKey{}).(callerOfRequest); ok {
		who = c.s
	} else {
		who = subjectOf(ctx, req, e)
	}
	return g.decideOnly(ctx, e, who, req.Session, "resources/subscribe", policy.Resource, req.Params.URI)
}

// admit decides a call of who to name, takes it from the rate limits when
// the policies allow it, tells OnVerdict, and returns the JSON-RPC error
// the caller gets when it is refused.
func (g *Gateway) admit(ctx context.Context, e *policy.Engine, who *identity.Subject, ss *mcp.ServerSession, method string, kind policy.Kind, name string) error {
	return g.verdict(ctx, e, who, ss, method, kind, name, true)
}

// decideOnly is admit without the rate limits: for a subscription or a
// completion, which name a resource or prompt but call nothing.
func (g *Gateway) decideOnly(ctx context.Context, e *policy.Engine, who *identity.Subject, ss *mcp.ServerSession, method string, kind policy.Kind, name string) error {
	return g.verdict(ctx, e, who, ss, method, kind, name, false)
}

func (g *Gateway) verdict(ctx context.Context, e *policy.Engine, who *identity.Subject, ss *mcp.ServerSession, method string, kind policy.Kind, name string, limited bool) error {
	now := time.Now()
	v := &Verdict{Subject: who, Method: method, Kind: kind, Name: name, Downstream: ss, Start: now}
	var aliases []string
	if g.registry != nil {
		switch kind {
		case policy.Tool:
			if te, ok := g.registry.LookupTool(name); ok {
				v.Server, v.Original, aliases = te.Server, te.Original, registry.Aliases(te.Full)
			} else if te, ok := g.registry.LookupDormant(name); ok {
				v.Server, v.Original, aliases = te.Server, te.Original, registry.Aliases(te.Full)
			} else if te, ok := g.registry.LookupUnlisted(name); ok {
				v.Server, v.Original, aliases = te.Server, te.Original, registry.Aliases(te.Full)
			}
		case policy.Prompt:
			if pe, ok := g.registry.LookupPrompt(name); ok {
				v.Server, v.Original, aliases = pe.Server, pe.Original, registry.Aliases(pe.Full)
			}
		case policy.Resource:
			v.Server, _ = g.registry.LookupResource(name)
			v.Original = name
		}
	}
	v.Decision = e.Decide(who, kind, name, aliases...)
	if v.Decision.Allowed && limited {
		v.Limited = e.Admit(who, kind, name, now, aliases...)
	}
	if g.opts.OnVerdict != nil {
		g.opts.OnVerdict(ctx, v)
	}
	switch {
	case !v.Decision.Allowed:
		g.logger.Info("call denied by policy", "method", method, "name", name, "subject", policy.Describe(who), "rule", v.Decision.Rule)
		return deniedError(kind, name, who, v.Decision)
	case v.Limited != nil:
		g.logger.Debug("call refused by a rate limit", "method", method, "name", name, "subject", policy.Describe(who), "rule", v.Limited.Rule, "retry_after", v.Limited.RetryAfter)
		return limitedError(kind, name, who, v.Limited, now)
	}
	return nil
}

// aliases are the other names of the exposed tool or prompt name that a
// policy glob may name (registry.Aliases); none for a name the registry
// does not know.
func (g *Gateway) aliases(kind policy.Kind, name string) []string {
	if g.registry == nil {
		return nil
	}
	switch kind {
	case policy.Tool:
		if te, ok := g.registry.LookupTool(name); ok {
			return registry.Aliases(te.Full)
		}
		if te, ok := g.registry.LookupDormant(name); ok {
			return registry.Aliases(te.Full)
		}
	case policy.Prompt:
		if pe, ok := g.registry.LookupPrompt(name); ok {
			return registry.Aliases(pe.Full)
		}
	}
	return nil
}

// AdmitLocal applies the policies in force to a call the local user makes
// without a session (Host.CallTool): nil when it may go on, else the
// JSON-RPC error a client would get.
func (g *Gateway) AdmitLocal(ctx context.Context, method string, kind policy.Kind, name string) error {
	e := g.policyEngine()
	if e == nil {
		return nil
	}
	return g.admit(ctx, e, e.Local(), nil, method, kind, name)
}

// deniedError is the JSON-RPC error of a call no policy allows: code
// recovery.CodeDenied, the rule in the message and in data.
func deniedError(kind policy.Kind, name string, who *identity.Subject, d policy.Decision) *jsonrpc.Error {
	data, _ := json.Marshal(map[string]any{"kind": "denied", "policy": d.Policy, "rule": d.Rule})
	why := fmt.Sprintf("%s %q denied to %s by %s", kind, name, policy.Describe(who), d.Rule)
	if d.Policy == "" {
		why = fmt.Sprintf("%s %q denied: %s", kind, name, d.Rule) // the rule names the caller
	}
	return &jsonrpc.Error{
		Code: recovery.CodeDenied,
		Message: why + "; the host's policies decide what each caller may use " +
			"(`mcpvisor policy check` explains a decision; docs/auth.md)",
		Data: data,
	}
}

// limitedError is the JSON-RPC error of a call past a rate limit: code
// recovery.CodeRateLimited, with when to retry in the message and in data
// (retry_after_ms, retry_at).
func limitedError(kind policy.Kind, name string, who *identity.Subject, l *policy.Limited, now time.Time) *jsonrpc.Error {
	ms := int64(math.Ceil(float64(l.RetryAfter) / float64(time.Millisecond)))
	data, _ := json.Marshal(map[string]any{
		"kind": "rate_limited", "policy": l.Policy, "rule": l.Rule,
		"retry_after_ms": ms, "retry_at": now.Add(l.RetryAfter).UTC().Format(time.RFC3339Nano),
	})
	return &jsonrpc.Error{
		Code: recovery.CodeRateLimited,
		Message: fmt.Sprintf("%s %q refused for %s: %s allows %d calls a minute; retry in %s",
			kind, name, policy.Describe(who), l.Rule, l.CallsPerMinute, (time.Duration(ms) * time.Millisecond).String()),
		Data: data,
	}
}
