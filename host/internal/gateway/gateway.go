// Package gateway is mcpvisor's downstream side: one MCP server that exposes
// the registry's union of upstream tools, prompts, resources and templates,
// served over stdio and streamable HTTP.
//
// Design note. The registry pushes net changes into the gateway (Apply),
// which registers one handler per exposed item on the go-sdk server. Each
// handler is a closure that captured its upstream server and original name
// when it was registered, so the tools/call path does no registry lookup,
// takes no lock of ours and re-encodes nothing: it copies the raw params,
// puts the original name back and hands them to the Backend, together with
// the downstream session the request came from (what the upstream sends
// back during the request goes there). Results and errors come back
// untouched, so a *jsonrpc.Error from an upstream keeps its code, message
// and data. Only requests that name something the go-sdk server does not
// route itself (completion references, subscriptions) go through the
// registry's lock-free lookups. On stdio, tools/call skips the SDK server
// altogether (forward.go). For clients on 2026-07-28, tools/call,
// prompts/get and resources/read run through the input bridge
// (inputbridge.go), which turns an upstream's mid-call sampling,
// elicitation and roots requests into input_required results.
package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/discovery"
	"github.com/mcpvisor/mcpvisor/host/internal/limits"
	"github.com/mcpvisor/mcpvisor/host/internal/policy"
	"github.com/mcpvisor/mcpvisor/host/internal/registry"
	"github.com/mcpvisor/mcpvisor/host/internal/transport"
	"github.com/mcpvisor/mcpvisor/host/internal/upstream"
	"github.com/mcpvisor/mcpvisor/host/internal/wire"
)

// Backend is how the gateway reaches upstream servers. The host implements
// it by routing to each server's supervisor, which adds supervision and
// recovery. Every method names the server block that owns the item; d is
// the downstream client the request came from (what the upstream sends
// back during the request — progress, logs, sampling, elicitation, roots —
// goes to it).
type Backend interface {
	// CallTool calls a tool; params.Name is already the original tool name.
	CallTool(ctx context.Context, d upstream.Downstream, server string, params *mcp.CallToolParamsRaw) (*mcp.CallToolResult, error)
	// Forward sends a tools/call, resources/read or prompts/get (method)
	// with params as JSON, which already name the original tool or prompt
	// (name: that name, or the URI), and returns the upstream's result as
	// JSON, which the gateway passes on as it is (passthrough.go).
	Forward(ctx context.Context, d upstream.Downstream, server, method, name string, params json.RawMessage) (json.RawMessage, error)
	// ReadResource reads a resource; URIs are never renamed.
	ReadResource(ctx context.Context, d upstream.Downstream, server string, params *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error)
	// GetPrompt gets a prompt; params.Name is already the original name.
	GetPrompt(ctx context.Context, d upstream.Downstream, server string, params *mcp.GetPromptParams) (*mcp.GetPromptResult, error)
	// Complete asks for completions; a prompt reference already carries
	// the original prompt name.
	Complete(ctx context.Context, d upstream.Downstream, server string, params *mcp.CompleteParams) (*mcp.CompleteResult, error)
	// Subscribe subscribes to updates of a resource.
	Subscribe(ctx context.Context, server string, params *mcp.SubscribeParams) error
	// Unsubscribe ends a subscription made with Subscribe.
	Unsubscribe(ctx context.Context, server string, params *mcp.UnsubscribeParams) error
}

// Options configures a Gateway.
type Options struct {
	// Name and Version are the server implementation info reported to
	// downstream clients ("mcpvisor", the host's version).
	Name, Version string

	// LimitHits counts the sessions evicted at max_sessions and the
	// subscriptions refused at their bounds; nil counts nothing.
	LimitHits *limits.Hits

	// MaxSessionSubscriptions bounds the resource URIs one downstream
	// session may be subscribed to at once; zero means
	// DefaultMaxSessionSubscriptions.
	MaxSessionSubscriptions int
	// MaxSubscriptions bounds the distinct resource URIs subscribed to
	// upstream at once, over every session; zero means
	// DefaultMaxSubscriptions.
	MaxSubscriptions int

	// Logger receives the gateway's logs and the go-sdk server's. Nil
	// means no logging.
	Logger hclog.Logger

	// Registry routes completion references and subscriptions by exposed
	// prompt name or URI, and tools/call on stdio by exposed tool name.
	// Nil means completion and subscriptions fail with a clear error and
	// every call goes through the go-sdk server.
	Registry *registry.Registry

	// Backend reaches the upstream servers. Required.
	Backend Backend

	// SessionTimeout closes an HTTP session that has seen no request for
	// this long; zero keeps idle sessions until the client deletes them.
	SessionTimeout time.Duration

	// WriteTimeout bounds each write to an HTTP client: a client that
	// does not take a write within it loses its answer and its stream
	// (http.go). Zero: no deadline.
	WriteTimeout time.Duration

	// OnRoots, if set, receives the roots of a downstream client that
	// declared the roots capability, each time one initializes or says its
	// roots changed (session-based protocol versions only: 2026-07-28 has
	// no server-to-client requests outside a request). It runs on a
	// goroutine of its own.
	OnRoots func(roots []*mcp.Root)

	// OnToolsList, if set, is called when a client lists tools (an agent
	// starting up): the host nudges parked servers to try again. It must
	// not block.
	OnToolsList func()
	// Policy, if set, returns the policies in force (nil: none, every
	// caller may use everything). It is called on every request, so a
	// reload takes effect at once.
	Policy func() *policy.Engine
	// OnVerdict, if set, is told the policy decision on every call
	// (tools/call, prompts/get, resources/read) while policies are in
	// force: the host counts them and audits the refusals. It must not
	// block.
	OnVerdict func(ctx context.Context, v *Verdict)

	// Discovery, if set, returns the discovery settings in force (nil:
	// every tool is listed). Like Policy it is called on every request.
	// Search needs the index EnableSearch builds (discovery.go).
	Discovery func() *discovery.Settings

	// RequestContext, if set, derives the context a request over HTTP is
	// forwarded with from its HTTP headers (the host's tracer takes the
	// W3C trace context from there).
	RequestContext func(ctx context.Context, h http.Header) context.Context
}

// rootsTimeout bounds asking a downstream client for its roots.
const rootsTimeout = 10 * time.Second

// Gateway is the downstream MCP server. It implements registry.Sink.
type Gateway struct {
	opts     Options
	logger   hclog.Logger
	server   *mcp.Server
	backend  Backend
	registry *registry.Registry

	httpOnce    sync.Once
	httpHandler http.Handler
	answers     answers   // the POSTs being served (http.go)
	httpCalls   httpCalls // the calls answered as bytes over HTTP (httpforward.go)
	standalone  streams   // the standalone streams open, by session (httpforward.go)

	// subMu guards subs and sessionSubs and serialises the upstream
	// subscribe and unsubscribe calls, so a URI is subscribed upstream
	// exactly once while any downstream session wants it (subs.go).
	subMu       sync.Mutex
	subs        map[string]map[*mcp.ServerSession]bool // by URI, its subscribers
	sessionSubs map[*mcp.ServerSession]map[string]bool // by session, its URIs

	forwarded atomic.Uint64 // tools/call requests that skipped the SDK server

	inputs inputBridge // calls of 2026-07-28 clients waiting for their answers

	sessionUses sessionUses // the HTTP sessions' requests, for AdmitSession
	// askMu guards asks: per session, the context of the host's requests
	// to its client and whether its roots are still to be asked (roots.go).
	askMu sync.Mutex
	asks  map[*mcp.ServerSession]*sessionAsks
	// transports counts the clients served by ServeTransport (stdio),
	// whose sessions have no id: Sessions counts them apart from the
	// go-sdk server's stateless per-request sessions, which have none
	// either.
	transports atomic.Int64
	// stdio are the sessions ServeTransport serves, for Clients.
	stdio stdioSessions

	// searchMu guards search, the tool index of search mode (nil until
	// EnableSearch), and orders its updates as Apply makes them.
	searchMu sync.Mutex
	search   *discovery.Index
}

// New creates the gateway and its go-sdk server. The server advertises
// tools, prompts and resources with listChanged (resources also with
// subscribe), completions and logging from the start, even with nothing
// registered yet: upstreams connect after downstream clients do, and a
// client only listens for list changes the server advertised.
func New(opts Options) *Gateway {
	if opts.Backend == nil {
		panic("gateway: nil Backend")
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Name == "" {
		opts.Name = "mcpvisor"
	}
	g := &Gateway{
		opts:        opts,
		logger:      opts.Logger,
		backend:     opts.Backend,
		registry:    opts.Registry,
		subs:        map[string]map[*mcp.ServerSession]bool{},
		sessionSubs: map[*mcp.ServerSession]map[string]bool{},
	}
	g.server = mcp.NewServer(&mcp.Implementation{Name: opts.Name, Version: opts.Version}, &mcp.ServerOptions{
		Logger: newSlogLogger(opts.Logger.Named("mcp")),
		Capabilities: &mcp.ServerCapabilities{
			Tools:       &mcp.ToolCapabilities{ListChanged: true},
			Prompts:     &mcp.PromptCapabilities{ListChanged: true},
			Resources:   &mcp.ResourceCapabilities{ListChanged: true, Subscribe: true},
			Completions: &mcp.CompletionCapabilities{},
			Logging:     &mcp.LoggingCapabilities{},
		},
		CompletionHandler:  g.complete,
		SubscribeHandler:   g.subscribe,
		UnsubscribeHandler: g.unsubscribe,
		InitializedHandler: func(_ context.Context, req *mcp.InitializedRequest) {
			g.fetchRoots(req.Session)
		},
		RootsListChangedHandler: func(_ context.Context, req *mcp.RootsListChangedRequest) {
			g.fetchRoots(req.Session)
		},
	})
	g.server.AddSendingMiddleware(g.streamNotifications)
	g.server.AddReceivingMiddleware(g.dormantTools)
	// Calls the gateway can pass through as bytes skip the go-sdk's typed
	// handlers, the dormant tools' included (passthrough.go).
	g.server.AddReceivingMiddleware(g.passThrough)
	g.server.AddReceivingMiddleware(g.pendingRoots)
	g.server.AddReceivingMiddleware(g.sessionBook)
	// Added last, so it runs first: a call outside the caller's policies
	// reaches no handler, the dormant tools' included (policy.go).
	g.server.AddReceivingMiddleware(g.policies)
	// Outside the policies: tools/list is filtered by them first, and a
	// mcpvisor__call_tool goes through them as the call it names
	// (discovery.go).
	g.server.AddReceivingMiddleware(g.discoveryTools)
	return g
}

// dormantTools lets a call reach the server of a tool that is withdrawn for
// now (its server parked, or is restarting): the go-sdk server no longer
// knows the name and would answer "unknown tool", while the server's
// supervisor can revive it and answer the call (docs/design.md §4:
// a call revives a parked server). It also passes tools/list on to OnToolsList.
func (g *Gateway) dormantTools(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "tools/call":
			if r, ok := req.(*mcp.CallToolRequest); ok && g.registry != nil && r.Params != nil {
				if _, live := g.registry.LookupTool(r.Params.Name); !live {
					if e, ok := g.registry.LookupDormant(r.Params.Name); ok {
						return g.callTool(ctx, r, e.Server, e.Original)
					}
					// A server that never listed its tools (parked at its
					// first start, still starting) is reached by use too.
					if e, ok := g.registry.LookupUnlisted(r.Params.Name); ok {
						return g.callTool(ctx, r, e.Server, e.Original)
					}
				}
			}
		case "tools/list":
			if g.opts.OnToolsList != nil {
				g.opts.OnToolsList()
			}
		}
		return next(ctx, method, req)
	}
}

// Server returns the go-sdk server, for callers that serve it themselves.
func (g *Gateway) Server() *mcp.Server { return g.server }

// ServeStdio serves one client over stdin/stdout until ctx is done or stdin
// reaches EOF.
func (g *Gateway) ServeStdio(ctx context.Context) error {
	return g.ServeTransport(ctx, wire.StdioTransport())
}

// ServeTransport serves one client over t until ctx is done or the client
// goes away. With a registry, tools/call skips the SDK server (forward.go).
func (g *Gateway) ServeTransport(ctx context.Context, t mcp.Transport) error {
	g.transports.Add(1)
	defer g.transports.Add(-1)
	if g.registry == nil {
		return g.server.Run(ctx, t)
	}
	ft := &forwardingTransport{Transport: t, g: g}
	ss, err := g.server.Connect(ctx, ft, nil)
	if err != nil {
		return err
	}
	ft.ss.Store(ss)
	g.stdio.add(ss)
	defer g.stdio.remove(ss)
	done := make(chan error, 1)
	go func() { done <- ss.Wait() }()
	select {
	case <-ctx.Done():
		g.endAsks(ss)
		ss.Close()
		<-done
		return ctx.Err()
	case err := <-done:
		return err
	}
}

// fetchRoots asks a downstream client that has roots for them and hands
// them to Options.OnRoots, off the session's handler goroutine (the answer
// is read by it). See roots.go for a client that cannot be asked yet.
func (g *Gateway) fetchRoots(ss *mcp.ServerSession) {
	if !g.wantsRoots(ss) {
		return
	}
	go g.askRoots(context.Background(), ss)
}

// NotifyResourceUpdated tells every downstream session subscribed to uri
// that the resource changed.
func (g *Gateway) NotifyResourceUpdated(ctx context.Context, uri string) error {
	return g.server.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri})
}

// Apply registers and removes items on the server as the registry
// changes; the go-sdk server debounces the changes into list_changed
// notifications for connected clients. An item the go-sdk server rejects
// (a tool whose input schema is not an object, an unparsable URI) is logged
// and left out, and any older definition under its name is withdrawn: one
// bad upstream must never crash the host.
func (g *Gateway) Apply(ch registry.Changes) {
	if len(ch.RemoveTools) > 0 {
		g.server.RemoveTools(ch.RemoveTools...)
	}
	if len(ch.RemovePrompts) > 0 {
		g.server.RemovePrompts(ch.RemovePrompts...)
	}
	if len(ch.RemoveResources) > 0 {
		g.server.RemoveResources(ch.RemoveResources...)
	}
	if len(ch.RemoveTemplates) > 0 {
		g.server.RemoveResourceTemplates(ch.RemoveTemplates...)
	}
	var rejected map[string]bool
	for _, e := range ch.AddTools {
		if !g.guard("tool", e.Tool.Name, e.Server, func() {
			g.server.AddTool(e.Tool, g.toolHandler(e.Server, e.Original))
		}, func() { g.server.RemoveTools(e.Tool.Name) }) {
			if rejected == nil {
				rejected = map[string]bool{}
			}
			rejected[e.Tool.Name] = true
		}
	}
	g.indexChanges(ch, rejected)
	for _, e := range ch.AddPrompts {
		g.guard("prompt", e.Prompt.Name, e.Server, func() {
			g.server.AddPrompt(e.Prompt, g.promptHandler(e.Server, e.Original))
		}, func() { g.server.RemovePrompts(e.Prompt.Name) })
	}
	for _, e := range ch.AddResources {
		g.guard("resource", e.Resource.URI, e.Server, func() {
			g.server.AddResource(e.Resource, g.resourceHandler(e.Server))
		}, func() { g.server.RemoveResources(e.Resource.URI) })
	}
	for _, e := range ch.AddTemplates {
		g.guard("resource template", e.Template.URITemplate, e.Server, func() {
			g.server.AddResourceTemplate(e.Template, g.resourceHandler(e.Server))
		}, func() { g.server.RemoveResourceTemplates(e.Template.URITemplate) })
	}
}

// guard runs add, turning a panic from the go-sdk server's validation into
// a logged error and the withdrawal of the item's older definition. It
// reports whether the item was added.
func (g *Gateway) guard(kind, name, server string, add, withdraw func()) (added bool) {
	defer func() {
		if p := recover(); p != nil {
			g.logger.Error("upstream item rejected, not exposed", "kind", kind, "name", name, "server", server, "error", p)
			withdraw()
			added = false
		}
	}()
	add()
	return true
}

// toolHandler forwards a call to the tool's server under its original
// name. The result and any error pass through unchanged.
func (g *Gateway) toolHandler(server, original string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return g.callTool(ctx, req, server, original)
	}
}

func (g *Gateway) callTool(ctx context.Context, req *mcp.CallToolRequest, server, original string) (*mcp.CallToolResult, error) {
	p := *req.Params
	p.Name = original
	ctx = g.requestContext(ctx, req.Extra)
	if !needsInputBridge(req.Session) {
		return g.backend.CallTool(ctx, downstream(req.Session), server, &p)
	}
	return bridged(g, ctx, req.Session, req.ClientCapabilities, &p.RequestState, &p.InputResponses, p.GetProgressToken(),
		func(ctx context.Context, d upstream.Downstream) (*mcp.CallToolResult, error) {
			return g.backend.CallTool(ctx, d, server, &p)
		},
		func(asks mcp.InputRequestMap, state string) *mcp.CallToolResult {
			return &mcp.CallToolResult{InputRequests: asks, RequestState: state}
		})
}

func (g *Gateway) promptHandler(server, original string) mcp.PromptHandler {
	return func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		p := *req.Params
		p.Name = original
		ctx = g.requestContext(ctx, req.Extra)
		if !needsInputBridge(req.Session) {
			return g.backend.GetPrompt(ctx, downstream(req.Session), server, &p)
		}
		return bridged(g, ctx, req.Session, req.ClientCapabilities, &p.RequestState, &p.InputResponses, p.GetProgressToken(),
			func(ctx context.Context, d upstream.Downstream) (*mcp.GetPromptResult, error) {
				return g.backend.GetPrompt(ctx, d, server, &p)
			},
			func(asks mcp.InputRequestMap, state string) *mcp.GetPromptResult {
				return &mcp.GetPromptResult{InputRequests: asks, RequestState: state}
			})
	}
}

func (g *Gateway) resourceHandler(server string) mcp.ResourceHandler {
	return func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		ctx = g.requestContext(ctx, req.Extra)
		if !needsInputBridge(req.Session) {
			return g.backend.ReadResource(ctx, downstream(req.Session), server, req.Params)
		}
		p := *req.Params
		return bridged(g, ctx, req.Session, req.ClientCapabilities, &p.RequestState, &p.InputResponses, p.GetProgressToken(),
			func(ctx context.Context, d upstream.Downstream) (*mcp.ReadResourceResult, error) {
				return g.backend.ReadResource(ctx, d, server, &p)
			},
			func(asks mcp.InputRequestMap, state string) *mcp.ReadResourceResult {
				return &mcp.ReadResourceResult{InputRequests: asks, RequestState: state}
			})
	}
}

// requestContext applies Options.RequestContext to a request that came
// over HTTP.
// Its upstream results are held against max_inflight_bytes until the
// answer has been written (answerContext).
func (g *Gateway) requestContext(ctx context.Context, extra *mcp.RequestExtra) context.Context {
	if extra == nil || extra.Header == nil {
		return ctx
	}
	ctx = g.answerContext(ctx, extra)
	if g.opts.RequestContext == nil {
		return ctx
	}
	return g.opts.RequestContext(ctx, extra.Header)
}

// answerContext marks ctx, a handler's context for a request that came
// over HTTP, so that the upstream results of the calls made under it are
// held until the HTTP request has been served: its answer written, or
// its client gone (transport.HoldResultsUntil).
func (g *Gateway) answerContext(ctx context.Context, extra *mcp.RequestExtra) context.Context {
	if extra == nil || extra.Header == nil {
		return ctx
	}
	if until, ok := g.answers.lookup(extra.Header); ok {
		return transport.HoldResultsUntil(ctx, until)
	}
	return ctx
}

// complete routes a completion request: a prompt reference by exposed
// prompt name (rewritten to the original), a resource reference by URI
// template.
func (g *Gateway) complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	p := *req.Params
	if p.Ref == nil {
		return nil, invalidParams("completion request has no ref")
	}
	ref := *p.Ref
	p.Ref = &ref
	switch ref.Type {
	case "ref/prompt":
		e, ok := g.lookupPrompt(ref.Name)
		if !ok {
			return nil, invalidParams("unknown prompt %q", ref.Name)
		}
		ref.Name = e.Original
		return g.backend.Complete(ctx, downstream(req.Session), e.Server, &p)
	case "ref/resource":
		server, ok := g.lookupResource(ref.URI)
		if !ok {
			return nil, invalidParams("unknown resource %q", ref.URI)
		}
		return g.backend.Complete(ctx, downstream(req.Session), server, &p)
	default:
		return nil, invalidParams("unknown completion reference type %q", ref.Type)
	}
}

func (g *Gateway) lookupPrompt(name string) (registry.PromptEntry, bool) {
	if g.registry == nil {
		return registry.PromptEntry{}, false
	}
	return g.registry.LookupPrompt(name)
}

func (g *Gateway) lookupResource(uri string) (string, bool) {
	if g.registry == nil {
		return "", false
	}
	return g.registry.LookupResource(uri)
}

func invalidParams(format string, args ...any) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(format, args...)}
}

// Sessions counts the downstream sessions open (HTTP and stdio). A
// stateless (2026-07-28) request is served on a go-sdk session of its own
// that lives as long as the request, without an id: it is not a session
// for the client, for max_sessions or for the metric.
func (g *Gateway) Sessions() int {
	n := int(g.transports.Load())
	for ss := range g.server.Sessions() {
		if ss.ID() != "" {
			n++
		}
	}
	return n
}
