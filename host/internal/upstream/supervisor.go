// Package upstream supervises one MCP server per server block: it connects,
// detects death, respawns with backoff, parks when the retry budget is spent,
// revives on a half-open probe, and runs every operation through the
// recovery path of DESIGN.md §6.
package upstream

/*
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
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/registry"
	"github.com/mcpvisor/mcpvisor/host/internal/transport"
	"github.com/mcpvisor/mcpvisor/host/internal/wire"
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
	// session before giving up with the original error (DESIGN.md §6).
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
	// BackoffBase overrides the 1 s base of the reconnect backoff (tests).
	BackoffBase time.Duration
	// Now overrides the clock used by the breaker (tests).
	Now func() time.Time
}

// Status is a supervisor's externally visible state: the supervisor fills
// the lifecycle fields, the host the rest.
type Status = status.Server

// session is one live connection: a generation of the server.
type session struct {
	gen  uint64
	cs   *mcp.ClientSession
	link transport.Link
	// conn is the connection of a process-backed session (nil for HTTP);
	// it carries the calls Forward passes through as bytes (forward.go).
	conn *processConn
	// dead is closed by the session's monitor when the link or the session
	// ends; err then says why.
	dead chan struct{}
	err  error
	// proven is set by the first call that succeeds on the session, the
	// one that tells the supervisor (later ones need not wake it).
	proven atomic.Bool
	// diedInCall is set when the process died with a call in flight:
	// possibly that call's doing (a request that crashes the server), so
	// the death is not charged to the retry budget that parks the server
	// for every client; the breaker still counts it.
	diedInCall atomic.Bool
	// struck is set once the session's own failure has counted against
	// the breaker (strikeSession).
	struck atomic.Bool
}

// stalled reports whether a write to the session's process ever timed out.
func (s *session) stalled() bool { return s.conn != nil && s.conn.stalled() }

func (s *session) isDead() bool {
	select {
	case <-s.dead:
		return true
	default:
		return false
	}
}

// processBacked reports whether the session runs over a process whose death
// we observe (stdio, plugin): a broken connection there means the process is
// gone or going, and an in-flight call's outcome is unknown.
func (s *session) processBacked() bool {
	_, ok := s.link.(transport.ProcessLink)
	return ok
}

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

	mu          sync.Mutex
	state       State
	since       time.Time
	gen         uint64
	failures    int
	lastErr     error
	lastErrAt   time.Time
	nextAttempt time.Time
	failedGen   uint64        // highest generation a caller reported failed
	failedErr   error         // what that caller saw
	changed     chan struct{} // closed and replaced on every change
	catalog     *registry.Catalog
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
	flightSeq uint64
	flights   map[uint64]*inflight
	byToken   map[string]*inflight
	// requestsToClients counts the upstream's requests to downstream
	// clients (sampling, elicitation, roots) being handled, for
	// max_pending_requests (downstream.go).
	requestsToClients atomic.Int64
	maxPending        int64         // max_pending_requests
	declinedRequests  atomic.Uint64 // requests declined for max_pending_requests
	// relayed is set once a link relays progress and log notifications
	// itself; the SDK's handlers then leave them alone.
	relayed atomic.Bool

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

// Revive asks a parked server to reconnect now, and a server waiting out a
// backoff delay to try at once. It returns a channel that receives the
// outcome of the attempt the revive causes: nil once the server is ready
// (at once if it already was), or an error saying the attempt failed and
// whether the server is parked again or reconnecting. The attempt is
// bounded by connect_timeout. The channel is buffered: a caller that does
// not want the outcome may drop it.
func (s *Supervisor) Revive() <-chan error {
	out := s.awaitOutcome()
	signal(s.revive)
	return out
}

// awaitOutcome registers a waiter for the outcome of the next connect
// attempt.
func (s *Supervisor) awaitOutcome() <-chan error {
	ch := make(chan error, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exited {
		ch <- &recovery.Error{Server: s.name, Class: recovery.Unavailable, Reason: s.stopped(), Err: ErrStopped}
		return ch
	}
	s.outcomeWaiters = append(s.outcomeWaiters, ch)
	return ch
}

// takeWaiters removes and returns the waiters for the next attempt.
func (s *Supervisor) takeWaiters() []chan error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ws := s.outcomeWaiters
	s.outcomeWaiters = nil
	return ws
}

// waitersPending reports whether someone waits for an attempt to start.
func (s *Supervisor) waitersPending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.outcomeWaiters) > 0
}

// answer tells waiters an attempt's outcome.
func answer(waiters []chan error, err error) {
	for _, ch := range waiters {
		ch <- err
	}
}

// attemptFailed is what the waiters of a failed attempt are told: why it
// failed and what the server does next (state is where it is now).
func (s *Supervisor) attemptFailed(err error, state State, next time.Time) error {
	reason := "the connect attempt failed; reconnecting"
	switch state {
	case StateParked:
		reason = "the connect attempt failed; parked again"
	case StateNeedsLogin:
		reason = "the connect attempt failed; needs a login (" + s.loginAction() + ")"
	}
	return &recovery.Error{Server: s.name, Class: recovery.Unavailable, Reason: reason, Err: err, RetryAt: next}
}

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

// setState records a transition and wakes everyone waiting on a change.
func (s *Supervisor) setState(st State, next time.Time) {
	s.mu.Lock()
	from := s.state
	if s.state != st {
		s.since = time.Now()
	}
	s.state = st
	s.nextAttempt = next
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	if s.opts.Observer != nil && from != st {
		s.opts.Observer.StateChanged(s.name, from, st)
	}
	if s.opts.OnStatus != nil {
		s.opts.OnStatus(s.Status())
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

// run is the one goroutine that owns the supervisor's state.
func (s *Supervisor) run() {
	defer close(s.done)
	// waiters are those of the attempt in progress (Start, Revive).
	var waiters []chan error
	defer func() {
		s.publishCatalog(nil)
		s.setState(StateStopped, time.Time{})
		s.mu.Lock()
		s.exited = true
		s.mu.Unlock()
		stopped := &recovery.Error{Server: s.name, Class: recovery.Unavailable, Reason: s.stopped(), Err: ErrStopped}
		answer(waiters, stopped)
		answer(s.takeWaiters(), stopped)
	}()

	if len(s.cfg.MissingEnv) > 0 {
		s.holdForConfig()
		return
	}

	failures := 0
	// parks counts the parks since a session last proved healthy: each
	// parked wait is longer (parkedDelay). probing is set for the attempt
	// that follows a park: if it fails, the server parks again at once
	// instead of spending a whole budget (park and re-arm).
	parks, probing := 0, false
	// early is set when the attempt after a park was a call's early probe
	// of a remote server (remoteProbeDue).
	early := false
	// retriedEarly is set for an attempt a call made during the backoff
	// (earlyRetry); scheduled is when the server's own next attempt was
	// due, which such an attempt does not move.
	retriedEarly := false
	var scheduled time.Time
	for attempt := 0; ; attempt++ {
		waiters = append(waiters, s.takeWaiters()...)
		sess, err := s.connect()
		if s.opts.Observer != nil && !(err != nil && s.isStopping()) {
			var gen uint64
			if sess != nil {
				gen = sess.gen
			}
			s.opts.Observer.ConnectFinished(s.name, gen, attempt == 0, err)
		}
		permanent := false
		if err != nil {
			if s.isStopping() {
				return
			}
			// A connect refused for want of a scope cannot succeed until a
			// login grants it, like one without valid tokens.
			if errors.Is(err, recovery.ErrNeedsLogin) || errors.Is(err, recovery.ErrInsufficientScope) {
				s.recordError(err)
				if !s.awaitLogin(func() {
					answer(waiters, s.attemptFailed(err, StateNeedsLogin, time.Time{}))
					waiters = nil
				}) {
					return
				}
				failures = 0
				s.setFailures(0)
				continue
			}
			s.recordError(err)
			if retriedEarly {
				s.logger.Debug("connect made by a call during the backoff failed", "error", recovery.Redact(err.Error()))
			} else {
				failures++
				s.logger.Warn("connect failed", "attempt", failures, "error", recovery.Redact(err.Error()))
			}
			// Only what no retry can change (a missing or non-executable
			// command) parks at once. A process that exits before
			// initialize, even the same way every time, may be waiting
			// for something that is ready a moment later (a database, a
			// socket, a file): it follows the backoff and the budget.
			permanent = errors.Is(err, recovery.ErrCannotStart)
		} else {
			probing = false
			answer(waiters, nil)
			waiters = nil
			healthy, deathErr := s.serve(sess, &failures)
			s.cur.Store(nil)
			if !s.isStopping() {
				// Visible at once, even while a stubborn process is still
				// being stopped.
				s.setState(StateReconnecting, time.Time{})
			}
			s.closeSession(sess)
			if s.isStopping() {
				return
			}
			if healthy {
				failures, parks = 0, 0
			}
			if !sess.diedInCall.Load() {
				failures++
			}
			if deathErr != nil {
				s.recordError(deathErr)
				s.logger.Warn("server connection lost", "generation", sess.gen, "error", recovery.Redact(deathErr.Error()))
			}
		}
		s.setFailures(failures)

		if permanent && !probing {
			s.logger.Error("server cannot start as configured (the same failure again); parking it now rather than spending its max_retries", "error", recovery.Redact(err.Error()))
		}
		if failures > s.cfg.Reconnect.MaxRetries || (probing && err != nil) || permanent {
			if !(probing && early) {
				parks++
			}
			if !s.park(s.parkedDelay(parks), func(next time.Time) {
				if err != nil {
					answer(waiters, s.attemptFailed(err, StateParked, next))
					waiters = nil
				}
			}) {
				return
			}
			early = s.earlyRevive.Swap(false)
			failures, probing = 0, true
			s.setFailures(0)
			continue
		}
		delay := s.backoff(failures)
		next := time.Now().Add(delay)
		if retriedEarly && err != nil && time.Now().Before(scheduled) {
			// The server's own attempt is still due when it was.
			delay, next = time.Until(scheduled), scheduled
		}
		scheduled = next
		s.earlyRetry.Store(false)
		s.setState(StateReconnecting, next)
		if err != nil {
			answer(waiters, s.attemptFailed(err, StateReconnecting, next))
			waiters = nil
		}
		if delay > 0 && !retriedEarly {
			s.logger.Info("reconnecting after backoff", "delay", delay.Round(time.Millisecond), "attempt", failures+1)
		}
		retriedEarly = false
		if delay > 0 {
			if !s.sleep(delay) {
				return
			}
			retriedEarly = s.earlyRetry.Swap(false) && time.Now().Before(scheduled)
		}
	}
}

// parkedDelay is how long the n-th consecutive park (n ≥ 1) waits before
// the server tries again by itself: the breaker's cooldown, doubling with
// each park, up to parked_retry. A short outage then heals within about a
// cooldown; a server that stays down is tried less and less often.
func (s *Supervisor) parkedDelay(n int) time.Duration {
	d, max := s.cfg.Breaker.Cooldown, s.cfg.Reconnect.ParkedRetry
	if d <= 0 || d > max {
		return max
	}
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

func (s *Supervisor) isStopping() bool {
	select {
	case <-s.stopCh:
		return true
	default:
		return false
	}
}

// backoff is the delay before retry number n (n ≥ 1 consecutive failures):
// immediate first, then base doubling, capped, with ±20% jitter.
func (s *Supervisor) backoff(n int) time.Duration {
	if n <= 1 {
		return 0
	}
	d := s.opts.BackoffBase
	for i := 2; i < n && d < s.cfg.Reconnect.MaxBackoff; i++ {
		d *= 2
	}
	if max := s.cfg.Reconnect.MaxBackoff; max > 0 && d > max {
		d = max
	}
	j := 1 + backoffJitter*(2*rand.Float64()-1)
	return time.Duration(float64(d) * j)
}

// sleep waits d, cut short by a revive signal. It returns false on stop.
func (s *Supervisor) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.revive:
		return true
	case <-s.stopCh:
		return false
	}
}

// park deregisters the server and waits for a revive (a call or a
// tools/list after the breaker's cooldown, Revive, SIGHUP), its own timer
// (delay), or stop. parked is called once the server shows as parked, with
// its next attempt time. It returns false on stop.
func (s *Supervisor) park(delay time.Duration, parked func(next time.Time)) bool {
	// Drain a stale revive first, so only a signal sent once the server is
	// visibly parked wakes it (a call that sees it parked may revive it at
	// once).
	select {
	case <-s.revive:
	default:
	}
	s.earlyRevive.Store(false)
	s.publishCatalog(nil)
	s.breaker.Trip()
	next := time.Now().Add(delay)
	s.setState(StateParked, next)
	s.mu.Lock()
	lastErr := s.lastErr
	s.mu.Unlock()
	s.logger.Error("server parked", "max_retries", s.cfg.Reconnect.MaxRetries,
		"next_attempt_in", delay, "last_error", errString(lastErr))
	parked(next)
	if s.waitersPending() {
		// A Revive came while the attempt that parked the server was
		// running: it asked for an attempt after that one.
		s.logger.Info("reviving parked server")
		return true
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-s.revive:
		s.logger.Info("reviving parked server")
	case <-t.C:
		s.logger.Info("parked server trying again by itself")
	case <-s.stopCh:
		return false
	}
	return true
}

// awaitLogin withdraws the server's tools and waits until new tokens are
// stored (or a revive, or stop). shown is called once the server shows as
// needing a login. It returns false on stop.
func (s *Supervisor) awaitLogin(shown func()) bool {
	s.publishCatalog(nil)
	s.setState(StateNeedsLogin, time.Time{})
	shown()
	s.mu.Lock()
	lastErr := s.lastErr
	s.mu.Unlock()
	s.logger.Error("server needs a login; its tools are withdrawn until then", "action", s.loginAction(), "error", errString(lastErr))
	waiter, _ := s.opts.Dialer.(transport.LoginWaiter)
	select {
	case <-s.revive:
	default:
	}
	if s.waitersPending() {
		// A Revive came while the attempt was running: try once more.
		return true
	}
	t := time.NewTicker(loginPollInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stopCh:
			return false
		case <-s.revive:
			s.logger.Info("revived; trying the stored tokens again")
			return true
		case <-t.C:
			if waiter != nil && waiter.HasNewLogin() {
				s.logger.Info("new tokens stored; reconnecting")
				return true
			}
		}
	}
}

// holdForConfig keeps a server whose block reads unset environment
// variables in needs_config until stop: starting it with the variables
// empty would only fail later and less clearly (an empty API key is a 401).
// A Revive is told at once why nothing was tried.
func (s *Supervisor) holdForConfig() {
	err := s.missingEnvError()
	s.recordError(err)
	s.setState(StateNeedsConfig, time.Time{})
	s.logger.Error("server not started: its block reads environment variables that are not set", "action", s.configAction(), "missing", strings.Join(s.cfg.MissingEnv, ","))
	held := &recovery.Error{Server: s.name, Class: recovery.Unavailable, Reason: "not started: " + s.configAction(), Err: err}
	for {
		answer(s.takeWaiters(), held)
		select {
		case <-s.stopCh:
			return
		case <-s.revive:
		}
	}
}

// missingEnvError says which variables a needs_config server lacks.
func (s *Supervisor) missingEnvError() error {
	quoted := make([]string, len(s.cfg.MissingEnv))
	for i, n := range s.cfg.MissingEnv {
		quoted[i] = fmt.Sprintf("%q", n)
	}
	return fmt.Errorf("environment variable %s read by env() in its block is not set", strings.Join(quoted, ", "))
}

// configAction is what a person must do for a needs_config server to run.
func (s *Supervisor) configAction() string {
	return fmt.Sprintf("set %s in mcpvisor's environment and restart mcpvisor (or give env() a default)", strings.Join(s.cfg.MissingEnv, ", "))
}

// loginAction is what a person must run for the server to come back.
func (s *Supervisor) loginAction() string {
	return fmt.Sprintf("run `mcpvisor login %s`", s.name)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return recovery.Redact(err.Error())
}

// connect makes one attempt: dial, initialize, list. It is bounded by
// connect_timeout and cut short by stop.
func (s *Supervisor) connect() (*session, error) {
	s.mu.Lock()
	starting := s.gen == 0
	s.mu.Unlock()
	if starting {
		s.setState(StateStarting, time.Time{})
	} else {
		s.setState(StateReconnecting, time.Time{})
	}

	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ConnectTimeout)
	defer cancel()
	go func() {
		select {
		case <-s.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()

	link, err := s.opts.Dialer.Dial(ctx)
	if err != nil {
		return nil, err
	}
	version := s.cfg.ProtocolVersion
	if version == "" {
		version = wire.DefaultUpstream
	}
	opts := &mcp.ClientSessionOptions{ProtocolVersion: version}
	cs, conn, err := s.connectSession(ctx, link, opts)
	if err != nil {
		// Read why before closing: closing makes a live process exit too.
		linkErr, timedOut := link.Err(), errors.Is(ctx.Err(), context.DeadlineExceeded)
		cctx, ccancel := context.WithTimeout(context.Background(), closeGrace)
		link.Close(cctx)
		ccancel()
		switch {
		case timedOut:
			// First: the SDK closes the connection when Connect gives up,
			// and a server that exits on EOF may already be gone by now.
			err := fmt.Errorf("initialize: no answer within connect_timeout (%s)", s.cfg.ConnectTimeout)
			if st, ok := link.(interface{ Stray() string }); ok && st.Stray() != "" {
				err = fmt.Errorf("%w; the server wrote %q to stdout, which is for MCP messages only (a server must log to stderr)", err, recovery.Redact(st.Stray()))
			}
			return nil, err
		case linkErr != nil:
			return nil, fmt.Errorf("initialize: %w", linkErr)
		}
		// A process that died during startup shows as EOF first; its exit
		// status and stderr, known once it is reaped, say more.
		if linkErr := link.Err(); linkErr != nil {
			return nil, fmt.Errorf("initialize: %w", linkErr)
		}
		return nil, fmt.Errorf("initialize: %w", err)
	}

	s.mu.Lock()
	s.gen++
	gen := s.gen
	s.mu.Unlock()
	sess := &session{gen: gen, cs: cs, link: link, conn: conn, dead: make(chan struct{})}
	go s.monitor(sess)

	cat, err := s.list(ctx, cs)
	if err != nil {
		s.closeSession(sess)
		return nil, fmt.Errorf("listing tools, resources and prompts: %w", err)
	}
	if ir := cs.InitializeResult(); ir != nil && ir.Capabilities != nil && ir.Capabilities.Logging != nil && ir.ProtocolVersion < wire.Stateless {
		// Ask for everything; each downstream session filters by the level
		// its client set, as the go-sdk server does for its own logs. (A
		// 2026-07-28 session is asked per request: bridge.go.)
		if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
			s.logger.Debug("logging/setLevel on the upstream failed", "error", err)
		}
	}
	s.cur.Store(sess)
	s.breaker.Reset()
	s.publishCatalog(cat)
	s.setState(StateReady, time.Time{})
	s.logger.Info("server ready", "generation", gen, "tools", len(cat.Tools),
		"resources", len(cat.Resources)+len(cat.Templates), "prompts", len(cat.Prompts))
	return sess, nil
}

// connectSession runs the initialize handshake, giving up at once if the
// link dies underneath it (a process that exits during startup).
func (s *Supervisor) connectSession(ctx context.Context, link transport.Link, opts *mcp.ClientSessionOptions) (*mcp.ClientSession, *processConn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-link.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	t := link.Transport()
	var holder connHolder
	if _, ok := link.(transport.ProcessLink); ok {
		t = processTransport{Transport: t, s: s, holder: &holder}
	} else if r, ok := link.(transport.NotificationRelay); ok {
		s.relayed.Store(true)
		r.RelayNotifications(orderedNotifications, func(req *jsonrpc.Request) {
			if !s.forwardNotification(req) {
				s.logger.Debug("relayed notification not forwarded: params do not decode", "method", req.Method)
			}
		})
	}
	cs, err := s.client.Connect(ctx, t, opts)
	return cs, holder.conn, err
}

// monitor closes sess.dead when the link dies or the session ends. For a
// process link, it also closes the session so in-flight calls fail at once
// instead of waiting on pipes that a grandchild may hold open.
func (s *Supervisor) monitor(sess *session) {
	waitDone := make(chan error, 1)
	go func() { waitDone <- sess.cs.Wait() }()
	select {
	case <-sess.link.Done():
		sess.err = sess.link.Err()
		close(sess.dead)
		sess.cs.Close()
		<-waitDone
	case err := <-waitDone:
		// Give the link a moment to report the process exit, which says
		// more than "connection closed".
		select {
		case <-sess.link.Done():
			err = sess.link.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if err == nil {
			err = errors.New("session closed by the server")
		}
		sess.err = err
		close(sess.dead)
	}
}

// serve waits while the session is ready. It returns whether the session
// proved healthy and why it ended (nil on stop).
func (s *Supervisor) serve(sess *session, failures *int) (healthy bool, err error) {
	healthyAfter := time.NewTimer(s.cfg.Reconnect.HealthyAfter)
	defer healthyAfter.Stop()
	markHealthy := func() {
		if !healthy {
			healthy = true
			*failures = 0
			s.setFailures(0)
		}
	}
	for {
		select {
		case <-s.stopCh:
			return healthy, nil
		case <-sess.dead:
			return healthy, sess.err
		case <-s.wake:
			s.mu.Lock()
			failed, why := s.failedGen >= sess.gen, s.failedErr
			s.mu.Unlock()
			if !failed {
				continue
			}
			// A process that died says more about it than the call that
			// tripped over its pipes; give its exit a moment to be seen.
			if sess.processBacked() {
				select {
				case <-sess.dead:
					return healthy, sess.err
				case <-time.After(processExitGrace):
				}
			}
			return healthy, fmt.Errorf("a call found the session broken: %w", why)
		case <-s.relist:
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
			cat, err := s.list(ctx, sess.cs)
			cancel()
			if err != nil {
				s.logger.Warn("re-listing after list_changed failed", "error", recovery.Redact(err.Error()))
				continue
			}
			s.publishCatalog(cat)
		case <-s.healthy:
			markHealthy()
		case <-healthyAfter.C:
			markHealthy()
		case <-s.revive:
			// Already connected: nothing to revive; whoever asked is told
			// the server is ready.
			answer(s.takeWaiters(), nil)
		}
	}
}

// closeSession stops the link before closing the session: a stdio server
// then sees EOF on stdin and exits on its own, instead of dying of EPIPE
// because its stdout was closed under it.
func (s *Supervisor) closeSession(sess *session) {
	ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
	defer cancel()
	if err := sess.link.Close(ctx); err != nil {
		s.logger.Warn("stopping server process", "error", err)
	}
	sess.cs.Close()
}

// WaitSettled waits until the supervisor has left the starting state (it is
// ready, reconnecting, parked or stopped) or ctx ends.
func (s *Supervisor) WaitSettled(ctx context.Context) error {
	for {
		s.mu.Lock()
		st, changed := s.state, s.changed
		s.mu.Unlock()
		if st != StateStarting {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
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

// ProtocolVersion is the MCP protocol version negotiated with the upstream
// on the current session ("" when not connected).
func (s *Supervisor) ProtocolVersion() string {
	sess := s.cur.Load()
	if sess == nil {
		return ""
	}
	if ir := sess.cs.InitializeResult(); ir != nil {
		return ir.ProtocolVersion
	}
	return ""
}

// remoteProbeDue reports whether a call may probe this parked server now,
// before its breaker's cooldown has passed: only a remote (HTTP or SSE)
// server, and at most once per remoteProbeEvery however many calls
// arrive.
func (s *Supervisor) remoteProbeDue() bool {
	if s.cfg.URL == "" {
		return false
	}
	now := time.Now().UnixNano()
	last := s.lastRemoteProbe.Load()
	return now-last >= int64(remoteProbeEvery) && s.lastRemoteProbe.CompareAndSwap(last, now)
}

// Nudge asks a parked server whose breaker cooldown has passed to try
// again now, without waiting for the outcome (a downstream tools/list: an
// agent starting up). The cooldown rate-limits it: a failed attempt parks
// the server again with a fresh cooldown. A remote server is nudged as a
// call probes it (probeRemote): parked or waiting out a backoff, at most
// once per remoteProbeEvery, so a new client sees its tools about as soon
// as it is back.
func (s *Supervisor) Nudge() {
	s.mu.Lock()
	state, next := s.state, s.nextAttempt
	s.mu.Unlock()
	if s.probeRemote(state, next) {
		return
	}
	if state == StateParked && s.breaker.CooldownPassed() {
		signal(s.revive)
	}
}

// probeRemote makes a remote server that is parked, or waiting out a
// reconnect backoff until next, try now, if an early probe is due
// (remoteProbeDue). It reports whether it did.
func (s *Supervisor) probeRemote(state State, next time.Time) bool {
	switch {
	case state == StateParked:
		if !s.remoteProbeDue() {
			return false
		}
		s.earlyRevive.Store(true)
	case state == StateReconnecting && time.Until(next) > 0:
		if !s.remoteProbeDue() {
			return false
		}
		s.earlyRetry.Store(true)
	default:
		return false
	}
	signal(s.revive)
	return true
}
