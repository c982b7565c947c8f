package upstream

/*
Design note: the lifecycle loop (docs/design.md §4).

This file is the supervisor's state machine: the run loop, which alone
changes State (setState, through lifecycle.transition), its parking,
needs_login and needs_config, the outcome waiters of Start and Revive, and
Nudge. A session retired for idle_timeout or max_lifetime takes the run
loop's recycle path (idle.go), not the failure path. What a failed connect attempt means is recovery.Decide's; how long
to wait is the budget's (budget.go). The state diagram and the rules it
keeps are in the design note of supervisor.go.

Locks: what it records is the lifecycle's (state.go: lifecycle.mu, a leaf
lock, never held across I/O); what it publishes is the sessions' (atomic
pointers); the early-probe flags are the budget's atomics. Callers reach
it only through the inbox (inbox.go).
*/

import (
	"context"
	"fmt"
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
	return s.life.awaitOutcome(s.stoppedError)
}

// stoppedError is what a waiter that meets the supervisor stopped is told.
func (s *Supervisor) stoppedError() error { return s.exec.stoppedOp("") }

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

// setState records a transition (lifecycle.transition, the one place a
// state changes) and tells the observer and OnStatus.
func (s *Supervisor) setState(st State, next time.Time) {
	from := s.life.transition(st, next)
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
		s.life.exit()
		stopped := s.stoppedError()
		answer(waiters, stopped)
		answer(s.life.takeWaiters(), stopped)
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
	// why is why the last session ended, the reason of the restart that
	// follows; cold is set for the start after an idle stop or at
	// max_lifetime (idle.go), which shows as starting.
	var why RestartReason
	cold := false
	for attempt := 0; ; attempt++ {
		waiters = append(waiters, s.life.takeWaiters()...)
		sess, err := s.connect(cold)
		cold = false
		if s.opts.Observer != nil && !(err != nil && s.isStopping()) {
			var gen uint64
			if sess != nil {
				gen = sess.gen
			}
			s.opts.Observer.ConnectFinished(s.name, gen, attempt == 0, err)
		}
		if err == nil {
			s.restarted(sess, why) // restarts by reason (idle.go)
			why = ""
		}
		permanent := false
		if err != nil {
			if s.isStopping() {
				return
			}
			dec := recovery.Decide(recovery.Failure{Stage: recovery.Connect, Err: err})
			if dec.Next == recovery.AwaitLogin {
				s.life.recordError(err)
				if !s.awaitLogin(func() {
					answer(waiters, s.attemptFailed(err, StateNeedsLogin, time.Time{}))
					waiters = nil
				}) {
					return
				}
				failures = 0
				s.life.setFailures(0)
				continue
			}
			s.life.recordError(err)
			if retriedEarly {
				s.logger.Debug("connect made by a call during the backoff failed", "error", recovery.Redact(err.Error()))
			} else {
				failures++
				s.logger.Warn("connect failed", "attempt", failures, "error", recovery.Redact(err.Error()))
			}
			// Only what no retry can change (a missing or non-executable
			// command) parks at once; anything else follows the backoff
			// and the budget (recovery.Decide).
			permanent = dec.Next == recovery.Park
		} else {
			probing = false
			answer(waiters, nil)
			waiters = nil
			healthy, deathErr := s.serve(sess, &failures)
			s.sessions.publish(nil)
			if r := recycledOf(deathErr); r != "" && !s.isStopping() {
				// Idle stop or max_lifetime (idle.go): not a failure, no
				// budget spent, the catalog stays listed, no backoff.
				if healthy {
					failures, parks = 0, 0
					s.life.setFailures(0)
				}
				why, cold = r, true
				if !s.recycle(sess, r) {
					return
				}
				continue
			}
			why = restartReason(sess, deathErr)
			if why == RestartUnresponsive && s.opts.OnUnresponsive != nil {
				pid := 0
				if p, ok := sess.link.(transport.ProcessLink); ok {
					pid = p.Pid()
				}
				s.opts.OnUnresponsive(s.name, pid, sess.gen, deathErr)
			}
			if !s.isStopping() {
				// Visible at once, even while a stubborn process is still
				// being stopped.
				s.setState(StateReconnecting, time.Time{})
			}
			s.closeSession(sess)
			why = closedReason(sess, why)
			if s.isStopping() {
				return
			}
			// A session the server expired (a 404 for it, or an
			// allow-listed message) ended while the server kept
			// answering: not a failure of the server, so it spends no
			// retry budget and the next session follows at once.
			expired := sess.expired.Load() || recovery.IsSessionGone(deathErr)
			if healthy || expired {
				failures, parks = 0, 0
			}
			if !sess.diedInCall.Load() && !expired {
				failures++
			}
			if deathErr != nil {
				s.life.recordError(deathErr)
				s.logger.Warn("server connection lost", "generation", sess.gen, "error", recovery.Redact(deathErr.Error()))
			}
		}
		s.life.setFailures(failures)

		if permanent && !probing {
			s.logger.Error("server cannot start as configured (its command is missing or not executable); parking it now rather than spending its max_retries", "error", recovery.Redact(err.Error()))
		}
		if s.budget.spent(failures) || (probing && err != nil) || permanent {
			if !(probing && early) {
				parks++
			}
			if !s.park(s.budget.parkedDelay(parks), func(next time.Time) {
				if err != nil {
					answer(waiters, s.attemptFailed(err, StateParked, next))
					waiters = nil
				}
			}) {
				return
			}
			early = s.budget.earlyRevive.Swap(false)
			failures, probing = 0, true
			s.life.setFailures(0)
			continue
		}
		delay := s.budget.backoff(failures)
		next := time.Now().Add(delay)
		if retriedEarly && err != nil && time.Now().Before(scheduled) {
			// The server's own attempt is still due when it was.
			delay, next = time.Until(scheduled), scheduled
		}
		scheduled = next
		s.budget.earlyRetry.Store(false)
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
			retriedEarly = s.budget.earlyRetry.Swap(false) && time.Now().Before(scheduled)
		}
	}
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
	s.budget.earlyRevive.Store(false)
	s.publishCatalog(nil)
	s.budget.breaker.Trip()
	next := time.Now().Add(delay)
	s.setState(StateParked, next)
	lastErr := s.life.lastError()
	s.logger.Error("server parked", "max_retries", s.cfg.Reconnect.MaxRetries,
		"next_attempt_in", delay, "last_error", errString(lastErr))
	parked(next)
	if s.life.waitersPending() {
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
	lastErr := s.life.lastError()
	s.logger.Error("server needs a login; its tools are withdrawn until then", "action", s.loginAction(), "error", errString(lastErr))
	waiter, _ := s.opts.Dialer.(transport.LoginWaiter)
	select {
	case <-s.revive:
	default:
	}
	if s.life.waitersPending() {
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
	s.life.recordError(err)
	s.setState(StateNeedsConfig, time.Time{})
	s.logger.Error("server not started: its block reads environment variables that are not set", "action", s.configAction(), "missing", strings.Join(s.cfg.MissingEnv, ","))
	held := &recovery.Error{Server: s.name, Class: recovery.Unavailable, Reason: "not started: " + s.configAction(), Err: err}
	for {
		answer(s.life.takeWaiters(), held)
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
func (s *Supervisor) configAction() string { return configActionFor(s.cfg.MissingEnv) }

// loginAction is what a person must run for the server to come back.
func (s *Supervisor) loginAction() string { return loginActionFor(s.name) }

// configActionFor is what a person must do for a server whose block reads
// the unset environment variables missing to run.
func configActionFor(missing []string) string {
	sets := make([]string, len(missing))
	for i, m := range missing {
		sets[i] = "`mcpvisor secret set " + m + "`"
	}
	return fmt.Sprintf("run %s (a running host starts the server at once), or set %s in mcpvisor's environment and restart mcpvisor", strings.Join(sets, " and "), strings.Join(missing, ", "))
}

// loginActionFor is what a person must run for server to come back.
func loginActionFor(server string) string {
	return fmt.Sprintf("run `mcpvisor login %s`", server)
}

// WaitSettled waits until the supervisor has left the starting state (it is
// ready, reconnecting, parked or stopped) or ctx ends.
func (s *Supervisor) WaitSettled(ctx context.Context) error {
	return s.life.waitSettled(ctx)
}

// Nudge asks a parked server whose breaker cooldown has passed to try
// again now, without waiting for the outcome (a downstream tools/list: an
// agent starting up). The cooldown rate-limits it: a failed attempt parks
// the server again with a fresh cooldown. A remote server is nudged as a
// call probes it (probeRemote): parked or waiting out a backoff, at most
// once per remoteProbeEvery, so a new client sees its tools about as soon
// as it is back.
func (s *Supervisor) Nudge() {
	v := s.life.view()
	state, next := v.state, v.next
	if s.budget.probeRemote(state, next, s.revive, s.sessions.neverListed()) {
		return
	}
	if state == StateParked && s.budget.breaker.CooldownPassed() {
		signal(s.revive)
	}
}
