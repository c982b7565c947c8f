package upstream

/*
Design note: liveness of a ready session (docs/design.md §4, "Liveness is
an answer, not a pid").

A process that is alive but answers nothing (a deadlock, SIGSTOP, a full
pipe) or a remote server that accepts requests and never answers them is
as lost as a dead one. Three things find it; this file holds the two that
run in serve, the run loop's step for a ready session:

  - calls (exec.go: executor.unanswered): consecutive call timeouts with
    no answer in between, confirmed by a ping, replace the session;
  - the health block: a ping is due every health.interval while the
    server has answered nothing for that long; one that gets no answer
    within health.timeout (nor anything else from the server meanwhile)
    replaces the session at once;
  - suspicion: from the first call that times out unanswered the server
    shows as suspect, never ready, until it answers again (a call, a
    ping: a confirming ping is sent at once, a health ping when the
    block is set) or is replaced.

Whatever finds it, the session ends with an error wrapping errUnresponsive:
the run loop reports it (OnUnresponsive: the audit log) and kills the
process group (closeSession; SIGKILL reaches a stopped process too), and
the restart that follows has the reason unresponsive, under the usual
backoff and retry budget.

Lock story: liveness is serve's own, used from the run loop's goroutine
only. A ping runs in a goroutine of its own, bounded by its timeout and
cut short when serve returns (cancel); its result comes back on a channel
with room for it, so the goroutine never blocks. The session's answer
times are atomics (session.go).
*/

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// suspectRecheck is how often serve looks again whether a suspect server
// has answered: an answer read by a stdio link (any message) wakes no one.
const suspectRecheck = time.Second

// pingResult is the outcome of one ping serve sent.
type pingResult struct {
	sent     time.Time
	err      error
	timedOut bool // the ping's own timeout passed
	health   bool // a health ping: unanswered, it replaces the session
	timeout  time.Duration
}

// liveness is serve's record of the pings and the suspicion of the
// session it serves; see the design note above.
type liveness struct {
	s    *Supervisor
	sess *session
	// health fires every health.interval (nil channel without a health
	// block); recheck fires while the server shows as suspect.
	health  *time.Ticker
	recheck *time.Ticker
	// pinging is set while a ping is in flight; results receives it.
	pinging bool
	results chan pingResult
	ctx     context.Context
	cancel  context.CancelFunc
}

func (s *Supervisor) newLiveness(sess *session) *liveness {
	lv := &liveness{s: s, sess: sess, results: make(chan pingResult, 1)}
	lv.ctx, lv.cancel = context.WithCancel(context.Background())
	if iv := s.cfg.Health.Interval; iv > 0 {
		lv.health = time.NewTicker(iv)
	}
	return lv
}

// stop ends the tickers and a ping in flight.
func (lv *liveness) stop() {
	lv.cancel()
	if lv.health != nil {
		lv.health.Stop()
	}
	if lv.recheck != nil {
		lv.recheck.Stop()
	}
}

// healthC and recheckC are the tickers' channels (nil when off: a select
// never takes them).
func (lv *liveness) healthC() <-chan time.Time {
	if lv.health == nil {
		return nil
	}
	return lv.health.C
}

func (lv *liveness) recheckC() <-chan time.Time {
	if lv.recheck == nil {
		return nil
	}
	return lv.recheck.C
}

// healthDue is serve's case for the health ticker: a ping, unless one is
// in flight or the server answered within the interval (traffic proves
// it answers; a ping would say nothing more).
func (lv *liveness) healthDue() {
	iv := lv.s.cfg.Health.Interval
	if lv.pinging || time.Since(time.Unix(0, lv.sess.answeredAt())) < iv {
		return
	}
	lv.ping(true)
}

// ping sends one ping in the background: a health ping (bounded by
// health.timeout) or, without a health block, one that can only clear a
// suspicion (bounded like executor.unanswered's).
func (lv *liveness) ping(health bool) {
	timeout := min(max(lv.s.cfg.Timeout, livenessPingFloor), livenessPingCap)
	if health {
		timeout = lv.s.cfg.Health.Timeout
	}
	lv.pinging = true
	cs, out := lv.sess.cs, lv.results
	ctx, cancel := context.WithTimeout(lv.ctx, timeout)
	sent := time.Now()
	go func() {
		defer cancel()
		err := cs.Ping(ctx, nil)
		out <- pingResult{sent: sent, err: err, timedOut: errors.Is(ctx.Err(), context.DeadlineExceeded), health: health, timeout: timeout}
	}()
}

// pinged is serve's case for a ping's result. It reports whether the
// session ends, with the error serve returns: errUnresponsive for a
// health ping with no answer, a remote session's failure for one the
// connection or the server's expiry of the session failed.
func (lv *liveness) pinged(r pingResult) (end bool, err error) {
	lv.pinging = false
	sess := lv.sess
	var rpcErr *jsonrpc.Error
	switch {
	case r.err == nil || errors.As(r.err, &rpcErr):
		// An answer, even an error (a server without ping): it is alive.
		sess.lastAnswer.Store(time.Now().UnixNano())
		lv.suspicion()
		return false, nil
	case r.timedOut && sess.answeredAt() < r.sent.UnixNano():
		if !r.health {
			return false, nil // a confirming ping: only calls replace it
		}
		lv.s.logger.Warn("server not answering a health ping; replacing it", "reason", RestartUnresponsive,
			"health_timeout", r.timeout, "generation", sess.gen)
		return true, fmt.Errorf("%w: no answer to a health ping within %s", errUnresponsive, r.timeout)
	case r.timedOut, lv.ctx.Err() != nil, !r.health, sess.processBacked():
		// Answered meanwhile; serve is ending; or the process's own
		// death, which monitor reports, failed it.
		return false, nil
	}
	// A remote server's health ping failed: the same failure as a call's,
	// found before a call pays for it (docs/design.md §4, idle liveness).
	switch recovery.Classify(context.Background(), r.err) {
	case recovery.SessionGone:
		sess.expired.Store(true)
		return true, fmt.Errorf("health ping: %w", r.err)
	case recovery.Transport:
		return true, fmt.Errorf("health ping: %w", r.err)
	}
	return false, nil
}

// suspicion is serve's case for a signal or a recheck: it shows the
// server as suspect while its calls time out unanswered, and as ready
// again once it answers. Entering suspect sends a ping at once: a health
// ping with a health block (unanswered, it replaces the session), else
// one whose answer clears the suspicion of a tool that was only slow.
func (lv *liveness) suspicion() {
	s, sess := lv.s, lv.sess
	state := s.life.view().state
	switch sus := sess.suspected(); {
	case sus && state == StateReady:
		s.setState(StateSuspect, time.Time{})
		if lv.recheck == nil {
			lv.recheck = time.NewTicker(suspectRecheck)
		}
		if !lv.pinging {
			lv.ping(s.cfg.Health.Interval > 0)
		}
	case !sus && state == StateSuspect:
		// Answered again: what timed out is past (status shows no last
		// error for a ready server).
		s.life.clearError()
		s.setState(StateReady, time.Time{})
		if lv.recheck != nil {
			lv.recheck.Stop()
			lv.recheck = nil
		}
	}
}
