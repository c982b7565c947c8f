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

needs_login is parked for a reason no retry can fix: an OAuth server whose
tokens are missing or could not be refreshed. Its tools are withdrawn at
once, without spending the retry budget, and the supervisor polls the token
store (loginPollInterval) until `mcpvisor login` has stored new tokens, so
a running host recovers without a restart.
*/

import (
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
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// State is a supervisor's lifecycle state.
type State int

// The supervisor states (DESIGN.md §4).
const (
	StateStarting State = iota
	StateReady
	StateReconnecting
	StateParked
	StateStopped
	StateNeedsLogin
)

// String returns the state's name as shown in status.
func (s State) String() string {
	switch s {
	case StateStarting:
		return "starting"
	case StateReady:
		return "ready"
	case StateReconnecting:
		return "reconnecting"
	case StateParked:
		return "parked"
	case StateStopped:
		return "stopped"
	case StateNeedsLogin:
		return "needs_login"
	}
	return "unknown"
}

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

	// DefaultProtocolVersion is requested from upstreams whose block sets no
	// protocol_version. It is the newest session-based version: on it an
	// upstream may send sampling and elicitation requests while serving a
	// call, which mcpvisor forwards to the downstream client; 2026-07-28
	// forbids that in favour of input-required results.
	DefaultProtocolVersion = "2025-11-25"

	// statelessProtocolVersion is the first protocol version without
	// sessions (SEP-2575); its results are shaped by the SDK.
	statelessProtocolVersion = "2026-07-28"

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
	// Dialer makes links to the server. Required.
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

// Status is a supervisor's externally visible state.
type Status struct {
	Name       string    `json:"name"`
	Transport  string    `json:"transport"`
	State      string    `json:"state"`
	Since      time.Time `json:"since"`
	Generation uint64    `json:"generation"`
	// Retries is how many retries the current run of consecutive failures
	// has made (the first failure is not a retry); the server parks when
	// they reach MaxRetries and fail.
	Retries    int    `json:"retries"`
	MaxRetries int    `json:"max_retries"`
	Breaker    string `json:"breaker"`
	// BreakerFailures is the breaker's count of consecutive call failures.
	BreakerFailures int `json:"breaker_failures"`
	// BreakerRetryAt is when an open breaker lets the next probe through.
	BreakerRetryAt time.Time `json:"breaker_retry_at,omitzero"`
	// NextAttempt is when a reconnecting or parked server tries again.
	NextAttempt time.Time `json:"next_attempt,omitzero"`
	LastError   string    `json:"last_error,omitempty"`
	// Action says what a person must do for the server to recover, when
	// it cannot on its own ("run `mcpvisor login NAME`").
	Action      string    `json:"action,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	Tools       int       `json:"tools"`
	Resources   int       `json:"resources"`
	Prompts     int       `json:"prompts"`
	// Pid is the server process's pid for stdio servers that are running.
	Pid int `json:"pid,omitempty"`
}

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
	_, ok := s.link.(interface{ Pid() int })
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

	// rootsMu guards roots, the roots SetRoots last gave the SDK client.
	rootsMu sync.Mutex
	roots   map[string]*mcp.Root

	// flightMu guards the in-flight downstream calls (downstream.go).
	flightMu  sync.Mutex
	flightSeq uint64
	flights   map[uint64]*inflight
	byToken   map[string]*inflight
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
	return s
}

// Name is the server block's name.
func (s *Supervisor) Name() string { return s.name }

// Config returns the server block this supervisor runs.
func (s *Supervisor) Config() config.Server { return s.cfg }

// Start begins connecting in the background. It returns at once.
func (s *Supervisor) Start() {
	go s.run()
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
// backoff delay to try at once.
func (s *Supervisor) Revive() { signal(s.revive) }

// Status returns a snapshot of the supervisor's state.
func (s *Supervisor) Status() Status {
	s.mu.Lock()
	st := Status{
		Name:        s.name,
		Transport:   string(s.cfg.Transport),
		State:       s.state.String(),
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
	if s.state == StateNeedsLogin {
		st.Action = s.loginAction()
	}
	if c := s.catalog; c != nil {
		st.Tools, st.Resources, st.Prompts = len(c.Tools), len(c.Resources)+len(c.Templates), len(c.Prompts)
	}
	s.mu.Unlock()
	bs, bf, until := s.breaker.Snapshot()
	st.Breaker, st.BreakerFailures, st.BreakerRetryAt = bs.String(), bf, until
	if cur := s.cur.Load(); cur != nil {
		if p, ok := cur.link.(interface{ Pid() int }); ok {
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
	defer func() {
		s.publishCatalog(nil)
		s.setState(StateStopped, time.Time{})
	}()

	failures := 0
	// parks counts the parks since a session last proved healthy: each
	// parked wait is longer (parkedDelay). probing is set for the attempt
	// that follows a park: if it fails, the server parks again at once
	// instead of spending a whole budget (park and re-arm).
	parks, probing := 0, false
	// early is set when the attempt after a park was a call's early probe
	// of a remote server (remoteProbeDue).
	early := false
	// exitedAs is how the last failed attempt's process exited before
	// initialize ("" if it did not); the same exit twice in a row is as
	// permanent as a missing command.
	exitedAs := ""
	for attempt := 0; ; attempt++ {
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
				if !s.awaitLogin() {
					return
				}
				failures = 0
				s.setFailures(0)
				continue
			}
			failures++
			s.recordError(err)
			s.logger.Warn("connect failed", "attempt", failures, "error", recovery.Redact(err.Error()))
			sig := exitSignature(err)
			permanent = errors.Is(err, recovery.ErrCannotStart) || (sig != "" && sig == exitedAs)
			exitedAs = sig
		} else {
			exitedAs = ""
			probing = false
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
			s.logger.Error("server cannot start as configured; parked without retrying", "error", recovery.Redact(err.Error()))
		}
		if failures > s.cfg.Reconnect.MaxRetries || (probing && err != nil) || permanent {
			if !(probing && early) {
				parks++
			}
			if !s.park(s.parkedDelay(parks)) {
				return
			}
			early = s.earlyRevive.Swap(false)
			failures, probing = 0, true
			s.setFailures(0)
			continue
		}
		delay := s.backoff(failures)
		next := time.Now().Add(delay)
		s.setState(StateReconnecting, next)
		if delay > 0 {
			s.logger.Info("reconnecting after backoff", "delay", delay.Round(time.Millisecond), "attempt", failures+1)
			if !s.sleep(delay) {
				return
			}
		}
	}
}

// exitSignature is how a process that exited before initialize exited
// ("upstream process exited (exit status 1)"), without the stderr lines
// and pids that differ between attempts; "" for any other error.
func exitSignature(err error) string {
	if !errors.Is(err, recovery.ErrProcessExited) {
		return ""
	}
	msg := err.Error()
	i := strings.Index(msg, recovery.ErrProcessExited.Error())
	if i < 0 {
		return ""
	}
	msg = msg[i:]
	if j := strings.Index(msg, ")"); j >= 0 {
		msg = msg[:j+1]
	}
	return msg
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
// (delay), or stop. It returns false on stop.
func (s *Supervisor) park(delay time.Duration) bool {
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
// stored (or a revive, or stop). It returns false on stop.
func (s *Supervisor) awaitLogin() bool {
	s.publishCatalog(nil)
	s.setState(StateNeedsLogin, time.Time{})
	s.mu.Lock()
	lastErr := s.lastErr
	s.mu.Unlock()
	s.logger.Error("server needs a login; its tools are withdrawn until then", "action", s.loginAction(), "error", errString(lastErr))
	waiter, _ := s.opts.Dialer.(transport.LoginWaiter)
	select {
	case <-s.revive:
	default:
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
		version = DefaultProtocolVersion
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
	if ir := cs.InitializeResult(); ir != nil && ir.Capabilities != nil && ir.Capabilities.Logging != nil && ir.ProtocolVersion < statelessProtocolVersion {
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
	if _, ok := link.(interface{ Pid() int }); ok {
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
			// Already connected: nothing to revive.
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

// list fetches the whole catalog, following pagination, for the
// capabilities the server advertised.
func (s *Supervisor) list(ctx context.Context, cs *mcp.ClientSession) (*registry.Catalog, error) {
	cat := &registry.Catalog{}
	caps := &mcp.ServerCapabilities{}
	if ir := cs.InitializeResult(); ir != nil && ir.Capabilities != nil {
		caps = ir.Capabilities
	}
	if caps.Tools != nil {
		for t, err := range cs.Tools(ctx, nil) {
			if err != nil {
				return nil, fmt.Errorf("tools/list: %w", err)
			}
			cat.Tools = append(cat.Tools, t)
		}
	}
	if caps.Resources != nil {
		for r, err := range cs.Resources(ctx, nil) {
			if err != nil {
				if ctx.Err() != nil {
					return nil, fmt.Errorf("resources/list: %w", err)
				}
				// A server whose resources are broken still serves its
				// tools; expose what listed.
				s.logger.Warn("resources/list failed; exposing no resources", "error", recovery.Redact(err.Error()))
				cat.Resources = nil
				break
			}
			cat.Resources = append(cat.Resources, r)
		}
		for r, err := range cs.ResourceTemplates(ctx, nil) {
			if err != nil {
				// Templates are optional even for servers with resources.
				s.logger.Debug("resources/templates/list failed", "error", err)
				break
			}
			cat.Templates = append(cat.Templates, r)
		}
	}
	if caps.Prompts != nil {
		for p, err := range cs.Prompts(ctx, nil) {
			if err != nil {
				if ctx.Err() != nil {
					return nil, fmt.Errorf("prompts/list: %w", err)
				}
				s.logger.Warn("prompts/list failed; exposing no prompts", "error", recovery.Redact(err.Error()))
				cat.Prompts = nil
				break
			}
			cat.Prompts = append(cat.Prompts, p)
		}
	}
	return cat, nil
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
// the server again with a fresh cooldown.
func (s *Supervisor) Nudge() {
	s.mu.Lock()
	parked := s.state == StateParked
	s.mu.Unlock()
	if parked && s.breaker.CooldownPassed() {
		s.Revive()
	}
}
