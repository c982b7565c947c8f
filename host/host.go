// Package host is mcpvisor as a library: it builds one supervisor per
// server block, aggregates their tools, resources and prompts in a registry,
// and serves the union through a gateway (an MCP server over stdio and
// streamable HTTP). The mcpvisor binary is a thin CLI over this package.
//
//	cfg, err := config.Load("config.hcl")
//	h, err := host.New(cfg, host.WithLogger(logger))
//	err = h.Start(ctx)
//	defer h.Close(context.Background())
//	res, err := h.CallTool(ctx, "echo__echo", map[string]any{"text": "hi"})
package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/hcl/v2"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/gateway"
	"github.com/mcpvisor/mcpvisor/host/plugin"
	"github.com/mcpvisor/mcpvisor/host/registry"
	"github.com/mcpvisor/mcpvisor/host/transport"
	"github.com/mcpvisor/mcpvisor/host/upstream"
)

// Version is mcpvisor's version, reported to upstreams and downstreams.
var Version = "0.1.0-dev"

// ErrUnknownServer is wrapped by errors naming a server no block declares.
var ErrUnknownServer = errors.New("unknown server")

// ErrUnknownTool is wrapped by errors naming a tool the registry does not expose.
var ErrUnknownTool = errors.New("unknown tool")

// Option configures a Host.
type Option func(*options)

type options struct {
	logger   hclog.Logger
	plugin   transport.PluginDialerFunc
	onStatus func(upstream.Status)
}

// WithLogger sets the host's logger. Default: a null logger.
func WithLogger(l hclog.Logger) Option { return func(o *options) { o.logger = l } }

// WithPluginDialer replaces how plugin server blocks are launched. The
// default is plugin.NewDialer (HashiCorp go-plugin binaries).
func WithPluginDialer(f transport.PluginDialerFunc) Option {
	return func(o *options) { o.plugin = f }
}

// WithStatusHandler registers a function called on every server state
// change (starting, ready, reconnecting, parked, stopped). It runs on the
// supervisor's goroutine and must not block.
func WithStatusHandler(f func(upstream.Status)) Option {
	return func(o *options) { o.onStatus = f }
}

// Host runs the upstream servers of one Config and serves their union.
type Host struct {
	opts   options
	logger hclog.Logger

	registry *registry.Registry
	gateway  *gateway.Gateway

	// servers is the current set of supervisors. It is replaced whole on
	// reload (copy on write), so the call path reads it without a lock.
	servers atomic.Pointer[serverSet]
	// mu serialises Start, Reload and Close.
	mu      sync.Mutex
	started bool
	closed  bool

	closeOnce sync.Once
	closeErr  error
}

// serverSet is an immutable snapshot of the running supervisors.
type serverSet struct {
	cfg   *config.Config
	sups  map[string]*upstream.Supervisor
	order []string
}

// New builds a Host for cfg. Nothing starts until Start.
func New(cfg *config.Config, opts ...Option) (*Host, error) {
	if cfg == nil {
		return nil, errors.New("host: nil config")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := options{logger: hclog.NewNullLogger(), plugin: plugin.NewDialer}
	for _, f := range opts {
		f(&o)
	}
	h := &Host{opts: o, logger: o.logger}

	sep := cfg.Host.Separator
	if sep == "" {
		sep = config.DefaultSeparator
	}
	specs := specsOf(cfg)
	// The registry feeds the gateway and the gateway consults the registry;
	// the sink breaks the cycle at construction.
	sink := &gatewaySink{}
	h.registry = registry.New(o.logger.Named("registry"), sep, specs, sink)
	h.gateway = gateway.New(gateway.Options{
		Name:        "mcpvisor",
		Version:     Version,
		Logger:      o.logger.Named("gateway"),
		Registry:    h.registry,
		Backend:     backend{h},
		BearerToken: cfg.Host.BearerToken,
	})
	sink.g = h.gateway

	set := &serverSet{cfg: cfg, sups: map[string]*upstream.Supervisor{}}
	for _, srv := range cfg.Servers {
		sup, err := h.newSupervisor(srv)
		if err != nil {
			return nil, err
		}
		set.sups[srv.Name] = sup
		set.order = append(set.order, srv.Name)
	}
	h.servers.Store(set)
	return h, nil
}

func (h *Host) newSupervisor(srv *config.Server) (*upstream.Supervisor, error) {
	d, err := transport.NewDialer(srv, transport.Options{
		Logger: h.logger.Named("server").With("server", srv.Name),
		Plugin: h.opts.plugin,
	})
	if err != nil {
		return nil, err
	}
	return upstream.New(srv, upstream.Options{
		Logger:     h.logger,
		Dialer:     d,
		ClientInfo: &mcp.Implementation{Name: "mcpvisor", Version: Version},
		OnCatalog:  h.onCatalog,
		OnStatus:   h.opts.onStatus,
		OnLog: func(_ string, msg *mcp.LoggingMessageParams) {
			h.gateway.BroadcastLog(context.Background(), msg)
		},
		OnResourceUpdated: func(_ string, p *mcp.ResourceUpdatedNotificationParams) {
			h.gateway.NotifyResourceUpdated(context.Background(), p.URI)
		},
	}), nil
}

// specsOf is how the registry exposes each server block of cfg.
func specsOf(cfg *config.Config) []registry.ServerSpec {
	specs := make([]registry.ServerSpec, 0, len(cfg.Servers))
	for _, srv := range cfg.Servers {
		specs = append(specs, registry.ServerSpec{
			Name: srv.Name, Prefix: srv.Prefix,
			Include: srv.Tools.Include, Exclude: srv.Tools.Exclude,
		})
	}
	return specs
}

func (h *Host) onCatalog(server string, cat *upstream.Catalog) {
	if cat == nil {
		h.registry.Update(server, nil)
		return
	}
	h.registry.Update(server, &registry.Catalog{
		Tools: cat.Tools, Resources: cat.Resources, Templates: cat.Templates, Prompts: cat.Prompts,
	})
}

// Start launches every supervisor in parallel and returns at once; servers
// connect in the background. A server that cannot connect is retried and
// eventually parked; it never stops the host or the other servers.
func (h *Host) Start(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return errors.New("host: Start after Close")
	}
	if h.started {
		return nil
	}
	h.started = true
	set := h.servers.Load()
	for _, name := range set.order {
		set.sups[name].Start()
	}
	return nil
}

// WaitSettled waits until no server is still starting: each is ready,
// reconnecting or parked. Useful before listing tools from a CLI.
func (h *Host) WaitSettled(ctx context.Context) error {
	set := h.servers.Load()
	for _, name := range set.order {
		if err := set.sups[name].WaitSettled(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Close stops every server (process groups terminated) and returns when
// all are down or ctx ends.
func (h *Host) Close(ctx context.Context) error {
	h.closeOnce.Do(func() {
		h.mu.Lock()
		h.closed = true
		set := h.servers.Load()
		h.mu.Unlock()
		h.closeErr = stopAll(ctx, set.sups, set.order)
	})
	return h.closeErr
}

// stopAll stops the named supervisors in parallel.
func stopAll(ctx context.Context, sups map[string]*upstream.Supervisor, names []string) error {
	var wg sync.WaitGroup
	errs := make([]error, len(names))
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = sups[name].Stop(ctx)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Gateway returns the downstream MCP server, to serve over stdio or HTTP.
func (h *Host) Gateway() *gateway.Gateway { return h.gateway }

// Registry returns the registry of exposed tools, resources and prompts.
func (h *Host) Registry() *registry.Registry { return h.registry }

// Config returns the configuration the host runs (the latest reloaded one).
func (h *Host) Config() *config.Config { return h.servers.Load().cfg }

// Supervisor returns the supervisor of a server block.
func (h *Host) Supervisor(name string) (*upstream.Supervisor, bool) {
	s, ok := h.servers.Load().sups[name]
	return s, ok
}

// Status returns every server's status, in config order.
func (h *Host) Status() []upstream.Status {
	set := h.servers.Load()
	out := make([]upstream.Status, 0, len(set.order))
	for _, name := range set.order {
		out = append(out, set.sups[name].Status())
	}
	return out
}

// Tools returns the exposed tools, sorted by exposed name.
func (h *Host) Tools() []registry.ToolEntry { return h.registry.Tools() }

// CallTool calls an exposed tool (e.g. "echo__echo") with args, which may be
// nil, a json.RawMessage, or any value that marshals to a JSON object. The
// call goes through the same supervision and recovery as a gateway call.
func (h *Host) CallTool(ctx context.Context, name string, args any) (*mcp.CallToolResult, error) {
	e, ok := h.registry.LookupTool(name)
	if !ok {
		return nil, fmt.Errorf("%w %q: not exposed by any ready server (see `mcpvisor tools`)", ErrUnknownTool, name)
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
	return h.backendCall(ctx, e.Server, &mcp.CallToolParamsRaw{Name: e.Original, Arguments: raw})
}

func (h *Host) backendCall(ctx context.Context, server string, p *mcp.CallToolParamsRaw) (*mcp.CallToolResult, error) {
	s, err := h.sup(server)
	if err != nil {
		return nil, err
	}
	return s.CallTool(ctx, p)
}

func (h *Host) sup(name string) (*upstream.Supervisor, error) {
	s, ok := h.servers.Load().sups[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownServer, name)
	}
	return s, nil
}

// gatewaySink forwards registry changes to the gateway once it exists. No
// change can arrive before then: supervisors start only in Start.
type gatewaySink struct{ g *gateway.Gateway }

func (s *gatewaySink) Apply(ch registry.Changes) { s.g.Apply(ch) }

// backend adapts the Host to gateway.Backend: route by server name to that
// server's supervisor.
type backend struct{ h *Host }

// down marks ctx with the downstream session the gateway found, so the
// supervisor can route progress, logs, sampling and elicitation back to it.
func down(ctx context.Context) context.Context {
	if ss := gateway.Session(ctx); ss != nil {
		return upstream.WithDownstream(ctx, ss)
	}
	return ctx
}

func (b backend) CallTool(ctx context.Context, server, tool string, p *mcp.CallToolParamsRaw) (*mcp.CallToolResult, error) {
	return b.h.backendCall(down(ctx), server, p)
}

// CallToolRaw forwards a tools/call without decoding it (the gateway's
// fast paths, stdio and HTTP).
func (b backend) CallToolRaw(ctx context.Context, server, tool string, params json.RawMessage, d gateway.Downstream, early func(json.RawMessage)) (json.RawMessage, error) {
	s, err := b.h.sup(server)
	if err != nil {
		return nil, err
	}
	var ud upstream.Downstream
	if d != nil {
		ud = d
	}
	return s.CallToolRaw(upstream.WithCall(ctx, ud, early), tool, params)
}

func (b backend) ReadResource(ctx context.Context, server string, p *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
	s, err := b.h.sup(server)
	if err != nil {
		return nil, err
	}
	return s.ReadResource(down(ctx), p)
}

func (b backend) GetPrompt(ctx context.Context, server string, p *mcp.GetPromptParams) (*mcp.GetPromptResult, error) {
	s, err := b.h.sup(server)
	if err != nil {
		return nil, err
	}
	return s.GetPrompt(down(ctx), p)
}

func (b backend) Complete(ctx context.Context, server string, p *mcp.CompleteParams) (*mcp.CompleteResult, error) {
	s, err := b.h.sup(server)
	if err != nil {
		return nil, err
	}
	return s.Complete(down(ctx), p)
}

func (b backend) Subscribe(ctx context.Context, server string, p *mcp.SubscribeParams) error {
	s, err := b.h.sup(server)
	if err != nil {
		return err
	}
	return s.Subscribe(ctx, p)
}

func (b backend) Unsubscribe(ctx context.Context, server string, p *mcp.UnsubscribeParams) error {
	s, err := b.h.sup(server)
	if err != nil {
		return err
	}
	return s.Unsubscribe(ctx, p)
}

// ReloadResult says what a Reload changed.
type ReloadResult struct {
	Added, Removed, Restarted, Unchanged []string
	// HostChanged is set when the host block changed; its settings
	// (listen, auth, logging) apply only after a restart.
	HostChanged bool
}

// Reload applies a new configuration, touching only the server blocks that
// changed: new blocks start, removed ones stop (their tools deregistered),
// changed ones restart, and unchanged ones keep running untouched, with
// their sessions. Naming and filters are re-applied to all. The host block
// is not reloaded.
func (h *Host) Reload(ctx context.Context, cfg *config.Config) (ReloadResult, error) {
	var res ReloadResult
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return res, errors.New("host: Reload after Close")
	}
	old := h.servers.Load()
	res.HostChanged = !reflect.DeepEqual(old.cfg.Host, cfg.Host)

	next := &serverSet{cfg: cfg, sups: map[string]*upstream.Supervisor{}}
	var toStop []string
	var toStart []*upstream.Supervisor
	oldBlocks := map[string]*config.Server{}
	for _, srv := range old.cfg.Servers {
		oldBlocks[srv.Name] = srv
	}
	for _, srv := range cfg.Servers {
		next.order = append(next.order, srv.Name)
		if prev, ok := oldBlocks[srv.Name]; ok && sameServer(prev, srv) {
			next.sups[srv.Name] = old.sups[srv.Name]
			res.Unchanged = append(res.Unchanged, srv.Name)
			continue
		}
		sup, err := h.newSupervisor(srv)
		if err != nil {
			return ReloadResult{}, err
		}
		next.sups[srv.Name] = sup
		toStart = append(toStart, sup)
		if _, ok := oldBlocks[srv.Name]; ok {
			res.Restarted = append(res.Restarted, srv.Name)
			toStop = append(toStop, srv.Name)
		} else {
			res.Added = append(res.Added, srv.Name)
		}
	}
	for _, name := range old.order {
		if _, ok := next.sups[name]; !ok {
			res.Removed = append(res.Removed, name)
			toStop = append(toStop, name)
		}
	}

	// Stop what goes away first: a restarted server's old process must be
	// gone (and its catalog withdrawn) before the new one registers.
	err := stopAll(ctx, old.sups, toStop)
	for _, name := range toStop {
		h.registry.Update(name, nil)
	}
	h.registry.SetSpecs(specsOf(cfg))
	h.servers.Store(next)
	if h.started {
		for _, sup := range toStart {
			sup.Start()
		}
	}
	return res, err
}

// sameServer reports whether two server blocks describe the same server
// (where in the file they are does not matter).
func sameServer(a, b *config.Server) bool {
	x, y := *a, *b
	x.DeclRange, y.DeclRange = hcl.Range{}, hcl.Range{}
	return reflect.DeepEqual(x, y)
}
