// Package upstream supervises one MCP server per server block: it connects,
// detects death, respawns with backoff, parks when the retry budget is spent,
// revives on a half-open probe, and runs every operation through the
// recovery path of docs/design.md §6.
package upstream

/*
Design note: the files, by job (docs/design.md §4).

supervisor.go holds the Supervisor and its fields (the lock guarding each
is named beside it), construction, Start/Stop and Status; lifecycle.go the
state machine below (the run loop); session.go one generation's session
(connect, monitor, serve, close); breaker.go the breaker; call.go and
forward.go call execution; downstream.go, inputrequests.go and bridge.go
what an upstream sends during a call.

Design note: the state machine.

    starting ─► ready ⇄ reconnecting ─► parked ─► (revive) starting
        └──────────┴──────┴─► needs_login ─► (new tokens stored) reconnecting
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
	name    string
	cfg     config.Server
	logger  hclog.Logger
	opts    Options
	client  *mcp.Client
	breaker *Breaker

	cur atomic.Pointer[session] // the ready session, nil when none

	// lastRemoteProbe is when a call last probed this parked remote server
	// early (UnixNano; see remoteProbeDue).
	lastRemoteProbe atomic.Int64
	// earlyRevive is set when such an early probe revives the server: its
	// failure re-parks without lengthening the parked wait, which counts
	// the server's own attempts, not the calls'.
	earlyRevive atomic.Bool
	// earlyRetry is set when a call or a tools/list cuts a remote server's
	// reconnect backoff short (probeRemote): a failure of that attempt is
	// not charged to the retry budget, which counts the server's own
	// attempts, so calls cannot park a server sooner than it would park
	// by itself.
	earlyRetry atomic.Bool

	// readOnly holds the names of tools that declared readOnlyHint, from the
	// last catalog; read lock-free on the call path.
	readOnly atomic.Pointer[map[string]bool]

	// mu guards the lifecycle fields below, up to exited. Only the run
	// loop (lifecycle.go) changes state; nobody holds mu across I/O.
	mu          sync.Mutex
	state       State             // guarded by mu
	since       time.Time         // guarded by mu
	gen         uint64            // guarded by mu
	failures    int               // guarded by mu: the retry budget spent
	lastErr     error             // guarded by mu
	lastErrAt   time.Time         // guarded by mu
	nextAttempt time.Time         // guarded by mu
	failedGen   uint64            // guarded by mu: highest generation a caller reported failed
	failedErr   error             // guarded by mu: what that caller saw
	changed     chan struct{}     // guarded by mu: closed and replaced on every change
	catalog     *registry.Catalog // guarded by mu
	// outcomeWaiters (guarded by mu) wait for the outcome of the next
	// connect attempt (Start, Revive); the run loop takes them when that
	// attempt starts. exited (guarded by mu) is set once the run loop has
	// returned: a waiter registered later is answered at once.
	outcomeWaiters []chan error
	exited         bool

	// rootsMu guards roots, the roots SetRoots last gave the SDK client.
	rootsMu sync.Mutex
	roots   map[string]*mcp.Root

	// flightMu guards the in-flight downstream calls (downstream.go).
	flightMu  sync.Mutex
	flightSeq uint64               // guarded by flightMu
	flights   map[uint64]*inflight // guarded by flightMu
	byToken   map[string]*inflight // guarded by flightMu
	// requestsToClients counts the upstream's requests to downstream
	// clients (sampling, elicitation, roots) being handled, for
	// max_pending_requests (downstream.go).
	requestsToClients atomic.Int64
	maxPending        int64         // max_pending_requests
	declinedRequests  atomic.Uint64 // requests declined for max_pending_requests
	// relayed is set once a link relays progress and log notifications
	// itself; the SDK's handlers then leave them alone.
	relayed atomic.Bool

	// The channels below are set in New and never replaced (no lock):
	// callers signal the run loop through them.
	wake     chan struct{} // a caller reported a failed generation
	revive   chan struct{} // leave park / skip backoff now
	relist   chan struct{} // the upstream said a list changed
	healthy  chan struct{} // a call succeeded: the session is proven
	stopCh   chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	// stopReason says why the supervisor stopped, for the errors of calls
	// that meet it stopping ("host shutting down", "restarted by reload").
	stopReason atomic.Pointer[string]
	// calls counts the operations in flight through do(), for Drain.
	calls atomic.Int64
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
		name:    srv.Name,
		cfg:     *srv,
		logger:  opts.Logger.Named("upstream").With("server", srv.Name),
		opts:    opts,
		breaker: NewBreaker(srv.Breaker.Threshold, srv.Breaker.Cooldown, opts.Now),
		state:   StateStarting,
		since:   time.Now(),
		changed: make(chan struct{}),
		wake:    make(chan struct{}, 1),
		revive:  make(chan struct{}, 1),
		relist:  make(chan struct{}, 1),
		healthy: make(chan struct{}, 1),
		stopCh:  make(chan struct{}),
		done:    make(chan struct{}),
		flights: map[uint64]*inflight{},
		byToken: map[string]*inflight{},

		maxPending: int64(cmp.Or(srv.MaxPendingRequests, config.DefaultMaxPendingRequests)),
	}
	if obs := opts.Observer; obs != nil {
		s.breaker.OnChange(func(from, to BreakerState) { obs.BreakerChanged(s.name, from, to) })
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
	s.stopOnce.Do(func() {
		s.stopReason.Store(&reason)
		close(s.stopCh)
	})
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
	s.mu.Lock()
	st := Status{
		Name:        s.name,
		Transport:   string(s.cfg.Transport),
		State:       s.state,
		Since:       s.since,
		Generation:  s.gen,
		Retries:     max(s.failures-1, 0),
		MaxRetries:  s.cfg.Reconnect.MaxRetries,
		NextAttempt: s.nextAttempt,
		LastErrorAt: s.lastErrAt,
		MemoryLimit: s.cfg.Limits.Memory,
	}
	if s.lastErr != nil {
		st.LastError = recovery.Redact(s.lastErr.Error())
	}
	switch s.state {
	case StateNeedsLogin:
		st.Action = s.loginAction()
	case StateNeedsConfig:
		st.Action = s.configAction()
	}
	if c := s.catalog; c != nil {
		st.Tools, st.Resources, st.Prompts = len(c.Tools), len(c.Resources)+len(c.Templates), len(c.Prompts)
		st.CatalogTruncatedReason = strings.Join(c.Truncated, "; ")
	}
	s.mu.Unlock()
	bs, bf, until := s.breaker.Snapshot()
	st.Breaker, st.BreakerFailures, st.BreakerRetryAt = bs.String(), bf, until
	if cur := s.cur.Load(); cur != nil {
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
	if cur := s.cur.Load(); cur != nil {
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
func (s *Supervisor) Catalog() *registry.Catalog {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.catalog
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (s *Supervisor) recordError(err error) {
	s.mu.Lock()
	s.lastErr = err
	s.lastErrAt = time.Now()
	s.mu.Unlock()
}

func (s *Supervisor) setFailures(n int) {
	s.mu.Lock()
	s.failures = n
	s.mu.Unlock()
}

func (s *Supervisor) publishCatalog(cat *registry.Catalog) {
	ro := map[string]bool{}
	if cat != nil {
		for _, t := range cat.Tools {
			if t.Annotations != nil && t.Annotations.ReadOnlyHint {
				ro[t.Name] = true
			}
		}
	}
	s.readOnly.Store(&ro)
	s.mu.Lock()
	s.catalog = cat
	s.mu.Unlock()
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
func (s *Supervisor) Drain(ctx context.Context) error {
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for s.calls.Load() > 0 {
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// stopped is the reason the supervisor stopped.
func (s *Supervisor) stopped() string {
	if r := s.stopReason.Load(); r != nil {
		return *r
	}
	return "stopped"
}
