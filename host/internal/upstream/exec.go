package upstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/wire"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

/*
Design note: call execution (docs/design.md §3, §6).

executor runs every operation a supervisor makes for a caller (call.go,
forward.go) through one path, do: the breaker gate, a usable session
(waiting for one, or reviving a parked server as the half-open probe),
the operation, and, when it fails, what recovery.Decide says that failure
means, carried out (carryOut) and turned into the caller's error
(callError, the one place an operation's failure becomes a Go error).

Lock story: executor has no lock and no state of its own. It reads the
parts it shares with the supervisor: the published session (sessions,
lock-free), the lifecycle's snapshots (lifecycle.mu, a leaf), the breaker
(Breaker.mu, a leaf), the calls in flight (calls.mu, a leaf) and the idle
bookkeeping (idler: atomics; idle.go); it never holds one lock while
taking another. It changes no state: it reports a failed generation and
signals the run loop (inbox), which decides; an idle server it finds is
started by the run loop, on its signal.
*/

// ErrStopped is wrapped by errors for operations on a stopped supervisor.
var ErrStopped = errors.New("server is stopped")

// errUnresponsive is wrapped by the report of a session that stopped
// answering (executor.unanswered): it is replaced with the restart
// reason unresponsive.
var errUnresponsive = errors.New("the server stopped answering")

// executor runs a supervisor's operations through the recovery path; see
// the design note above.
type executor struct {
	name     string
	cfg      *config.Server
	logger   hclog.Logger
	budget   *budget
	sessions *sessions
	life     *lifecycle
	calls    *calls
	idle     *idler
	in       *inbox
}

// stoppedOp is what an operation op that meets the supervisor stopped is
// told ("" for no operation: an outcome waiter).
func (e *executor) stoppedOp(op string) error {
	return &recovery.Error{Server: e.name, Op: op, Class: recovery.Unavailable, Reason: e.in.stopped(), Err: ErrStopped}
}

// do runs one upstream operation through the recovery path (docs/design.md §6):
// breaker gate, a ready session, the operation, then what its outcome
// means (recovery.Decide: answered, canceled, strike, reconnect, retry
// once on a new session), carried out, and the caller's error. The call is
// tracked for its downstream client d (nil: none, or tracked by the
// caller) before anything is sent: the upstream may ask that client
// something (roots) the moment the request arrives.
func (e *executor) do(ctx context.Context, d Downstream, op string, replayable bool, fn func(context.Context, *session) error) error {
	defer e.calls.begin()()
	defer e.idle.activity()() // idle stop (idle.go): every operation is activity
	_, _, release := e.calls.track(ctx, d, nil, e.cfg.Timeout, e.name)
	defer release()
	if d != nil {
		ctx = withCaller(ctx, d)
	}
	// own: the server's timeout bounds the operation, not a caller's
	// shorter deadline. Only its own timeout passing with no answer says
	// the server stopped answering (unanswered).
	own := e.cfg.Timeout > 0
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < e.cfg.Timeout {
		own = false
	}
	if e.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.cfg.Timeout)
		defer cancel()
	}

	ok, probe, retryAt := e.budget.breaker.Allow()
	revive := probe
	sess := e.sessions.ready()
	if !ok {
		// An open breaker fails calls fast while the server keeps failing
		// them. While the supervisor is already getting a new session,
		// though, the call waits for it (the new session closes the
		// breaker) instead of failing (docs/design.md §5). A parked remote
		// server may be probed early, rate-limited (remoteProbeEvery).
		// So may a server that never got ready: its tools were never
		// listed, so calls are what bring it up (acquire waits for the
		// rate limit's next slot, within the call's deadline).
		state := e.life.view().state
		live := sess != nil && !sess.isDead()
		neverUp := e.sessions.neverListed()
		revive = !live && state == StateParked && e.budget.remoteProbeDue(neverUp)
		if revive {
			e.budget.earlyRevive.Store(true)
		}
		waitProbe := !live && state == StateParked && neverUp && e.budget.probeEvery(true) > 0
		if !revive && !waitProbe && (live || (state != StateStarting && state != StateReconnecting)) {
			return &recovery.Error{Server: e.name, Op: op, Class: recovery.Unavailable,
				Reason: e.openReason(), RetryAt: retryAt}
		}
	}
	var err error
	if sess == nil || sess.isDead() {
		if sess, err = e.acquire(ctx, op, revive); err != nil {
			e.budget.breaker.Release(probe)
			return err
		}
	}

	// idle_timeout and max_lifetime (idle.go): a session being retired
	// is not used, and one in use is not retired under the operation.
	if sess, err = e.hold(ctx, op, sess); err != nil {
		e.budget.breaker.Release(probe)
		return err
	}
	sent := time.Now()
	err = fn(ctx, sess)
	e.idle.release(sess)
	f := recovery.Failure{Stage: recovery.FirstTry, Class: classify(ctx, sess, err), Replayable: replayable, Stalled: sess.stalled(), NotSent: recovery.NotSent(err)}
	f.Unanswered = f.Class == recovery.Timeout && e.unanswered(op, sess, sent, own, probe)
	if f.Class == recovery.Canceled || (f.Class == recovery.Timeout && !own) {
		e.abandoned(op, sess, sent)
	}
	dec := recovery.Decide(f)
	if dec.SessionFailed && e.in.isStopping() {
		return e.stoppedOp(op)
	}
	if dec.ReleaseProbe {
		e.budget.breaker.Release(probe)
	}
	e.carryOut(op, sess, dec, err)
	if dec.Next != recovery.RetryOnce {
		return e.callError(op, f, sess, err)
	}

	// One retry; after a session the server expired, again on the newest
	// session as long as each new one was expired too (by another
	// caller's expiry, under load): the server rejected each request
	// before running it. Bounded by the deadline and maxExpiryRetries.
	for retries := 1; ; retries++ {
		next, werr := e.awaitNewer(ctx, sess.gen)
		if werr == nil {
			next, werr = e.hold(ctx, op, next)
		}
		if werr != nil {
			return e.recoveryFailed(op, f.Class, err, werr)
		}
		e.logger.Debug("retrying on a new session", "op", op, "class", f.Class, "generation", next.gen, "retry", retries)
		sent = time.Now()
		err = fn(ctx, next)
		e.idle.release(next)
		f = recovery.Failure{Stage: recovery.Retry, Class: classify(ctx, next, err), Replayable: replayable, Stalled: next.stalled(), NotSent: recovery.NotSent(err)}
		f.Unanswered = f.Class == recovery.Timeout && e.unanswered(op, next, sent, own, false)
		dec = recovery.Decide(f)
		e.carryOut(op, next, dec, err)
		if dec.Next != recovery.RetryOnce || retries >= maxExpiryRetries || ctx.Err() != nil {
			return e.callError(op, f, next, err)
		}
		sess = next
	}
}

// unanswered counts a timeout of operation op on sess, sent at sent, and
// reports whether the session is unresponsive now: the server's own call
// timeout passed (own) with no answer on the session since the call was
// sent, for the reconnect.unresponsive_after-th time with no answer in
// between, or on a half-open probe (probe). A caller's shorter deadline,
// or a slow call while others are answered, says nothing about the
// server. A counted timeout is the server's last error, so status does
// not show a ready server whose calls time out as if nothing were wrong.
func (e *executor) unanswered(op string, sess *session, sent time.Time, own, probe bool) bool {
	if !own || sess.answeredAt() >= sent.UnixNano() {
		return false
	}
	if sess.answeredAt() > sess.lastUnanswered.Load() {
		sess.unanswered.Store(0) // answered since the last counted timeout
	}
	sess.lastUnanswered.Store(time.Now().UnixNano())
	n := int(sess.unanswered.Add(1))
	limit := cmp.Or(e.cfg.Reconnect.UnresponsiveAfter, config.DefaultUnresponsiveAfter)
	e.life.recordError(fmt.Errorf("%s: no answer within the call timeout (%s), %d in a row", op, e.cfg.Timeout, n))
	signal(e.in.suspect) // status shows it suspect, not ready (health.go)
	if !probe && n < limit {
		return false
	}
	// A tool that takes longer than the timeout is slow, not hung: the
	// server is replaced only if it does not answer a ping either.
	ctx, cancel := context.WithTimeout(context.Background(), min(max(e.cfg.Timeout, livenessPingFloor), livenessPingCap))
	defer cancel()
	if err := sess.cs.Ping(ctx, nil); err == nil {
		sess.lastAnswer.Store(time.Now().UnixNano())
		signal(e.in.suspect)
		return false
	}
	e.logger.Warn("server not answering (nor a ping); replacing it", "reason", RestartUnresponsive, "op", op, "timeouts_in_a_row", n, "half_open_probe", probe, "generation", sess.gen)
	return true
}

// abandoned follows a call whose caller gave up on it (its own shorter
// deadline, or a cancel) after at least abandonedAfter with no answer
// from the server since it was sent: a ping in the background, and if
// that gets no answer within abandonedPingTimeout either, with nothing
// else read from the server meanwhile, the session ends as
// unresponsive and the process is replaced (docs/supervision.md,
// "Liveness"). Callers with short deadlines are how most clients
// meet a hung server; without this a hung server behind a 300 s call
// timeout would wait for two of those. The call itself is never retried
// (a cancel never triggers recovery); the ping only tells whether the
// server still answers. One check per session at a time.
func (e *executor) abandoned(op string, sess *session, sent time.Time) {
	if time.Since(sent) < abandonedAfter || sess.answeredAt() >= sent.UnixNano() || !sess.checking.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer sess.checking.Store(false)
		pinged := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), abandonedPingTimeout)
		defer cancel()
		err := sess.cs.Ping(ctx, nil)
		var rpcErr *jsonrpc.Error
		switch {
		case err == nil || errors.As(err, &rpcErr):
			sess.lastAnswer.Store(time.Now().UnixNano())
			return
		case ctx.Err() == nil, sess.isDead(), sess.answeredAt() >= pinged.UnixNano():
			// Failed otherwise (the session's own failure is reported
			// where it is found), ended, or answered meanwhile.
			return
		}
		e.logger.Warn("server not answering a call its caller gave up on, nor a ping; replacing it", "reason", RestartUnresponsive,
			"op", op, "ping_timeout", abandonedPingTimeout, "generation", sess.gen)
		err = fmt.Errorf("%w: %s got no answer before its caller gave up, nor a ping within %s", errUnresponsive, op, abandonedPingTimeout)
		e.life.recordError(err)
		e.reportFailed(sess.gen, err)
	}()
}

// hold holds sess for an attempt of operation op (idle.go: idler.hold).
// A session being retired is not used: the operation waits for the next
// one within its deadline (acquire, which starts an idle server).
func (e *executor) hold(ctx context.Context, op string, sess *session) (*session, error) {
	for !e.idle.hold(sess) {
		var err error
		if sess, err = e.acquire(ctx, op, false); err != nil {
			return nil, err
		}
	}
	return sess, nil
}

// carryOut does what a decision tells the breaker, the session and the run
// loop about an operation's outcome on sess (err: the outcome's error).
func (e *executor) carryOut(op string, sess *session, dec recovery.Decision, err error) {
	if dec.Answered {
		// The upstream answered: it is reachable, and this session is proven.
		e.budget.breaker.Success()
		e.proved(sess)
		sess.lastAnswer.Store(time.Now().UnixNano())
		if sess.lastUnanswered.Load() != 0 {
			signal(e.in.suspect) // it answers again after a timeout (health.go)
		}
	}
	if dec.Expired {
		// The upstream answered that it expired the session: it is
		// reachable, and the session's end is no failure of it.
		sess.expired.Store(true)
		sess.lastAnswer.Store(time.Now().UnixNano())
		e.budget.breaker.Success()
	}
	if dec.Strike {
		e.budget.strike(op)
	}
	if dec.DiedInCall {
		sess.diedInCall.Store(true)
	}
	if dec.StrikeSession {
		e.budget.strikeSession(op, sess)
	}
	if dec.Reconnect {
		if dec.Unresponsive {
			err = fmt.Errorf("%w: %s got no answer within the call timeout (%s)", errUnresponsive, op, e.cfg.Timeout)
		} else if dec.Strike {
			// A timeout on a process that stopped reading its input: a
			// request may be half written into its pipe. Replace it.
			err = fmt.Errorf("the server stopped reading its input: %w", err)
		}
		e.reportFailed(sess.gen, err)
	}
}

// callError is what the caller of an operation gets for its outcome: the
// upstream's answer as it is, or a *recovery.Error saying what failed and
// what happens next. It is the one place where an operation's failure
// becomes the error its caller sees.
func (e *executor) callError(op string, f recovery.Failure, sess *session, err error) error {
	retry := f.Stage == recovery.Retry
	switch f.Class {
	case recovery.None, recovery.Application:
		return unwrapApplication(err)
	case recovery.Canceled:
		return err
	case recovery.InsufficientScope:
		return e.insufficientScopeError(op, err)
	case recovery.NeedsLogin:
		return e.needsLoginError(op, err)
	case recovery.Timeout:
		prefix := ""
		if retry {
			prefix = "retry: "
		}
		if f.Unanswered {
			return &recovery.Error{Server: e.name, Op: op, Class: recovery.Timeout,
				Reason: fmt.Sprintf("%sno answer within the call timeout (%s); the server stopped answering and is being replaced (unresponsive); the call was not retried since it may have run", prefix, e.cfg.Timeout)}
		}
		return e.timeoutError(op, sess, err, prefix)
	}
	switch {
	case retry && f.Class == recovery.Auth:
		return &recovery.Error{Server: e.name, Op: op, Class: recovery.Auth, NeedsReauth: true,
			Reason: "the upstream rejected the credentials again after reconnecting", Err: err}
	case retry && f.Class == recovery.ProcessDied:
		return &recovery.Error{Server: e.name, Op: op, Class: f.Class,
			Reason: "the server exited twice while handling this call (once more when it was replayed); not retried again", Err: err}
	case retry:
		return &recovery.Error{Server: e.name, Op: op, Class: f.Class, Reason: "retry on a new session failed too", Err: err}
	case f.Class == recovery.ProcessDied:
		return &recovery.Error{Server: e.name, Op: op, Class: f.Class,
			Reason: "the server process exited while the call was in flight; its outcome is unknown and it was not retried because it may have side effects", Err: err}
	}
	return &recovery.Error{Server: e.name, Op: op, Class: f.Class, Reason: "unreachable", Err: err}
}

// proved tells the supervisor that a call succeeded on sess, once per
// session: waking it for every call would cost each call a goroutine
// switch.
func (e *executor) proved(sess *session) {
	if sess.proven.CompareAndSwap(false, true) {
		signal(e.in.healthy)
	}
}

// classify adds what only the supervisor knows to recovery.Classify: a
// broken connection to a process-backed server means the process died.
func classify(ctx context.Context, sess *session, err error) recovery.Class {
	c := recovery.Classify(ctx, err)
	if c == recovery.Transport && sess.processBacked() {
		return recovery.ProcessDied
	}
	return c
}

// timeoutError is a call's error when its deadline passed: either the
// server never answered, or it never even read the request (a stopped or
// stuck process whose input pipe is full; its connection is then closed
// and the process replaced, since half a request may be in the pipe).
func (e *executor) timeoutError(op string, sess *session, err error, prefix string) error {
	reason := fmt.Sprintf("%sno answer within the call timeout (%s)", prefix, e.cfg.Timeout)
	if errors.Is(err, wire.ErrWriteTimeout) || sess.stalled() {
		reason = fmt.Sprintf("%sthe server did not read the request within the call timeout (%s): it is stopped or stuck", prefix, e.cfg.Timeout)
	}
	return &recovery.Error{Server: e.name, Op: op, Class: recovery.Timeout, Reason: reason}
}

func (e *executor) openReason() string {
	if e.life.view().state == StateParked {
		if e.cfg.URL != "" {
			return fmt.Sprintf("parked after its retry budget was spent (circuit open); calls try to reach it again at most every %s, and it tries by itself at the next attempt time", remoteProbeEvery)
		}
		return "parked after its retry budget was spent (circuit open)"
	}
	_, n, _ := e.budget.breaker.Snapshot()
	return fmt.Sprintf("unreachable (circuit open after %d consecutive failures)", n)
}

// needsLoginError is a call's error while the server needs a login.
func (e *executor) needsLoginError(op string, err error) error {
	reason := "needs a login"
	if err == nil || !strings.Contains(err.Error(), "mcpvisor login") {
		reason += " (" + loginActionFor(e.name) + ")"
	}
	return &recovery.Error{Server: e.name, Op: op, Class: recovery.NeedsLogin, Reason: reason, Err: err}
}

// insufficientScopeError is a call's error when the upstream wants more
// scopes for it than the token carries.
func (e *executor) insufficientScopeError(op string, err error) error {
	reason := "needs a login granting more scopes (step-up)"
	if err == nil || !strings.Contains(err.Error(), "mcpvisor login") {
		reason += " (" + loginActionFor(e.name) + ")"
	}
	return &recovery.Error{Server: e.name, Op: op, Class: recovery.InsufficientScope, Reason: reason, Err: err}
}

func (e *executor) recoveryFailed(op string, class recovery.Class, orig, wait error) error {
	re := &recovery.Error{Server: e.name, Op: op, Class: class, Err: orig}
	var uerr *recovery.Error
	if errors.As(wait, &uerr) && uerr.Class == recovery.NeedsLogin {
		return e.needsLoginError(op, uerr.Err)
	}
	if errors.As(wait, &uerr) {
		re.Reason = "no new session to retry on (" + uerr.Reason + ")"
		re.RetryAt = uerr.RetryAt
	} else {
		re.Reason = "no new session to retry on in time"
	}
	if class == recovery.Auth {
		re.NeedsReauth = true
	}
	return re
}

// reportFailed tells the run loop that generation gen is broken. Reports
// about a generation that has already been replaced are ignored there, so
// concurrent callers failing on one session cause one reconnect.
func (e *executor) reportFailed(gen uint64, err error) {
	e.life.reportFailed(gen, err)
	signal(e.in.wake)
}

// acquire returns a live session, waiting for one while the server is
// starting or reconnecting (bounded by ctx). A parked server fails at once
// unless probe is set (the breaker's cooldown has passed, or an early probe
// of a remote server is due); then the call is the half-open probe: it
// revives the server and waits for the new session within its deadline,
// never writing into a dead pipe.
func (e *executor) acquire(ctx context.Context, op string, probe bool) (*session, error) {
	// revived: this call revived a parked server; leftPark: the server
	// has left park since, so parked again means the probe failed.
	// parkedUntil is the next attempt time of the park the call revived:
	// a park with another one is a new park, even if the call never saw
	// the server between the two (a remote server refusing connections
	// fails its attempt within a millisecond).
	revived, leftPark := false, false
	var parkedUntil time.Time
	var probeAgain <-chan time.Time
	for {
		if sess := e.sessions.live(); sess != nil {
			return sess, nil
		}
		v := e.life.view()
		state, changed, next, lastErr := v.state, v.changed, v.next, v.lastErr
		if revived && (state != StateParked || !next.Equal(parkedUntil)) {
			leftPark = true
		}

		switch state {
		case StateStopped:
			return nil, e.stoppedOp(op)
		case StateNeedsLogin:
			return nil, e.needsLoginError(op, lastErr)
		case StateNeedsConfig:
			return nil, &recovery.Error{Server: e.name, Op: op, Class: recovery.Unavailable,
				Reason: "not started: " + configActionFor(e.cfg.MissingEnv), Err: lastErr}
		case StateIdle:
			// Stopped after idle_timeout (idle.go): this call starts it
			// and waits for it within its deadline; calls arriving
			// together signal once, so there is one start.
			signal(e.in.start)
		case StateParked:
			if revived && !leftPark {
				break // the supervisor has not left park yet
			}
			if revived {
				// The probe this call made has failed: the server parked
				// again.
				return nil, &recovery.Error{Server: e.name, Op: op, Class: recovery.Unavailable,
					Reason: "parked; this call's attempt to revive it failed", Err: lastErr, RetryAt: next}
			}
			if !probe && !e.budget.breaker.CooldownPassed() && e.sessions.neverListed() && e.budget.probeEvery(true) > 0 {
				// Never got ready: a call brings it up, at the rate
				// limit (remoteProbeDue); wait for its next slot.
				if !e.budget.remoteProbeDue(true) {
					if probeAgain == nil {
						probeAgain = time.After(e.budget.probeEvery(true))
					}
					break
				}
				e.budget.earlyRevive.Store(true)
				probe = true
			}
			if !probe && !e.budget.breaker.CooldownPassed() {
				_, _, until := e.budget.breaker.Snapshot()
				return nil, &recovery.Error{Server: e.name, Op: op, Class: recovery.Unavailable,
					Reason: "parked after its retry budget was spent; a call after the next attempt time revives it", Err: lastErr, RetryAt: until}
			}
			// This call is the half-open probe: start the server and wait
			// for it, within the call's deadline.
			revived, parkedUntil = true, next
			signal(e.in.revive)
		case StateReconnecting:
			// A remote server waiting out its backoff is tried now, at
			// most once per remoteProbeEvery for all calls: one back from
			// a short outage serves the calls made once it is back, not
			// after the rest of a multi-second delay.
			// So is a server that never got ready (its tools were never
			// listed), at unlistedProbeEvery.
			neverUp := e.sessions.neverListed()
			if e.budget.probeRemote(state, next, e.in.revive, neverUp) {
				break
			}
			every := e.budget.probeEvery(neverUp)
			if dl, ok := ctx.Deadline(); ok && !next.IsZero() && dl.Before(next) && !neverUp {
				return nil, &recovery.Error{Server: e.name, Op: op, Class: recovery.Unavailable,
					Reason: "reconnecting", Err: lastErr, RetryAt: next}
			}
			if every > 0 && !next.IsZero() && probeAgain == nil {
				// Waiting for the next attempt: probe again when the rate
				// limit allows.
				probeAgain = time.After(every)
			}
		}
		select {
		case <-probeAgain:
			probeAgain = nil
		case <-changed:
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return nil, ctx.Err()
			}
			return nil, &recovery.Error{Server: e.name, Op: op, Class: recovery.Timeout,
				Reason: fmt.Sprintf("server not ready within the call's deadline (state %s)", state), Err: lastErr}
		}
	}
}

// awaitNewer waits for a session newer than gen, at most retryReadyCap.
func (e *executor) awaitNewer(ctx context.Context, gen uint64) (*session, error) {
	ctx, cancel := context.WithTimeout(ctx, retryReadyCap)
	defer cancel()
	for {
		if sess := e.sessions.newer(gen); sess != nil {
			return sess, nil
		}
		v := e.life.view()
		state, changed, next, lastErr := v.state, v.changed, v.next, v.lastErr
		switch state {
		case StateNeedsLogin:
			return nil, &recovery.Error{Class: recovery.NeedsLogin, Reason: "server needs a login", Err: lastErr}
		case StateStopped:
			return nil, &recovery.Error{Reason: e.in.stopped(), Err: ErrStopped}
		case StateParked:
			return nil, &recovery.Error{Reason: "server parked", RetryAt: next}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// unwrapApplication returns the upstream's JSON-RPC error itself, so the
// gateway forwards its code, message and data unchanged. An error mcpvisor
// made about this one call (a response over max_message_size, refused by
// the transport) is returned itself: the go-sdk wraps it in its own
// JSON-RPC error ("rejected by transport"), which would hide what happened.
func unwrapApplication(err error) error {
	var own *recovery.Error
	if errors.As(err, &own) {
		return own
	}
	var wire *jsonrpc.Error
	if errors.As(err, &wire) {
		return wire
	}
	return err
}
