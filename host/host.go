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
	"sync"

	"github.com/hashicorp/go-hclog"
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
	cfg    *config.Config
	opts   options
	logger hclog.Logger

	registry *registry.Registry
	gateway  *gateway.Gateway
	sups     map[string]*upstream.Supervisor
	order    []string

	startOnce sync.Once
	closeOnce sync.Once
	closeErr  error
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
	h := &Host{cfg: cfg, opts: o, logger: o.logger, sups: map[string]*upstream.Supervisor{}}

	sep := cfg.Host.Separator
	if sep == "" {
		sep = config.DefaultSeparator
	}
	specs := make([]registry.ServerSpec, 0, len(cfg.Servers))
	for _, srv := range cfg.Servers {
		specs = append(specs, registry.ServerSpec{
			Name: srv.Name, Prefix: srv.Prefix,
			Include: srv.Tools.Include, Exclude: srv.Tools.Exclude,
		})
	}
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

	for _, srv := range cfg.Servers {
		d, err := transport.NewDialer(srv, transport.Options{
			Logger: o.logger.Named("server").With("server", srv.Name),
			Plugin: o.plugin,
		})
		if err != nil {
			return nil, err
		}
		h.sups[srv.Name] = upstream.New(srv, upstream.Options{
			Logger:     o.logger,
			Dialer:     d,
			ClientInfo: &mcp.Implementation{Name: "mcpvisor", Version: Version},
			OnCatalog:  h.onCatalog,
			OnStatus:   o.onStatus,
			OnLog: func(_ string, msg *mcp.LoggingMessageParams) {
				h.gateway.BroadcastLog(context.Background(), msg)
			},
			OnResourceUpdated: func(_ string, p *mcp.ResourceUpdatedNotificationParams) {
				h.gateway.NotifyResourceUpdated(context.Background(), p.URI)
			},
		})
		h.order = append(h.order, srv.Name)
	}
	return h, nil
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
	h.startOnce.Do(func() {
		for _, name := range h.order {
			h.sups[name].Start()
		}
	})
	return nil
}

// WaitSettled waits until no server is still starting: each is ready,
// reconnecting or parked. Useful before listing tools from a CLI.
func (h *Host) WaitSettled(ctx context.Context) error {
	for _, name := range h.order {
		if err := h.sups[name].WaitSettled(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Close stops every server (process groups terminated) and returns when
// all are down or ctx ends.
func (h *Host) Close(ctx context.Context) error {
	h.closeOnce.Do(func() {
		var wg sync.WaitGroup
		errs := make([]error, len(h.order))
		for i, name := range h.order {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = h.sups[name].Stop(ctx)
			}()
		}
		wg.Wait()
		h.closeErr = errors.Join(errs...)
	})
	return h.closeErr
}

// Gateway returns the downstream MCP server, to serve over stdio or HTTP.
func (h *Host) Gateway() *gateway.Gateway { return h.gateway }

// Registry returns the registry of exposed tools, resources and prompts.
func (h *Host) Registry() *registry.Registry { return h.registry }

// Config returns the configuration the host runs.
func (h *Host) Config() *config.Config { return h.cfg }

// Supervisor returns the supervisor of a server block.
func (h *Host) Supervisor(name string) (*upstream.Supervisor, bool) {
	s, ok := h.sups[name]
	return s, ok
}

// Status returns every server's status, in config order.
func (h *Host) Status() []upstream.Status {
	out := make([]upstream.Status, 0, len(h.order))
	for _, name := range h.order {
		out = append(out, h.sups[name].Status())
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
	s, ok := h.sups[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownServer, name)
	}
	return s, nil
}

// ServerNames returns the server block names in config order.
func (h *Host) ServerNames() []string {
	return append([]string(nil), h.order...)
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
