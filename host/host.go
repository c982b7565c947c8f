// Package host is mcpvisor as a library. A Host runs the MCP servers of one
// configuration (package config): each server block gets a supervisor that
// keeps it alive (respawn with backoff, park when the retry budget is
// spent, revive on a half-open probe, recover expired sessions), and the
// union of their tools, resources and prompts is served as one MCP server,
// under namespaced names, over stdio (ServeStdio) and streamable HTTP
// (Handler, Serve). The mcpvisor binary is a thin CLI over this package.
//
//	cfg, err := config.Load("config.hcl")      // or build a *config.Config in Go
//	h, err := host.New(cfg, host.WithLogger(logger))
//	err = h.Start(ctx)
//	defer h.Close(context.Background())
//	res, err := h.CallTool(ctx, "echo__echo", map[string]any{"text": "hi"})
//	err = h.Serve(ctx, listener)               // or h.ServeStdio(ctx)
//
// Errors of calls are *recovery.Error values (package recovery) where
// supervision or recovery decided the outcome, and the upstream's own
// *jsonrpc.Error where the server answered with one.
package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/audit"
	"github.com/mcpvisor/mcpvisor/host/internal/discovery"
	"github.com/mcpvisor/mcpvisor/host/internal/gateway"
	"github.com/mcpvisor/mcpvisor/host/internal/limits"
	"github.com/mcpvisor/mcpvisor/host/internal/oauth"
	"github.com/mcpvisor/mcpvisor/host/internal/plugin"
	"github.com/mcpvisor/mcpvisor/host/internal/policy"
	"github.com/mcpvisor/mcpvisor/host/internal/registry"
	"github.com/mcpvisor/mcpvisor/host/internal/resources"
	"github.com/mcpvisor/mcpvisor/host/internal/sandbox"
	"github.com/mcpvisor/mcpvisor/host/internal/telemetry"
	"github.com/mcpvisor/mcpvisor/host/internal/transport"
	"github.com/mcpvisor/mcpvisor/host/internal/upstream"
)

// Version is mcpvisor's version, reported to upstreams and downstreams.
var Version = "0.1.0-dev"

// Commit is the git commit mcpvisor was built from; `make dist` stamps it
// (with Version) through -ldflags -X. Empty in other builds.
var Commit = ""

// ErrUnknownServer is wrapped by errors naming a server no block declares.
var ErrUnknownServer = errors.New("unknown server")

// ErrUnknownTool is wrapped by errors naming a tool the registry does not expose.
var ErrUnknownTool = errors.New("unknown tool")

// Host runs the upstream servers of one Config and serves their union.
type Host struct {
	opts   options
	logger hclog.Logger
	// replica names this process among the replicas of a deployment.
	replica string
	// limitHits counts what the bounds of docs/security.md refused, for
	// mcpvisor_limit_hits_total.
	limitHits *limits.Hits
	// stderrTotal bounds what every stdio server's stderr together adds
	// to the log, in bytes a second (docs/security.md).
	stderrTotal *rate.Limiter
	// policy is the policies in force (nil: none), swapped whole on
	// reload; limiters are their rate limits' buckets, kept across
	// reloads (policy.go).
	policy   atomic.Pointer[policy.Engine]
	limiters *policy.Limiters
	// discovery is the discovery settings in force (nil: every tool is
	// listed), swapped whole on reload (discovery.go).
	discovery atomic.Pointer[discovery.Settings]
	// policyNames are the tools' names as of the policies in force, to
	// tell a tool renamed since (policy.go).
	policyNames toolNames

	// draining is closed by Drain; drainPeriod is the host block's drain.
	draining    chan struct{}
	drainOnce   sync.Once
	drainPeriod time.Duration
	// readyzAsked is set once anything has asked /readyz: a load balancer
	// or orchestrator is watching, and Drain waits its period for it.
	readyzAsked atomic.Bool
	// httpURL is the /mcp address of the first TCP listener Serve
	// serves ("" before one, or on a stdio-only host): what status tells
	// `client install -http` to point a client at.
	httpURL atomic.Pointer[string]
	// inFlight counts the HTTP requests being served, for Drain.
	inFlight requestGauge

	// Shutdown (drain.go): stopping is closed when Serve's context ends
	// (new sessions are refused from then on, as while draining);
	// callsCut ends, with errHostShuttingDown as its cause, the calls
	// still in flight when Serve gives up waiting for them.
	stopping     chan struct{}
	stoppingOnce sync.Once
	callsCut     context.Context
	cutCalls     context.CancelCauseFunc

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

	handlerOnce sync.Once
	handler     http.Handler

	// roots are the roots of the downstream client that last connected
	// with roots or changed them; every server gets them (setRoots).
	rootsMu sync.Mutex
	roots   []*mcp.Root
	// results bounds the upstream response bytes held at once across all
	// servers (the host block's max_inflight_bytes). Each Host has its own.
	results *transport.ResultBudget
	// telemetry observes every supervisor (metrics, traces, audit, call
	// counts); nil when all of those are off.
	telemetry *telemetry.Observer
	audit     *audit.Log
	// console is the web console's state: recent calls, live streams (ui.go).
	console *console
	// door holds the local operator credential and refuses servers'
	// processes at the operator endpoints (localsock.go).
	door *door
	// logins are the console's login codes and sessions (consolelogin.go).
	logins *consoleLogins
	// stderrLogs keeps each server's recent stderr (logs.go).
	stderrLogs serverLogs
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
	o := options{logger: hclog.NewNullLogger()}
	for _, f := range opts {
		f(&o)
	}
	replica := replicaName(cfg.Host.Replica)
	// Every line the host and its servers log names the replica, so that
	// the logs of several replicas can be merged and still be told apart.
	o.logger = o.logger.With("replica", replica)
	h := &Host{opts: o, logger: o.logger, replica: replica, draining: make(chan struct{}), drainPeriod: cfg.Host.Drain}
	h.console = newConsole(cfg.Host.Console)
	h.door = newDoor(o.operator)
	h.logins = newConsoleLogins()
	h.stopping = make(chan struct{})
	h.callsCut, h.cutCalls = context.WithCancelCause(context.Background())
	h.results = transport.NewResultBudget(cfg.Host.MaxInflightBytes)
	h.limitHits = limits.New()
	h.stderrTotal = rate.NewLimiter(transport.StderrTotalRate, transport.StderrTotalBurst)
	h.limiters = policy.NewLimiters(0)
	h.setPolicies(cfg)
	if a := cfg.Host.Audit; a != nil {
		log, err := audit.Open(a.Path, a.IncludeArguments, replica, o.logger.Named("audit"))
		if err != nil {
			return nil, err
		}
		h.audit = log
	}
	h.telemetry = telemetry.New(telemetry.Options{
		Metrics:        !o.noMetrics,
		Status:         h.upstreamStatus,
		Sessions:       func() int { return h.gateway.Sessions() },
		TracerProvider: o.tracer,
		Audit:          h.audit,
		Logger:         o.logger.Named("audit"),
		Replica:        replica,

		LimitHits:         h.limitHits,
		MaxNamesPerServer: cfg.Host.Metrics.MaxNamesPerServer,
		MaxNames:          cfg.Host.Metrics.MaxNames,
	})

	sep := cfg.Host.Separator
	if sep == "" {
		sep = config.DefaultSeparator
	}
	specs := specsOf(cfg)
	// The registry feeds the gateway and the gateway consults the registry;
	// the sink breaks the cycle at construction.
	sink := &gatewaySink{}
	h.registry = registry.New(o.logger.Named("registry"), sep, specs, sink)
	gopts := gateway.Options{
		LimitHits:      h.limitHits,
		Name:           "mcpvisor",
		Version:        Version,
		Logger:         o.logger.Named("gateway"),
		Registry:       h.registry,
		Backend:        backend{h},
		OnRoots:        h.setRoots,
		Policy:         h.policyEngine,
		OnVerdict:      h.onVerdict,
		Discovery:      h.discoverySettings,
		SessionTimeout: cmp.Or(cfg.Host.SessionIdleTimeout, config.DefaultSessionIdleTimeout),
		WriteTimeout:   cmp.Or(cfg.Host.WriteTimeout, config.DefaultWriteTimeout),
		OnToolsList: func() {
			set := h.servers.Load()
			for _, name := range set.order {
				set.sups[name].Nudge()
			}
		},
	}
	if h.telemetry.Tracing() {
		gopts.RequestContext = telemetry.ExtractHTTP
	}
	h.gateway = gateway.New(gopts)
	sink.g = h.gateway
	h.setDiscovery(cfg)

	set := &serverSet{cfg: cfg, sups: map[string]*upstream.Supervisor{}}
	for _, srv := range enabledServers(cfg) {
		sup, err := h.newSupervisor(srv)
		if err != nil {
			return nil, err
		}
		set.sups[srv.Name] = sup
		set.order = append(set.order, srv.Name)
	}
	h.servers.Store(set)
	h.setShares(cfg)
	return h, nil
}

// setShares gives each enabled server its share of max_inflight_bytes
// (transport.Share; docs/security.md, "Bytes from upstream servers").
func (h *Host) setShares(cfg *config.Config) {
	sizes := map[string]int64{}
	for _, srv := range enabledServers(cfg) {
		sizes[srv.Name] = cmp.Or(srv.MaxMessageSize, config.DefaultMaxMessageSize)
	}
	h.results.SetShares(sizes)
}

func (h *Host) newSupervisor(srv *config.Server) (*upstream.Supervisor, error) {
	var store *oauth.Store
	if srv.OAuth != nil {
		var err error
		if store, err = tokenStore(h.opts.tokenStore); err != nil {
			return nil, fmt.Errorf("server %q: %w", srv.Name, err)
		}
	}
	if len(srv.MissingEnv) > 0 {
		// Held in needs_config, never dialed: its block is incomplete.
		return h.supervisorFor(srv, nil), nil
	}
	hc := h.opts.httpClient
	if h.telemetry.Tracing() {
		// Requests of a traced operation carry its traceparent header.
		c := http.Client{Transport: transport.DefaultHTTPTransport()}
		if hc != nil {
			c = *hc
		}
		c.Transport = telemetry.InjectHTTP(c.Transport)
		hc = &c
	}
	d, err := transport.NewDialer(srv, transport.Options{
		Logger:     h.logger.Named("server").With("server", srv.Name),
		HTTPClient: hc,
		Plugin:     plugin.NewDialer,
		TokenStore: store,

		ResultBudget: h.results,
		LimitStop:    h.limitStopped,
		StderrTotal:  h.stderrTotal,
		LimitHits:    h.limitHits,
		StderrLog:    h.stderrLogs.of(srv.Name),
	})
	if err != nil {
		return nil, err
	}
	return h.supervisorFor(srv, d), nil
}

// limitStopped records in the audit log that server's process group was
// stopped for going over its memory limit (transport logs it; the
// supervisor restarts the server).
func (h *Host) limitStopped(server string, err error) {
	if h.audit == nil {
		return
	}
	if aerr := h.audit.RecordEvent(server, audit.EventMemoryLimit, err); aerr != nil {
		h.logger.Error("audit log write failed", "path", h.audit.Path(), "error", aerr)
	}
}

// unresponsive records in the audit log that server's session gen (its
// process pid, 0 for a remote server) stopped answering and is being
// replaced (the supervisor logs it and restarts the server).
func (h *Host) unresponsive(server string, pid int, gen uint64, err error) {
	if h.audit == nil {
		return
	}
	e := audit.Event{Server: server, Event: audit.EventUnresponsive, Pid: pid, Generation: gen}
	if aerr := h.audit.RecordServerEvent(e, err); aerr != nil {
		h.logger.Error("audit log write failed", "path", h.audit.Path(), "error", aerr)
	}
}

// supervisorFor makes the supervisor of srv, reaching it through d (nil
// for a server held in needs_config).
func (h *Host) supervisorFor(srv *config.Server, d transport.Dialer) *upstream.Supervisor {
	if h.telemetry != nil {
		h.telemetry.AddServer(srv.Name)
	}
	// The console keeps the recent calls even with telemetry off.
	obs := consoleObserver{h}
	var sup *upstream.Supervisor
	sup = upstream.New(srv, upstream.Options{
		Logger:     h.logger,
		Dialer:     d,
		ClientInfo: &mcp.Implementation{Name: "mcpvisor", Version: Version},
		LimitHits:  h.limitHits,
		// The same budget the HTTP links reserve from (transport.Options).
		ResultBudget: h.results,
		// Only the current supervisor of a name speaks for it: during a
		// reload the new one starts beside the old one, and the old one's
		// last word (withdrawing its catalog as it stops) must not withdraw
		// the new one's.
		OnCatalog: func(name string, cat *registry.Catalog) {
			if h.servers.Load().sups[name] != sup {
				return
			}
			if h.telemetry != nil {
				h.telemetry.SetCatalog(name, cat)
			}
			h.registry.Update(name, cat)
		},
		OnStatus:       h.onStatus,
		OnUnresponsive: h.unresponsive,
		Observer:       obs,
		OnLog: func(_ string, msg *mcp.LoggingMessageParams) {
			h.gateway.BroadcastLog(context.Background(), msg)
		},
		OnResourceUpdated: func(_ string, p *mcp.ResourceUpdatedNotificationParams) {
			h.gateway.NotifyResourceUpdated(context.Background(), p.URI)
		},
	})
	return sup
}

// setRoots hands the roots of the downstream client that last connected
// with roots, or changed them, to every server: an upstream that asks for
// roots while no call of a client is in flight gets these, and is told
// when they change (docs/proxy.md, "Roots").
func (h *Host) setRoots(roots []*mcp.Root) {
	h.rootsMu.Lock()
	defer h.rootsMu.Unlock()
	h.roots = roots
	set := h.servers.Load()
	for _, name := range set.order {
		set.sups[name].SetRoots(roots)
	}
}

// specsOf is how the registry exposes each server block of cfg.
func specsOf(cfg *config.Config) []registry.ServerSpec {
	specs := make([]registry.ServerSpec, 0, len(cfg.Servers))
	for _, srv := range enabledServers(cfg) {
		specs = append(specs, registry.ServerSpec{
			Name: srv.Name, Prefix: srv.Prefix,
			Include: srv.Tools.Include, Exclude: srv.Tools.Exclude,
		})
	}
	return specs
}

func (h *Host) onStatus(st upstream.Status) {
	h.console.changed()
	if h.opts.onStatus != nil {
		h.opts.onStatus(h.serverStatus(st))
	}
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
	// What a SIGKILLed mcpvisor left in its servers' cgroups (a daemon a
	// server double-forked) is killed before anything starts.
	resources.RemoveLeftovers(h.logger.Named("resources"))
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

// Close ends every downstream session, stops every server (process groups
// terminated) and returns when all are down or ctx ends.
func (h *Host) Close(ctx context.Context) error {
	h.closeOnce.Do(func() {
		h.mu.Lock()
		h.closed = true
		set := h.servers.Load()
		h.mu.Unlock()
		h.gateway.CloseSessions()
		h.closeErr = stopAll(ctx, set.sups, set.order)
		h.stderrLogs.closeAll() // ends FollowLogs
		h.closeErr = errors.Join(h.closeErr, h.gateway.Close())
		if h.audit != nil {
			h.closeErr = errors.Join(h.closeErr, h.audit.Close())
		}
	})
	return h.closeErr
}

// retire lets the named supervisors finish the calls in flight (up to
// ctx) and stops them, in parallel; calls that still meet the stop are
// told reason.
func retire(ctx context.Context, sups map[string]*upstream.Supervisor, names []string, reason string) error {
	var wg sync.WaitGroup
	errs := make([]error, len(names))
	for i, name := range names {
		wg.Go(func() {
			sups[name].Drain(ctx)
			errs[i] = sups[name].StopFor(ctx, reason)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
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

// Replica is the name this process goes by among the replicas of one
// deployment: the host block's replica, else the hostname. It labels the
// host's log lines, /status, every metric and every audit line.
func (h *Host) Replica() string { return h.replica }

// replicaName is the configured replica name, else the hostname, else
// "mcpvisor" on a machine that has none.
func replicaName(configured string) string {
	if configured != "" {
		return configured
	}
	if name, err := os.Hostname(); err == nil && name != "" {
		return name
	}
	return "mcpvisor"
}

// Config returns the configuration the host runs (the latest reloaded one).
func (h *Host) Config() *config.Config { return h.servers.Load().cfg }

// Status returns every server's status, in config order; a server block
// with enabled = false is listed in state "disabled".
func (h *Host) Status() []ServerStatus {
	set := h.servers.Load()
	out := make([]ServerStatus, 0, len(set.cfg.Servers))
	for _, srv := range set.cfg.Servers {
		sup, ok := set.sups[srv.Name]
		if !ok {
			if srv.Disabled {
				out = append(out, ServerStatus{Name: srv.Name, Transport: string(srv.Transport), State: StateDisabled, MaxRetries: srv.Reconnect.MaxRetries, Sandbox: sandbox.Summary(srv.Sandbox)})
			}
			continue
		}
		out = append(out, h.serverStatus(sup.WithUsage(sup.Status())))
	}
	return out
}

// enabledServers are the server blocks of cfg that run: all but those
// with enabled = false.
func enabledServers(cfg *config.Config) []*config.Server {
	out := make([]*config.Server, 0, len(cfg.Servers))
	for _, srv := range cfg.Servers {
		if !srv.Disabled {
			out = append(out, srv)
		}
	}
	return out
}

// upstreamStatus is every server's status for the metrics' state gauges.
func (h *Host) upstreamStatus() []upstream.Status {
	set := h.servers.Load()
	if set == nil {
		return nil
	}
	out := make([]upstream.Status, 0, len(set.order))
	for _, name := range set.order {
		sup := set.sups[name]
		out = append(out, sup.WithUsage(sup.Status()))
	}
	return out
}

// ReopenAuditLog closes the audit log file and opens its path again, so
// that a file renamed by logrotate is continued in a new one (`mcpvisor
// run` does this on SIGHUP). Without an audit block it does nothing.
func (h *Host) ReopenAuditLog() error {
	if h.audit == nil {
		return nil
	}
	return h.audit.Reopen()
}

// Collector returns the host's Prometheus collector (every mcpvisor_*
// metric of docs/operations.md), for an embedding program to register in
// its own registry; Handler serves the same metrics at /metrics. Nil when
// metrics are off (WithMetrics(false)).
func (h *Host) Collector() prometheus.Collector {
	return h.telemetry.Collector()
}

// Sessions is how many downstream sessions are open (HTTP sessions, stdio
// and other transports served with ServeTransport).
func (h *Host) Sessions() int { return h.gateway.Sessions() }

// Revive asks the named server to try connecting now: a parked server
// starts again with a fresh retry budget, and one waiting out its reconnect
// backoff skips the rest of the wait. It waits for the outcome of the
// attempt it caused (bounded by the server's connect_timeout) and returns
// nil when the server is ready (at once if it already was), or that
// attempt's error, which says whether the server is parked again or
// reconnecting. If ctx ends first it returns an error wrapping ctx's. An
// unknown name is an error wrapping ErrUnknownServer.
func (h *Host) Revive(ctx context.Context, name string) error {
	s, err := h.sup(name)
	if err != nil {
		return err
	}
	select {
	case err := <-s.Revive():
		return err
	case <-ctx.Done():
		return fmt.Errorf("server %q: revived, but its attempt had no outcome yet (see `mcpvisor status`): %w", name, ctx.Err())
	}
}
