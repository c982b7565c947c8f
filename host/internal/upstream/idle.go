package upstream

/*
Design note: idle stop and recycling (docs/design.md §18.3).

idle_timeout stops a stdio server's process after that long without an
operation; max_lifetime replaces it once its session is that old. Neither
is a failure: no retry budget is spent, the breaker is not struck, and the
catalog stays published (the registry keeps the tools listed and clients
get no list_changed), so a client cannot tell an idle server from a
running one except by the time its next call takes.

The decision lives here, the hooks elsewhere are small:

  - do() (call.go) calls idleCallStarted and idleCallEnded around every
    operation, and holdSession/releaseSession around each attempt on a
    session. Every operation is activity (Supervisor.calls counts those in
    flight; lastCall is when the last one started or ended), and one made
    while no session is published wakes an idle server.
  - serve (session.go) selects on a recycleTimer; recycleDue decides,
    retire takes the session out of use and drains it, and serve returns
    a *recycled error.
  - run (lifecycle.go) hands that error to recycle instead of the failure
    path: the session is closed, and an idle server waits in StateIdle for
    a call (awaitCall) before the loop connects again. Each successful
    connect after the first is reported to the Observer as a restart with
    its reason (connected), which noteDown or recycle recorded. An
    operation that arrives while an idle retire drains puts the session
    back (recycleDue).

Retiring a session: cur is set to nil first, so no new operation picks the
session up; then the session is marked retired and its holds are counted.
An operation marks its hold before it looks at retired (holdSession), and
retire marks retired before it looks at the holds: with sequentially
consistent atomics one of the two sees the other, so either the operation
backs off to wait for the next session (acquire) or retire waits for it to
finish. Operations in flight therefore complete on the old process, and new
ones wait for the new session rather than fail.

A resource subscription lives in the upstream process: stopping it would
silently end the updates a client asked for. So a server is not
idle-stopped while its current session holds a subscription made through
resources/subscribe and not yet undone. max_lifetime replaces the process
anyway (its purpose is to bound the process's age); the subscription ends
with it, as with any restart.
*/

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpvisor/mcpvisor/host/internal/transport"
)

// RestartReason says why a server was restarted: the label of
// mcpvisor_server_restarts_total. The set is fixed (RestartReasons).
type RestartReason string

// The restart reasons (docs/operations.md).
const (
	// RestartExit: the server's process (stdio or plugin) had exited by
	// the time its session ended (a crash, a signal).
	RestartExit RestartReason = "exit"
	// RestartTransport: the session or connection failed while the process
	// (if any) was still running (such as one replaced because it stopped
	// reading its input), or a remote server's session was lost.
	RestartTransport RestartReason = "transport"
	// RestartMemoryLimit: the process was stopped over its limits.memory
	// (the error wraps transport.ErrMemoryLimit).
	RestartMemoryLimit RestartReason = "memory_limit"
	// RestartIdle: started by a call after an idle stop (idle_timeout).
	RestartIdle RestartReason = "idle"
	// RestartLifetime: replaced once it was max_lifetime old.
	RestartLifetime RestartReason = "lifetime"
)

// RestartReasons lists every RestartReason, for exporters that pre-declare
// series.
func RestartReasons() []RestartReason {
	return []RestartReason{RestartExit, RestartTransport, RestartMemoryLimit, RestartIdle, RestartLifetime}
}

// maxHeldSubscriptions bounds the subscriptions the supervisor records
// for idle stop. Clients choose the URIs (a resource template matches
// without end); past the bound, later ones are not recorded: the server
// is held awake by those that are, until they are undone.
const maxHeldSubscriptions = 1024

// recheckFloor bounds how often a recycle timer may fire while it waits
// for operations in flight to end: a timer never spins.
const recheckFloor = 10 * time.Millisecond

// idleState is the Supervisor's idle and lifetime bookkeeping.
type idleState struct {
	// lastCall is when an operation last started or ended (UnixNano).
	lastCall atomic.Int64
	// wake is signalled by an operation made while no session is
	// published: an idle server starts.
	wake chan struct{}
	// drained is signalled when the last hold of a retired session ends.
	drained chan struct{}
	// coldStart is set while the server starts after an idle stop or a
	// recycle: connect then shows it as starting, not reconnecting.
	coldStart atomic.Bool
	// downReason (run loop only) is why the last session ended, the
	// reason of the restart that follows.
	downReason RestartReason

	// subMu guards subs: resource URI → the generation whose session
	// holds the upstream subscription to it; at most maxHeldSubscriptions.
	subMu sync.Mutex
	subs  map[string]uint64
}

func newIdleState() *idleState {
	return &idleState{wake: make(chan struct{}, 1), drained: make(chan struct{}, 1), subs: map[string]uint64{}}
}

// sessionHold is a session's share of the bookkeeping: the operations
// running on it and whether it is being retired.
type sessionHold struct {
	n       atomic.Int64
	retired atomic.Bool
}

// recycled is the error serve returns for a session it ended for
// idle_timeout or max_lifetime: not a failure.
type recycled struct{ why RestartReason }

func (r *recycled) Error() string {
	if r.why == RestartIdle {
		return "stopped after idle_timeout without a call"
	}
	return "replaced after max_lifetime"
}

// recycles reports whether the server has idle_timeout or max_lifetime.
func (s *Supervisor) recycles() bool {
	return s.cfg.IdleTimeout > 0 || s.cfg.MaxLifetime > 0
}

// idleCallStarted is do()'s hook at the start of an operation: it is
// activity, and it starts an idle server.
func (s *Supervisor) idleCallStarted() {
	if !s.recycles() {
		return
	}
	s.idle.lastCall.Store(time.Now().UnixNano())
	if s.cur.Load() == nil {
		signal(s.idle.wake)
	}
}

// idleCallEnded is do()'s hook at the end of an operation: the idle time
// counts from here.
func (s *Supervisor) idleCallEnded() {
	if s.recycles() {
		s.idle.lastCall.Store(time.Now().UnixNano())
	}
}

// holdSession marks an operation running on sess, so retire waits for it.
// A session already being retired is not used: the operation waits for
// the next one within its deadline, and an idle server is started for it.
func (s *Supervisor) holdSession(ctx context.Context, op string, sess *session) (*session, error) {
	if !s.recycles() {
		return sess, nil
	}
	for {
		sess.hold.n.Add(1)
		if !sess.hold.retired.Load() {
			return sess, nil
		}
		s.releaseSession(sess)
		signal(s.idle.wake)
		var err error
		if sess, err = s.acquire(ctx, op, false); err != nil {
			return nil, err
		}
	}
}

// releaseSession ends an operation's hold on sess.
func (s *Supervisor) releaseSession(sess *session) {
	if !s.recycles() {
		return
	}
	if sess.hold.n.Add(-1) == 0 && sess.hold.retired.Load() {
		signal(s.idle.drained)
	}
}

// recycleTimer fires when idle_timeout or max_lifetime may be due for the
// session being served; C is nil when neither is set.
type recycleTimer struct {
	t    *time.Timer
	born time.Time
}

func (s *Supervisor) newRecycleTimer() *recycleTimer {
	rt := &recycleTimer{born: time.Now()}
	if s.recycles() {
		rt.t = time.NewTimer(s.nextRecycleCheck(rt, rt.born))
	}
	return rt
}

// C is the timer's channel (nil: never fires).
func (rt *recycleTimer) C() <-chan time.Time {
	if rt.t == nil {
		return nil
	}
	return rt.t.C
}

// Stop releases the timer.
func (rt *recycleTimer) Stop() {
	if rt.t != nil {
		rt.t.Stop()
	}
}

// nextRecycleCheck is how long until idle_timeout or max_lifetime may be
// due, seen at now.
func (s *Supervisor) nextRecycleCheck(rt *recycleTimer, now time.Time) time.Duration {
	var next time.Time
	if life := s.cfg.MaxLifetime; life > 0 {
		next = rt.born.Add(life)
	}
	if idle := s.cfg.IdleTimeout; idle > 0 {
		at := s.lastActivity(rt).Add(idle)
		if !at.After(now) {
			// Busy or subscribed: look again an idle_timeout from now.
			at = now.Add(idle)
		}
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return max(next.Sub(now), recheckFloor)
}

// lastActivity is when the served session last saw an operation start or
// end (its start if none did).
func (s *Supervisor) lastActivity(rt *recycleTimer) time.Time {
	last := time.Unix(0, s.idle.lastCall.Load())
	if last.Before(rt.born) {
		return rt.born
	}
	return last
}

// recycleDue is serve's case for the recycle timer. When idle_timeout or
// max_lifetime is due, it retires sess and reports end with the error
// serve returns: a *recycled, the session's death if it died while its
// operations drained, or nil on stop. Otherwise it re-arms the timer.
func (s *Supervisor) recycleDue(rt *recycleTimer, sess *session) (end bool, err error) {
	now := time.Now()
	var why RestartReason
	switch {
	case s.cfg.MaxLifetime > 0 && now.Sub(rt.born) >= s.cfg.MaxLifetime:
		why = RestartLifetime
	case s.cfg.IdleTimeout > 0 && s.calls.Load() == 0 && !s.holdsSubscription(sess.gen) &&
		now.Sub(s.lastActivity(rt)) >= s.cfg.IdleTimeout:
		why = RestartIdle
	default:
		rt.t.Reset(s.nextRecycleCheck(rt, now))
		return false, nil
	}
	if why == RestartLifetime {
		s.logger.Info("server reached max_lifetime; replacing it once its calls in flight have finished",
			"max_lifetime", s.cfg.MaxLifetime, "generation", sess.gen)
	}
	err = s.retire(sess, why)
	if why == RestartIdle && recycledOf(err) != "" && (s.calls.Load() > 0 || s.idle.lastCall.Load() > now.UnixNano()) {
		// An operation came while the session was being retired: it is
		// not idle after all. Put it back, and wake the operations that
		// wait for a session (setState closes the change channel).
		sess.hold.retired.Store(false)
		s.cur.Store(sess)
		s.setState(StateReady, time.Time{})
		rt.t.Reset(s.nextRecycleCheck(rt, time.Now()))
		return false, nil
	}
	return true, err
}

// retire takes sess out of use and waits until no operation runs on it.
// It returns a *recycled, the session's death error if it died meanwhile,
// or nil on stop.
func (s *Supervisor) retire(sess *session, why RestartReason) error {
	s.cur.Store(nil)
	select {
	case <-s.idle.drained:
	default:
	}
	sess.hold.retired.Store(true)
	for sess.hold.n.Load() > 0 {
		select {
		case <-s.idle.drained:
		case <-sess.dead:
			return sess.err
		case <-s.stopCh:
			return nil
		}
	}
	return &recycled{why: why}
}

// recycledOf reports the reason when a session ended for idle_timeout or
// max_lifetime ("" for anything else).
func recycledOf(err error) RestartReason {
	var r *recycled
	if errors.As(err, &r) {
		return r.why
	}
	return ""
}

// recycle is the run loop's path for a session retired by recycleDue:
// close it, and for an idle stop wait for a call. It returns false on
// stop.
func (s *Supervisor) recycle(sess *session, why RestartReason) bool {
	s.idle.downReason = why
	s.idle.coldStart.Store(true)
	if why == RestartLifetime {
		s.setState(StateStarting, time.Time{})
		s.closeSession(sess)
		return !s.isStopping()
	}
	// A wake signalled before now was for the session being closed: an
	// operation that needs a start is counted in s.calls (awaitCall).
	select {
	case <-s.idle.wake:
	default:
	}
	s.setState(StateIdle, time.Time{})
	s.logger.Info("server idle; stopped until the next call", "idle_timeout", s.cfg.IdleTimeout, "generation", sess.gen)
	s.closeSession(sess)
	if s.isStopping() {
		return false
	}
	return s.awaitCall()
}

// awaitCall waits in StateIdle for an operation, a Revive, or stop. It
// returns false on stop.
func (s *Supervisor) awaitCall() bool {
	if s.calls.Load() > 0 || s.waitersPending() {
		s.logger.Debug("call to an idle server; starting it")
		return true
	}
	select {
	case <-s.idle.wake:
		s.logger.Debug("call to an idle server; starting it")
	case <-s.revive:
		s.logger.Info("revived while idle; starting it")
	case <-s.stopCh:
		return false
	}
	return true
}

// noteDown records why sess ended (it failed; it is not closed yet), for
// the reason of the restart that follows.
func (s *Supervisor) noteDown(sess *session, err error) {
	linkDone := false
	select {
	case <-sess.link.Done():
		linkDone = true
	default:
	}
	switch {
	case errors.Is(err, transport.ErrMemoryLimit) || (linkDone && errors.Is(sess.link.Err(), transport.ErrMemoryLimit)):
		s.idle.downReason = RestartMemoryLimit
	case linkDone && sess.processBacked():
		s.idle.downReason = RestartExit
	default:
		s.idle.downReason = RestartTransport
	}
}

// connected is the run loop's hook after each connect attempt: the end of
// a cold start, and the restart report of a new session after the first.
func (s *Supervisor) connected(sess *session, err error) {
	s.idle.coldStart.Store(false)
	if err != nil || sess == nil || sess.gen <= 1 {
		return
	}
	why := s.idle.downReason
	if why == "" {
		why = RestartTransport
	}
	s.idle.downReason = ""
	if why == RestartIdle {
		s.logger.Info("started after an idle stop", "generation", sess.gen)
	}
	if s.opts.Observer != nil {
		s.opts.Observer.Restarted(s.name, sess.gen, why)
	}
}

// subscribed records that sess holds the upstream subscription to uri: the
// server is not idle-stopped while it does.
func (s *Supervisor) subscribed(sess *session, uri string) {
	if s.cfg.IdleTimeout <= 0 {
		return
	}
	s.idle.subMu.Lock()
	defer s.idle.subMu.Unlock()
	if len(s.idle.subs) >= maxHeldSubscriptions {
		for u, g := range s.idle.subs {
			if g < sess.gen {
				delete(s.idle.subs, u)
			}
		}
		if len(s.idle.subs) >= maxHeldSubscriptions {
			return
		}
	}
	s.idle.subs[uri] = sess.gen
}

// unsubscribed forgets the subscription to uri.
func (s *Supervisor) unsubscribed(uri string) {
	if s.cfg.IdleTimeout <= 0 {
		return
	}
	s.idle.subMu.Lock()
	delete(s.idle.subs, uri)
	s.idle.subMu.Unlock()
}

// holdsSubscription reports whether generation gen holds a subscription;
// those of sessions gone (their process took them along) are dropped.
func (s *Supervisor) holdsSubscription(gen uint64) bool {
	s.idle.subMu.Lock()
	defer s.idle.subMu.Unlock()
	held := false
	for uri, g := range s.idle.subs {
		switch {
		case g == gen:
			held = true
		case g < gen:
			delete(s.idle.subs, uri)
		}
	}
	return held
}
