// Package upstream supervises one MCP server per server block: it connects,
// detects death, respawns with backoff, parks when the retry budget is spent,
// revives on a half-open probe, and runs every operation through the
// recovery path of docs/design.md §6.
package upstream

/*
Design note: the types, by job (docs/design.md §4).

The Supervisor is a small manager, the way Nomad splits a manager from its
instances: it composes one part per job, each a type in its own file with
its lock story in a comment there, and runs the run loop that ties them
together.

  - lifecycle (state.go): the state machine's record; transition is the one
    place a state changes, and the run loop (lifecycle.go) its only writer.
  - budget (budget.go): the breaker (breaker.go), the reconnect backoff,
    the parked waits and the early probes of a remote server.
  - sessions (session.go): what the run loop publishes of its sessions
    (the ready one, the catalog); connect, monitor, serve and closeSession
    there are the run loop's steps for one generation.
  - calls (inflight.go): the operations in flight (Drain), the table what
    an upstream sends back is routed by (downstream.go, inputrequests.go,
    bridge.go), and the max_pending_requests count.
  - executor (exec.go): do, the one path every operation (call.go,
    forward.go) runs through; what a failure means is recovery.Decide's.
  - inbox (inbox.go): the channels callers signal the run loop through.
  - idler (idle.go): idle_timeout and max_lifetime (docs/design.md
    §18.3): the activity and holds its hooks in the executor record, and
    the run loop's steps that retire, stop and restart a session for them.

Locks are leaves: no part holds its lock while taking another's, and none
is held across I/O.

Design note: the state machine.

    starting ─► ready ⇄ reconnecting ─► parked ─► (revive) starting
        └──────────┴──────┴─► needs_login ─► (new tokens stored) reconnecting
             ready ─► idle ─► (a call, a revive) starting   (idle_timeout)
             ready ─► starting                              (max_lifetime)
                                                   stopped (from anywhere)
    needs_config ─► stopped

One goroutine (run) owns every transition. Callers never change state; they
read the published session (an atomic pointer, so the call path takes no
lock) and, when that session fails, report "generation N failed". The run
loop ignores a report about a generation that is already gone, so N
concurrent callers failing on the same session cause exactly one reconnect.

A failed attempt and a session that died before it proved healthy both count
against the retry budget; the budget resets only when a session proves
healthy (a call succeeded, or it stayed up for HealthyAfter). A server that
connects and drops at once therefore parks instead of respawning forever.

Parked is not dead: the supervisor keeps running, waiting for a revive
signal (a half-open probe call, or Revive from the library), its own slow
ParkedRetry timer, or shutdown.

Whoever asks for an attempt and must report how it went (Start, Revive:
`mcpvisor revive`, `restart`) gets the outcome of that attempt itself, not a
later look at the state: a server that fails within milliseconds of a
revive is parked again before any poll could see it leave. The waiter is
registered before the signal; the run loop takes the waiters when an
attempt starts and answers them once the attempt's outcome is visible in
Status (ready, reconnecting with a next attempt time, parked again).

needs_login is parked for a reason no retry can fix: an OAuth server whose
tokens are missing or could not be refreshed. Its tools are withdrawn at
once, without spending the retry budget, and the supervisor polls the token
store (loginPollInterval) until `mcpvisor login` has stored new tokens, so
a running host recovers without a restart.

needs_config is a server whose block reads an environment variable that was
not set when the file was loaded (config.Server.MissingEnv): it is never
started, so no tool of it is listed; status and calls say what to set.

idle is a stdio server stopped after idle_timeout without an operation,
and starting is also a server replaced at max_lifetime (idle.go): neither
is a failure, so neither spends the retry budget, strikes the breaker or
withdraws the catalog. The next call to an idle server starts it.
*/

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/limits"
	"github.com/mcpvisor/mcpvisor/host/internal/registry"
	"github.com/mcpvisor/mcpvisor/host/internal/sandbox"
	"github.com/mcpvisor/mcpvisor/host/internal/transport"
	"github.com/mcpvisor/mcpvisor/host/recovery"
	"github.com/mcpvisor/mcpvisor/host/status"
)

// State is a supervisor's lifecycle state (package status names them for
// the host too).
type State = status.State

// The supervisor states (docs/design.md §4).
const (
	StateStarting     = status.Starting
	StateReady        = status.Ready
	StateReconnecting = status.Reconnecting
	StateParked       = status.Parked
	StateStopped      = status.Stopped
	StateNeedsLogin   = status.NeedsLogin
	StateNeedsConfig  = status.NeedsConfig
	StateIdle         = status.Idle
	StateSuspect      = status.Suspect
)

const (
	// defaultBackoffBase is the second retry's delay; it doubles from there
	// up to MaxBackoff. The first retry is immediate.
	defaultBackoffBase = time.Second

	// backoffJitter spreads retries by ±20% so many servers that failed
	// together do not retry in lockstep.
	backoffJitter = 0.2

	// retryReadyCap bounds how long a recovering call waits for a newer
	// session before giving up with the original error (docs/design.md §6).
	retryReadyCap = 15 * time.Second

	// remoteProbeEvery is how often calls may probe a parked remote (HTTP
	// or SSE) server before its breaker's cooldown has passed. Trying a
	// remote server costs it one connection and mcpvisor nothing (no
	// process is spawned), and without it a server back from a short
	// outage would stay parked for up to a cooldown while agents call it.
	remoteProbeEvery = 500 * time.Millisecond

	// unlistedProbeEvery is how often calls may start a stdio server that
	// never got ready (parked at its first start, or backing off from
	// it): its tools were never listed, so only a call (to NAME__tool)
	// can bring it up before its own timer. Each try spawns a process.
	unlistedProbeEvery = time.Second

	// maxExpiryRetries bounds how often one operation is sent again after
	// the server expired its session (each time on the newest session;
	// another caller's expiry may have ended it), within its deadline.
	maxExpiryRetries = 32

	// livenessPingFloor and livenessPingCap bound the ping that confirms a
	// server stopped answering (executor.unanswered): the call timeout,
	// at least the floor (a loaded machine answers a ping late) and at
	// most the cap.
	livenessPingFloor = 2 * time.Second
	livenessPingCap   = 10 * time.Second
	// abandonedAfter is how long a call must have gone unanswered before
	// its caller gave up for a ping to follow it, and abandonedPingTimeout
	// bounds that ping (executor.abandoned).
	abandonedAfter       = time.Second
	abandonedPingTimeout = 5 * time.Second

	// processExitGrace is how long a broken process-backed session waits for
	// the process's exit to be reported, so status shows the exit status
	// and stderr rather than "connection closed".
	processExitGrace = 100 * time.Millisecond

	// closeGrace bounds how long closing a dead or replaced session may take.
	closeGrace = 5 * time.Second

	// drainPoll is how often Drain looks whether the operations in flight
	// have finished; it only runs while a replaced server is retired.
	drainPoll = 20 * time.Millisecond

	// loginPollInterval is how often a server that needs a login checks the
	// token store for tokens `mcpvisor login` stored. Reading one small
	// file is cheap; a person waits at most this long after logging in.
	loginPollInterval = 2 * time.Second
)

// Options configure a Supervisor.
type Options struct {
	// Logger is the host's logger; the supervisor names it "upstream" and
	// adds the server name.
	Logger hclog.Logger
	// Dialer makes links to the server. Required, except for a server held
	// in needs_config (config.Server.MissingEnv), which is never dialed.
	Dialer transport.Dialer
	// OnCatalog is called from the supervisor's goroutine after every
	// (re)connect and upstream list_changed with the fresh catalog, and with
	// nil when the server parks or stops (deregister everything).
	OnCatalog func(server string, cat *registry.Catalog)
	// OnStatus, if set, is called after every state change.
	OnStatus func(Status)
	// OnUnresponsive, if set, is called from the supervisor's goroutine
	// when a session that stopped answering is replaced (health.go),
	// before its process is stopped: pid is the process replaced (0 for a
	// remote server), gen the session's generation, err what found it.
	OnUnresponsive func(server string, pid int, gen uint64, err error)
	// OnLog receives upstream log messages sent while no downstream call
	// is in flight (see downstream.go).
	OnLog func(server string, msg *mcp.LoggingMessageParams)
	// OnResourceUpdated receives the upstream's resource-updated
	// notifications.
	OnResourceUpdated func(server string, p *mcp.ResourceUpdatedNotificationParams)
	// Observer, if set, is told about state changes, connect attempts,
	// breaker transitions, notifications and every operation made for a
	// downstream client (observer.go): metrics, audit and traces.
	Observer Observer
	// ClientInfo is the implementation info sent to upstreams.
	ClientInfo *mcp.Implementation
	// LimitHits counts the server's requests declined at
	// max_pending_requests; nil counts nothing.
	LimitHits *limits.Hits
	// ResultBudget is the host's max_inflight_bytes: the responses of a
	// process-backed link, which arrive whole, are counted against it
	// until their call has been handed on (processconn.go); nil counts
	// nothing.
	ResultBudget *transport.ResultBudget
	// BackoffBase overrides the 1 s base of the reconnect backoff (tests).
	BackoffBase time.Duration
	// Now overrides the clock used by the breaker (tests).
	Now func() time.Time
}

// Status is a supervisor's externally visible state: the supervisor fills
// the lifecycle fields, the host the rest.
type Status = status.Server

// Supervisor keeps one upstream server alive.
type Supervisor struct {
	name   string
	cfg    config.Server
	logger hclog.Logger
	opts   Options
	client *mcp.Client
	// budget is the breaker and retry policy (budget.go).
	budget *budget

	// sessions is what the run loop publishes: the ready session and the
	// catalog (session.go).
	sessions sessions

	// life is the state machine's record (state.go); the run loop is its
	// only writer.
	life *lifecycle
	// rootsMu guards roots, the roots SetRoots last gave the SDK client.
	rootsMu sync.Mutex
	roots   map[string]*mcp.Root

	// calls is the record of the operations in flight (inflight.go).
	calls *calls
	// relayed is set once a link relays progress and log notifications
	// itself; the SDK's handlers then leave them alone.
	relayed atomic.Bool

	// exec runs every operation through the recovery path (exec.go).
	exec *executor
	// idle is the idle_timeout and max_lifetime bookkeeping (idle.go).
	idle *idler

	// inbox is how callers signal the run loop (inbox.go); embedded, so
	// the run loop reads s.wake, s.revive, s.stopCh as it always has.
	inbox
}

// New returns a Supervisor for srv. Call Start to begin connecting.
func New(srv *config.Server, opts Options) *Supervisor {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.BackoffBase <= 0 {
		opts.BackoffBase = defaultBackoffBase
	}
	if opts.ClientInfo == nil {
		opts.ClientInfo = &mcp.Implementation{Name: "mcpvisor", Version: "dev"}
	}
	s := &Supervisor{
		name:   srv.Name,
		cfg:    *srv,
		logger: opts.Logger.Named("upstream").With("server", srv.Name),
		opts:   opts,
		life:   newLifecycle(),
		inbox:  newInbox(),
		calls:  newCalls(cmp.Or(srv.MaxPendingRequests, config.DefaultMaxPendingRequests)),
		idle:   newIdler(srv),
	}
	s.budget = newBudget(srv, opts.BackoffBase, opts.Now, s.logger)
	s.exec = &executor{name: s.name, cfg: &s.cfg, logger: s.logger, budget: s.budget,
		sessions: &s.sessions, life: s.life, calls: s.calls, idle: s.idle, in: &s.inbox}
	if obs := opts.Observer; obs != nil {
		s.budget.breaker.OnChange(func(from, to BreakerState) { obs.BreakerChanged(s.name, from, to) })
	}
	s.client = mcp.NewClient(opts.ClientInfo, &mcp.ClientOptions{
		ToolListChangedHandler:      func(context.Context, *mcp.ToolListChangedRequest) { signal(s.relist) },
		PromptListChangedHandler:    func(context.Context, *mcp.PromptListChangedRequest) { signal(s.relist) },
		ResourceListChangedHandler:  func(context.Context, *mcp.ResourceListChangedRequest) { signal(s.relist) },
		ProgressNotificationHandler: s.onProgress,
		LoggingMessageHandler:       s.onLog,
		ResourceUpdatedHandler:      s.onResourceUpdated,
		CreateMessageHandler:        s.onCreateMessage,
		ElicitationHandler:          s.onElicit,
		// answerInputRequests replaces the SDK's loop (inputrequests.go).
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
	})
	s.client.AddReceivingMiddleware(s.rootsMiddleware)
	s.client.AddSendingMiddleware(s.answerInputRequests)
	// Added last, so it runs first: a request past the cap is declined
	// before anything else happens for it.
	s.client.AddReceivingMiddleware(s.boundRequestsToClients)
	return s
}

// Name is the server block's name.
func (s *Supervisor) Name() string { return s.name }

// Config returns the server block this supervisor runs.
func (s *Supervisor) Config() config.Server { return s.cfg }

// Start begins connecting in the background. It returns at once, with a
// channel that receives the outcome of the first connect attempt: nil when
// the server is ready, or why the attempt failed (the server is then
// reconnecting or parked, as Status shows).
func (s *Supervisor) Start() <-chan error {
	out := s.awaitOutcome()
	go s.run()
	return out
}

// Stop shuts the server down: the supervisor stops, the session closes and
// the process group is terminated. It waits until that is done or ctx ends.
func (s *Supervisor) Stop(ctx context.Context) error {
	return s.StopFor(ctx, "host shutting down")
}

// StopFor is Stop with the reason calls that meet the stop are told.
func (s *Supervisor) StopFor(ctx context.Context, reason string) error {
	s.stop(reason)
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("server %q: stop: %w", s.name, ctx.Err())
	}
}

// Done is closed when the supervisor has stopped.
func (s *Supervisor) Done() <-chan struct{} { return s.done }

// Status returns a snapshot of the supervisor's state.
func (s *Supervisor) Status() Status {
	st := Status{
		Name:        s.name,
		Transport:   string(s.cfg.Transport),
		MaxRetries:  s.cfg.Reconnect.MaxRetries,
		Sandbox:     sandbox.Summary(s.cfg.Sandbox),
		MemoryLimit: s.cfg.Limits.Memory,
	}
	s.life.status(&st)
	if st.State == StateReady {
		// A call that timed out unanswered has made the session suspect
		// before the run loop shows it (health.go): status never says
		// ready for a server whose calls time out.
		if cur := s.sessions.ready(); cur != nil && cur.suspected() {
			st.State = StateSuspect
		}
	}
	switch st.State {
	case StateNeedsLogin:
		st.Action = s.loginAction()
	case StateNeedsConfig:
		st.Action = s.configAction()
	}
	if c := s.sessions.catalog.Load(); c != nil {
		st.Tools, st.Resources, st.Prompts = len(c.Tools), len(c.Resources)+len(c.Templates), len(c.Prompts)
		st.CatalogTruncatedReason = strings.Join(c.Truncated, "; ")
	}
	bs, bf, until := s.budget.breaker.Snapshot()
	st.Breaker, st.BreakerFailures, st.BreakerRetryAt = bs.String(), bf, until
	if cur := s.sessions.ready(); cur != nil {
		if p, ok := cur.link.(transport.ProcessLink); ok {
			st.Pid = p.Pid()
		}
	}
	return st
}

// Usage measures the process group of a running stdio server (its RSS
// and CPU, docs/design.md §18.2); ok is false for other servers and while
// no process runs. It reads /proc, so Status, which state changes and
// probes read often, leaves it out: the status and metrics endpoints add
// it (WithUsage).
func (s *Supervisor) Usage() (transport.Usage, bool) {
	if cur := s.sessions.ready(); cur != nil {
		if u, ok := cur.link.(transport.UsageReporter); ok {
			return u.Usage()
		}
	}
	return transport.Usage{}, false
}

// WithUsage is st with the RSS and CPU of the server's process group
// (Usage) filled in, where they can be measured.
func (s *Supervisor) WithUsage(st Status) Status {
	if u, ok := s.Usage(); ok {
		st.RSSBytes, st.CPUSeconds = u.RSS, u.CPU.Seconds()
	}
	return st
}

// Catalog returns the server's last listed catalog (nil before the first
// successful connect and while parked).
func (s *Supervisor) Catalog() *registry.Catalog { return s.sessions.catalog.Load() }

func (s *Supervisor) publishCatalog(cat *registry.Catalog) {
	s.sessions.setCatalog(cat)
	if s.opts.OnCatalog != nil {
		s.opts.OnCatalog(s.name, cat)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return recovery.Redact(err.Error())
}

// Drain waits until no operation is in flight through the supervisor, or
// ctx ends. New operations may still start: callers stop routing to it
// first (a reload swaps in its replacement before draining the old one).
func (s *Supervisor) Drain(ctx context.Context) error { return s.calls.drain(ctx) }
