package upstream

/*
Design note: idle stop and recycling (docs/design.md §4, §18.3).

idle_timeout stops a stdio server's process after that long without an
operation; max_lifetime replaces it once its session is that old. Neither
is a failure: no retry budget is spent, the breaker is not struck, and the
catalog stays published (the registry keeps the tools listed and clients
get no list_changed), so a client cannot tell an idle server from a
running one except by the time its next call takes.

idler holds the bookkeeping; the decision is the run loop's, in this file;
the hooks elsewhere are small:

  - the executor's do (exec.go) counts every operation as activity
    (idler.activity) and holds the session around each attempt on it
    (executor.hold, idler.release), so a retire waits for the attempt.
  - the executor's acquire (exec.go) has a case for StateIdle: an
    operation that finds the server idle signals inbox.start and waits for
    the new session within its deadline. Operations that arrive together
    send one signal (a channel of one), so there is one start.
  - serve (session.go) selects on a recycleTimer; recycleDue decides, and
    retire takes the session out of use and drains it; serve then returns
    a *recycled error.
  - run (lifecycle.go) hands that error to recycle instead of the failure
    path: the session is closed, and an idle server waits in StateIdle
    (through setState, so lifecycle.transition) for a call or a Revive
    (awaitCall) before the loop connects again. The run loop keeps why the
    last session ended (a *recycled's reason, or restartReason of its
    death, made certain for a memory-limit stop by closedReason) and
    reports each session after the first to the Observer as a restart
    with that reason (restarted).

Retiring a session: sessions.cur is set to nil first, so no new operation
picks the session up; then the session is marked retired and its holds are
counted. An operation marks its hold before it looks at retired (hold),
and retire marks retired before it looks at the holds: with sequentially
consistent atomics one of the two sees the other, so either the operation
backs off to wait for the next session (acquire) or retire waits for it to
finish. Operations in flight therefore complete on the old process, and
new ones wait for the new session rather than fail. An operation that
arrives while an idle retire drains puts the session back (recycleDue): it
was not idle after all.

A resource subscription lives in the upstream process: stopping it would
silently end the updates a client asked for. So a server is not
idle-stopped while its current session holds a subscription made through
resources/subscribe and not yet undone (at most maxHeldSubscriptions are
recorded). max_lifetime replaces the process anyway (its purpose is to
bound the process's age); the subscription ends with it, as with any
restart.

Lock story: subMu guards subs, a leaf lock held only to add, remove or
scan an entry. lastCall and each session's hold are atomics; drained is a
channel made in newIdler and never replaced; the durations never change.
The recycle timer, the restart reason and the cold-start flag belong to
the run loop (locals of run and serve).
*/

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpvisor/mcpvisor/host/config"
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
	// RestartUnresponsive: replaced because it stopped answering
	// (reconnect.unresponsive_after call timeouts in a row with no answer,
	// or a half-open probe that timed out): a deadlocked or stopped
	// process, a hung remote server.
	RestartUnresponsive RestartReason = "unresponsive"
)

// RestartReasons lists every RestartReason, for exporters that pre-declare
// series.
func RestartReasons() []RestartReason {
	return []RestartReason{RestartExit, RestartTransport, RestartMemoryLimit, RestartIdle, RestartLifetime, RestartUnresponsive}
}

// maxHeldSubscriptions bounds the subscriptions the supervisor records
// for idle stop. Clients choose the URIs (a resource template matches
// without end); past the bound, later ones are not recorded: the server
// is held awake by those that are, until they are undone.
const maxHeldSubscriptions = 1024

// recheckFloor bounds how often a recycle timer may fire while it waits
// for operations in flight to end: a timer never spins.
const recheckFloor = 10 * time.Millisecond

// idler is a server's idle and lifetime bookkeeping; see the design note
// above for its lock story.
type idler struct {
	// idleTimeout and maxLifetime are the server block's settings (zero:
	// off).
	idleTimeout, maxLifetime time.Duration
	// lastCall is when an operation last started or ended (UnixNano).
	lastCall atomic.Int64
	// drained is signalled when the last hold of a retired session ends.
	drained chan struct{}

	subMu sync.Mutex
	// subs (guarded by subMu): resource URI → the generation whose session
	// holds the upstream subscription to it; at most maxHeldSubscriptions.
	subs map[string]uint64
}

func newIdler(srv *config.Server) *idler {
	return &idler{idleTimeout: srv.IdleTimeout, maxLifetime: srv.MaxLifetime,
		drained: make(chan struct{}, 1), subs: map[string]uint64{}}
}

// on reports whether the server has idle_timeout or max_lifetime.
func (i *idler) on() bool { return i.idleTimeout > 0 || i.maxLifetime > 0 }

// sessionHold is a session's share of the bookkeeping: the operations
// running on it and whether it is being retired.
type sessionHold struct {
	n       atomic.Int64
	retired atomic.Bool
}

// activity is do()'s hook: an operation is activity when it starts and
// when it ends (the idle time counts from then). Call the result at its
// end.
func (i *idler) activity() (end func()) {
	if !i.on() {
		return func() {}
	}
	i.lastCall.Store(time.Now().UnixNano())
	return func() { i.lastCall.Store(time.Now().UnixNano()) }
}

// hold marks an operation running on sess, so retire waits for it. It
// reports false, holding nothing, when sess is being retired: the
// operation must wait for the next session (executor.hold).
func (i *idler) hold(sess *session) bool {
	if !i.on() {
		return true
	}
	sess.hold.n.Add(1)
	if !sess.hold.retired.Load() {
		return true
	}
	i.release(sess)
	return false
}

// release ends an operation's hold on sess.
func (i *idler) release(sess *session) {
	if !i.on() {
		return
	}
	if sess.hold.n.Add(-1) == 0 && sess.hold.retired.Load() {
		signal(i.drained)
	}
}

// subscribed records that sess holds the upstream subscription to uri: the
// server is not idle-stopped while it does.
func (i *idler) subscribed(sess *session, uri string) {
	if i.idleTimeout <= 0 {
		return
	}
	i.subMu.Lock()
	defer i.subMu.Unlock()
	if len(i.subs) >= maxHeldSubscriptions {
		for u, g := range i.subs {
			if g < sess.gen {
				delete(i.subs, u)
			}
		}
		if len(i.subs) >= maxHeldSubscriptions {
			return
		}
	}
	i.subs[uri] = sess.gen
}

// unsubscribed forgets the subscription to uri.
func (i *idler) unsubscribed(uri string) {
	if i.idleTimeout <= 0 {
		return
	}
	i.subMu.Lock()
	delete(i.subs, uri)
	i.subMu.Unlock()
}

// holdsSubscription reports whether generation gen holds a subscription;
// those of sessions gone (their process took them along) are dropped.
func (i *idler) holdsSubscription(gen uint64) bool {
	i.subMu.Lock()
	defer i.subMu.Unlock()
	held := false
	for uri, g := range i.subs {
		switch {
		case g == gen:
			held = true
		case g < gen:
			delete(i.subs, uri)
		}
	}
	return held
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

// recycledOf reports the reason when a session ended for idle_timeout or
// max_lifetime ("" for anything else).
func recycledOf(err error) RestartReason {
	var r *recycled
	if errors.As(err, &r) {
		return r.why
	}
	return ""
}

// recycleTimer fires when idle_timeout or max_lifetime may be due for the
// session being served (serve's); C is nil when neither is set.
type recycleTimer struct {
	t    *time.Timer
	born time.Time
}

func (s *Supervisor) newRecycleTimer() *recycleTimer {
	rt := &recycleTimer{born: time.Now()}
	if s.idle.on() {
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
	if life := s.idle.maxLifetime; life > 0 {
		next = rt.born.Add(life)
	}
	if idle := s.idle.idleTimeout; idle > 0 {
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
	case s.idle.maxLifetime > 0 && now.Sub(rt.born) >= s.idle.maxLifetime:
		why = RestartLifetime
	case s.idle.idleTimeout > 0 && s.calls.n.Load() == 0 && !s.idle.holdsSubscription(sess.gen) &&
		now.Sub(s.lastActivity(rt)) >= s.idle.idleTimeout:
		why = RestartIdle
	default:
		rt.t.Reset(s.nextRecycleCheck(rt, now))
		return false, nil
	}
	if why == RestartLifetime {
		s.logger.Info("server reached max_lifetime; replacing it once its calls in flight have finished",
			"max_lifetime", s.idle.maxLifetime, "generation", sess.gen)
	}
	err = s.retire(sess, why)
	if why == RestartIdle && recycledOf(err) != "" && (s.calls.n.Load() > 0 || s.idle.lastCall.Load() > now.UnixNano()) {
		// An operation came while the session was being retired: it is
		// not idle after all. Put it back, and wake the operations that
		// wait for a session (a transition wakes every waiter).
		sess.hold.retired.Store(false)
		s.sessions.publish(sess)
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
	s.sessions.publish(nil)
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

// recycle is the run loop's path for a session retired by recycleDue:
// close it, and for an idle stop wait for a call. It returns false on
// stop.
func (s *Supervisor) recycle(sess *session, why RestartReason) bool {
	if why == RestartLifetime {
		s.setState(StateStarting, time.Time{})
		s.closeSession(sess)
		return !s.isStopping()
	}
	// A start signalled before now was for an earlier idle period: an
	// operation that needs this one started sees StateIdle (acquire).
	select {
	case <-s.start:
	default:
	}
	s.setState(StateIdle, time.Time{})
	s.logger.Info("server idle; stopped until the next call", "idle_timeout", s.idle.idleTimeout, "generation", sess.gen)
	s.closeSession(sess)
	if s.isStopping() {
		return false
	}
	return s.awaitCall()
}

// awaitCall waits in StateIdle for an operation (inbox.start), a Revive,
// or stop. It returns false on stop.
func (s *Supervisor) awaitCall() bool {
	if s.life.waitersPending() {
		s.logger.Info("revived while idle; starting it")
		return true
	}
	select {
	case <-s.start:
		s.logger.Debug("call to an idle server; starting it")
	case <-s.revive:
		s.logger.Info("revived while idle; starting it")
	case <-s.stopCh:
		return false
	}
	return true
}

// restartReason is why sess ended with err (it failed; it is not closed
// yet): the reason of the restart that follows.
func restartReason(sess *session, err error) RestartReason {
	linkDone := false
	select {
	case <-sess.link.Done():
		linkDone = true
	default:
	}
	switch {
	case errors.Is(err, transport.ErrMemoryLimit) || (linkDone && errors.Is(sess.link.Err(), transport.ErrMemoryLimit)):
		return RestartMemoryLimit
	case errors.Is(err, errUnresponsive):
		// Replaced for not answering, even if the process went down
		// (a SIGKILL from outside) in the grace before it was stopped.
		return RestartUnresponsive
	case linkDone && sess.processBacked():
		return RestartExit
	default:
		return RestartTransport
	}
}

// closedReason is why, once sess is closed: a stop over limits.memory is
// certain then (the link's error wraps transport.ErrMemoryLimit from
// before that stop began), even when the session's end was seen before
// the process's exit was.
func closedReason(sess *session, why RestartReason) RestartReason {
	if errors.Is(sess.link.Err(), transport.ErrMemoryLimit) {
		return RestartMemoryLimit
	}
	return why
}

// restarted is the run loop's report of a session after the first (sess
// of generation > 1, just connected), started again for why ("" when not
// known: transport).
func (s *Supervisor) restarted(sess *session, why RestartReason) {
	if sess.gen <= 1 {
		return
	}
	if why == "" {
		why = RestartTransport
	}
	switch why {
	case RestartIdle:
		s.logger.Info("started after an idle stop", "generation", sess.gen)
	case RestartUnresponsive:
		s.logger.Warn("replaced a server that had stopped answering", "reason", why, "generation", sess.gen)
	}
	if s.opts.Observer != nil {
		s.opts.Observer.Restarted(s.name, sess.gen, why)
	}
}
