package upstream

/*
Design note: the lifecycle loop (docs/design.md §4).

This file is the supervisor's state machine: the run loop, which alone
changes State (setState), its backoff and parking, needs_login and
needs_config, the outcome waiters of Start and Revive, and the early
probes of a down remote server. The state diagram and the rules it keeps
are in the design note of supervisor.go.

Locks: the fields it changes (state, since, failures, nextAttempt,
outcomeWaiters, ...) are guarded by Supervisor.mu; the early-probe flags
are atomics. run never holds mu across I/O.
*/

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/mcpvisor/mcpvisor/host/internal/transport"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

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
		s.connected(sess, err) // restarts by reason (idle.go)
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
			// Idle stop and max_lifetime (idle.go): not a failure, no
			// budget spent, the catalog stays listed.
			if why := recycledOf(deathErr); why != "" && !s.isStopping() {
				s.cur.Store(nil)
				if healthy {
					failures, parks = 0, 0
					s.setFailures(0)
				}
				if !s.recycle(sess, why) {
					return
				}
				continue
			}
			s.noteDown(sess, deathErr)
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
			s.logger.Error("server cannot start as configured (its command is missing or not executable); parking it now rather than spending its max_retries", "error", recovery.Redact(err.Error()))
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
