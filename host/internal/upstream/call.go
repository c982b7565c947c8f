package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/wire"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// ErrStopped is wrapped by errors for operations on a stopped supervisor.
var ErrStopped = errors.New("server is stopped")

// CallTool calls a tool on the upstream by its original name, for the
// downstream client d (nil: none). A tool that declared readOnlyHint is
// replayed if the process dies mid-call; any other tool is not, since its
// side effects may already have happened.
func (s *Supervisor) CallTool(ctx context.Context, d Downstream, params *mcp.CallToolParamsRaw) (*mcp.CallToolResult, error) {
	var res *mcp.CallToolResult
	meta := params.Meta
	upTok, rewritten, release := s.track(ctx, d, params.GetProgressToken())
	defer release()
	ctx = withCaller(ctx, d)
	if rewritten {
		meta = maps.Clone(meta)
		meta["progressToken"] = upTok
	}
	obs := s.newCall(d, "tools/call", params.Name, params.Arguments)
	obs.traceFromMeta(params.Meta)
	ctx = s.started(ctx, obs)
	meta = obs.propagated(meta)
	err := s.do(ctx, nil, "tools/call", s.replayable(params.Name), obs.wrap(s, func(ctx context.Context, sess *session) error {
		var err error
		res, err = sdkCallTool(ctx, sess, meta, params)
		return err
	}))
	if obs != nil {
		var result any
		if res != nil {
			result = res
		}
		s.end(ctx, obs, err, res != nil && res.IsError, result)
	}
	return res, err
}

// replayable reports whether tool declared readOnlyHint, which makes it
// safe to replay after the process died mid-call.
func (s *Supervisor) replayable(tool string) bool {
	ro := s.readOnly.Load()
	return ro != nil && (*ro)[tool]
}

// sdkCallTool calls a tool through the SDK client with the downstream's
// raw params (meta may replace theirs).
func sdkCallTool(ctx context.Context, sess *session, meta mcp.Meta, p *mcp.CallToolParamsRaw) (*mcp.CallToolResult, error) {
	return sess.cs.CallTool(ctx, &mcp.CallToolParams{
		Meta:           sess.bridgeMeta(meta),
		Name:           p.Name,
		Arguments:      rawArgs(p.Arguments),
		InputResponses: p.InputResponses,
		RequestState:   p.RequestState,
	})
}

// ReadResource reads a resource for the downstream client d (nil: none).
// Reads are replayable.
func (s *Supervisor) ReadResource(ctx context.Context, d Downstream, params *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
	return observed(ctx, s, d, "resources/read", params.URI, nil, params,
		func(p *mcp.ReadResourceParams) *mcp.Meta { return &p.Meta }, (*mcp.ClientSession).ReadResource)
}

// observed runs a replayable operation for the downstream client d through
// the recovery path, reported to the observer as op on name (args, if
// set, gives its arguments as JSON). meta points at a params' _meta: the
// observer's trace context is added to it, and it is bridged to each
// session's version.
func observed[P, R any](ctx context.Context, s *Supervisor, d Downstream, op, name string, args func() []byte, params *P,
	meta func(*P) *mcp.Meta, send func(*mcp.ClientSession, context.Context, *P) (*R, error),
) (*R, error) {
	var obs *Call
	if s.opts.Observer != nil {
		var a []byte
		if args != nil {
			a = args()
		}
		obs = s.newCall(d, op, name, a)
		obs.traceFromMeta(*meta(params))
		ctx = s.started(ctx, obs)
		p := *params
		*meta(&p) = obs.propagated(*meta(params))
		params = &p
	}
	var res *R
	err := s.do(ctx, d, op, true, obs.wrap(s, func(ctx context.Context, sess *session) error {
		var err error
		res, err = send(sess.cs, ctx, forSession(sess, params, meta))
		return err
	}))
	if obs != nil {
		var result any
		if res != nil {
			result = res
		}
		s.end(ctx, obs, err, false, result)
	}
	return res, err
}

// list runs one page of a list operation through the recovery path; list
// operations are replayable.
func list[P, R any](ctx context.Context, s *Supervisor, op string, params P, page func(*mcp.ClientSession, context.Context, P) (R, error)) (R, error) {
	var res R
	err := s.do(ctx, nil, op, true, func(ctx context.Context, sess *session) error {
		var err error
		res, err = page(sess.cs, ctx, params)
		return err
	})
	return res, err
}

// ListResources lists the upstream's resources (one page).
func (s *Supervisor) ListResources(ctx context.Context, params *mcp.ListResourcesParams) (*mcp.ListResourcesResult, error) {
	return list(ctx, s, "resources/list", params, (*mcp.ClientSession).ListResources)
}

// ListResourceTemplates lists the upstream's resource templates (one page).
func (s *Supervisor) ListResourceTemplates(ctx context.Context, params *mcp.ListResourceTemplatesParams) (*mcp.ListResourceTemplatesResult, error) {
	return list(ctx, s, "resources/templates/list", params, (*mcp.ClientSession).ListResourceTemplates)
}

// ListPrompts lists the upstream's prompts (one page).
func (s *Supervisor) ListPrompts(ctx context.Context, params *mcp.ListPromptsParams) (*mcp.ListPromptsResult, error) {
	return list(ctx, s, "prompts/list", params, (*mcp.ClientSession).ListPrompts)
}

// ListTools lists the upstream's tools (one page).
func (s *Supervisor) ListTools(ctx context.Context, params *mcp.ListToolsParams) (*mcp.ListToolsResult, error) {
	return list(ctx, s, "tools/list", params, (*mcp.ClientSession).ListTools)
}

// GetPrompt gets a prompt by its original name, for the downstream client
// d (nil: none). Prompt gets are replayable.
func (s *Supervisor) GetPrompt(ctx context.Context, d Downstream, params *mcp.GetPromptParams) (*mcp.GetPromptResult, error) {
	var args func() []byte
	if params.Arguments != nil {
		args = func() []byte {
			b, _ := json.Marshal(params.Arguments)
			return b
		}
	}
	return observed(ctx, s, d, "prompts/get", params.Name, args, params,
		func(p *mcp.GetPromptParams) *mcp.Meta { return &p.Meta }, (*mcp.ClientSession).GetPrompt)
}

// Complete asks the upstream for argument completions, for the downstream
// client d (nil: none).
func (s *Supervisor) Complete(ctx context.Context, d Downstream, params *mcp.CompleteParams) (*mcp.CompleteResult, error) {
	var res *mcp.CompleteResult
	err := s.do(ctx, d, "completion/complete", true, func(ctx context.Context, sess *session) error {
		var err error
		res, err = sess.cs.Complete(ctx, forSession(sess, params, func(p *mcp.CompleteParams) *mcp.Meta { return &p.Meta }))
		return err
	})
	return res, err
}

// Subscribe subscribes to updates of a resource.
func (s *Supervisor) Subscribe(ctx context.Context, params *mcp.SubscribeParams) error {
	return s.do(ctx, nil, "resources/subscribe", true, func(ctx context.Context, sess *session) error {
		err := sess.cs.Subscribe(ctx, forSession(sess, params, func(p *mcp.SubscribeParams) *mcp.Meta { return &p.Meta }))
		if err == nil {
			s.subscribed(sess, params.URI) // held: no idle stop (idle.go)
		}
		return err
	})
}

// Unsubscribe ends a resource subscription.
func (s *Supervisor) Unsubscribe(ctx context.Context, params *mcp.UnsubscribeParams) error {
	s.unsubscribed(params.URI) // idle.go
	return s.do(ctx, nil, "resources/unsubscribe", true, func(ctx context.Context, sess *session) error {
		return sess.cs.Unsubscribe(ctx, forSession(sess, params, func(p *mcp.UnsubscribeParams) *mcp.Meta { return &p.Meta }))
	})
}

// forSession returns a copy of params whose _meta (meta points at it)
// suits the session's protocol version (bridge.go).
func forSession[P any](sess *session, params *P, meta func(*P) *mcp.Meta) *P {
	p := *params
	*meta(&p) = sess.bridgeMeta(*meta(&p))
	return &p
}

// do runs one upstream operation through the recovery path (docs/design.md §6):
// breaker gate, a ready session, the operation, then by error class:
// canceled → return; auth and session gone → new session, retry once;
// process died → new session, retry only when replayable; timeout and
// transport → breaker strike; application → pass through unchanged. The
// call is tracked for its downstream client d (nil: none, or tracked by the
// caller) before anything is sent: the upstream may ask that client
// something (roots) the moment the request arrives.
func (s *Supervisor) do(ctx context.Context, d Downstream, op string, replayable bool, fn func(context.Context, *session) error) error {
	s.calls.Add(1)
	defer s.calls.Add(-1)
	// Idle stop (idle.go): every operation is activity and starts an
	// idle server.
	s.idleCallStarted()
	defer s.idleCallEnded()
	_, _, release := s.track(ctx, d, nil)
	defer release()
	if d != nil {
		ctx = withCaller(ctx, d)
	}
	if s.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.Timeout)
		defer cancel()
	}

	ok, probe, retryAt := s.breaker.Allow()
	revive := probe
	sess := s.cur.Load()
	if !ok {
		// An open breaker fails calls fast while the server keeps failing
		// them. While the supervisor is already getting a new session,
		// though, the call waits for it (the new session closes the
		// breaker) instead of failing (docs/design.md §5). A parked remote
		// server may be probed early, rate-limited (remoteProbeEvery).
		s.mu.Lock()
		state := s.state
		s.mu.Unlock()
		live := sess != nil && !sess.isDead()
		revive = !live && state == StateParked && s.remoteProbeDue()
		if revive {
			s.earlyRevive.Store(true)
		}
		if !revive && (live || (state != StateStarting && state != StateReconnecting)) {
			return &recovery.Error{Server: s.name, Op: op, Class: recovery.Unavailable,
				Reason: s.openReason(), RetryAt: retryAt}
		}
	}
	if sess == nil || sess.isDead() {
		var err error
		if sess, err = s.acquire(ctx, op, revive); err != nil {
			s.breaker.Release(probe)
			return err
		}
	}

	// max_lifetime and idle stop (idle.go): hold the session while the
	// operation runs on it; one being retired is not used.
	sess, herr := s.holdSession(ctx, op, sess)
	if herr != nil {
		s.breaker.Release(probe)
		return herr
	}
	err := fn(ctx, sess)
	s.releaseSession(sess)
	class := s.classify(ctx, sess, err)
	switch class {
	case recovery.None, recovery.Application:
		// The upstream answered: it is reachable, and this session is proven.
		s.breaker.Success()
		s.proved(sess)
		return unwrapApplication(err)
	case recovery.Canceled:
		s.breaker.Release(probe)
		return err
	case recovery.Timeout:
		s.strike(op)
		if sess.stalled() {
			// The process stopped reading; a request may be half written
			// into its pipe. Replace it.
			s.reportFailed(sess.gen, fmt.Errorf("the server stopped reading its input: %w", err))
		}
		return s.timeoutError(op, sess, err, "")
	case recovery.NeedsLogin:
		// The token could not be refreshed: no retry can help, and the
		// server is reachable, so no strike. The supervisor reconnects,
		// finds the same, and waits for a login.
		s.breaker.Release(probe)
		s.reportFailed(sess.gen, err)
		return s.needsLoginError(op, err)
	case recovery.InsufficientScope:
		// The upstream answered, on a healthy session, that this operation
		// needs a scope the token lacks: only a login asking for it helps
		// (step-up). The server stays ready for everything else.
		s.breaker.Success()
		s.proved(sess)
		return s.insufficientScopeError(op, err)
	}
	if s.isStopping() {
		return &recovery.Error{Server: s.name, Op: op, Class: recovery.Unavailable, Reason: s.stopped(), Err: ErrStopped}
	}

	retry := false
	switch class {
	case recovery.SessionGone, recovery.Auth:
		// The server rejected the request before running it: a retry on a
		// new session cannot double a side effect.
		retry = true
	case recovery.ProcessDied:
		sess.diedInCall.Store(true)
		s.strikeSession(op, sess)
		retry = replayable
	default: // Transport
		s.strikeSession(op, sess)
		retry = replayable
	}
	s.reportFailed(sess.gen, err)
	if !retry {
		if class == recovery.ProcessDied {
			return &recovery.Error{Server: s.name, Op: op, Class: class,
				Reason: "the server process exited while the call was in flight; its outcome is unknown and it was not retried because it may have side effects", Err: err}
		}
		return &recovery.Error{Server: s.name, Op: op, Class: class, Reason: "unreachable", Err: err}
	}

	next, werr := s.awaitNewer(ctx, sess.gen)
	if werr == nil {
		next, werr = s.holdSession(ctx, op, next) // idle.go
	}
	if werr != nil {
		return s.recoveryFailed(op, class, err, werr)
	}
	s.logger.Debug("retrying on a new session", "op", op, "class", class, "generation", next.gen)
	err2 := fn(ctx, next)
	s.releaseSession(next)
	class2 := s.classify(ctx, next, err2)
	switch class2 {
	case recovery.None, recovery.Application:
		s.breaker.Success()
		s.proved(next)
		return unwrapApplication(err2)
	case recovery.Canceled:
		return err2
	case recovery.NeedsLogin:
		s.reportFailed(next.gen, err2)
		return s.needsLoginError(op, err2)
	case recovery.InsufficientScope:
		s.breaker.Success()
		s.proved(next)
		return s.insufficientScopeError(op, err2)
	case recovery.Auth:
		return &recovery.Error{Server: s.name, Op: op, Class: recovery.Auth, NeedsReauth: true,
			Reason: "the upstream rejected the credentials again after reconnecting", Err: err2}
	case recovery.Timeout:
		s.strike(op)
		return s.timeoutError(op, next, err2, "retry: ")
	}
	if class2 != recovery.SessionGone {
		s.strikeSession(op, next)
	}
	if class2 == recovery.ProcessDied {
		next.diedInCall.Store(true)
		s.reportFailed(next.gen, err2)
		return &recovery.Error{Server: s.name, Op: op, Class: class2,
			Reason: "the server exited twice while handling this call (once more when it was replayed); not retried again", Err: err2}
	}
	s.reportFailed(next.gen, err2)
	return &recovery.Error{Server: s.name, Op: op, Class: class2, Reason: "retry on a new session failed too", Err: err2}
}

// proved tells the supervisor that a call succeeded on sess, once per
// session: waking it for every call would cost each call a goroutine
// switch.
func (s *Supervisor) proved(sess *session) {
	if sess.proven.CompareAndSwap(false, true) {
		signal(s.healthy)
	}
}

// classify adds what only the supervisor knows to recovery.Classify: a
// broken connection to a process-backed server means the process died.
func (s *Supervisor) classify(ctx context.Context, sess *session, err error) recovery.Class {
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
func (s *Supervisor) timeoutError(op string, sess *session, err error, prefix string) error {
	reason := fmt.Sprintf("%sno answer within the call timeout (%s)", prefix, s.cfg.Timeout)
	if errors.Is(err, wire.ErrWriteTimeout) || sess.stalled() {
		reason = fmt.Sprintf("%sthe server did not read the request within the call timeout (%s): it is stopped or stuck", prefix, s.cfg.Timeout)
	}
	return &recovery.Error{Server: s.name, Op: op, Class: recovery.Timeout, Reason: reason}
}

// strikeSession is strike for a failure of the session itself (its process
// died, its connection broke): one strike per session however many calls
// were in flight on it, so one crash never opens the breaker by itself.
func (s *Supervisor) strikeSession(op string, sess *session) {
	if sess.struck.CompareAndSwap(false, true) {
		s.strike(op)
	}
}

// strike counts one failure against the breaker.
func (s *Supervisor) strike(op string) {
	if s.breaker.Failure() {
		_, n, until := s.breaker.Snapshot()
		s.logger.Warn("circuit breaker opened", "op", op, "failures", n, "retry_at", until.Format(time.RFC3339))
	}
}

func (s *Supervisor) openReason() string {
	s.mu.Lock()
	st := s.state
	s.mu.Unlock()
	if st == StateParked {
		if s.cfg.URL != "" {
			return fmt.Sprintf("parked after its retry budget was spent (circuit open); calls try to reach it again at most every %s, and it tries by itself at the next attempt time", remoteProbeEvery)
		}
		return "parked after its retry budget was spent (circuit open)"
	}
	_, n, _ := s.breaker.Snapshot()
	return fmt.Sprintf("unreachable (circuit open after %d consecutive failures)", n)
}

// needsLoginError is a call's error while the server needs a login.
func (s *Supervisor) needsLoginError(op string, err error) error {
	reason := "needs a login"
	if err == nil || !strings.Contains(err.Error(), "mcpvisor login") {
		reason += " (" + s.loginAction() + ")"
	}
	return &recovery.Error{Server: s.name, Op: op, Class: recovery.NeedsLogin, Reason: reason, Err: err}
}

// insufficientScopeError is a call's error when the upstream wants more
// scopes for it than the token carries.
func (s *Supervisor) insufficientScopeError(op string, err error) error {
	reason := "needs a login granting more scopes (step-up)"
	if err == nil || !strings.Contains(err.Error(), "mcpvisor login") {
		reason += " (" + s.loginAction() + ")"
	}
	return &recovery.Error{Server: s.name, Op: op, Class: recovery.InsufficientScope, Reason: reason, Err: err}
}

func (s *Supervisor) recoveryFailed(op string, class recovery.Class, orig, wait error) error {
	re := &recovery.Error{Server: s.name, Op: op, Class: class, Err: orig}
	var uerr *recovery.Error
	if errors.As(wait, &uerr) && uerr.Class == recovery.NeedsLogin {
		return s.needsLoginError(op, uerr.Err)
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
func (s *Supervisor) reportFailed(gen uint64, err error) {
	s.mu.Lock()
	if gen > s.failedGen {
		s.failedGen = gen
		s.failedErr = err
	}
	s.mu.Unlock()
	signal(s.wake)
}

// acquire returns a live session, waiting for one while the server is
// starting or reconnecting (bounded by ctx). A parked server fails at once
// unless probe is set (the breaker's cooldown has passed, or an early probe
// of a remote server is due); then the call is the half-open probe: it
// revives the server and waits for the new session within its deadline,
// never writing into a dead pipe.
func (s *Supervisor) acquire(ctx context.Context, op string, probe bool) (*session, error) {
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
		if sess := s.cur.Load(); sess != nil && !sess.isDead() {
			return sess, nil
		}
		s.mu.Lock()
		state, changed, next, lastErr := s.state, s.changed, s.nextAttempt, s.lastErr
		s.mu.Unlock()
		if revived && (state != StateParked || !next.Equal(parkedUntil)) {
			leftPark = true
		}

		switch state {
		case StateStopped:
			return nil, &recovery.Error{Server: s.name, Op: op, Class: recovery.Unavailable, Reason: s.stopped(), Err: ErrStopped}
		case StateNeedsLogin:
			return nil, s.needsLoginError(op, lastErr)
		case StateNeedsConfig:
			return nil, &recovery.Error{Server: s.name, Op: op, Class: recovery.Unavailable,
				Reason: "not started: " + s.configAction(), Err: lastErr}
		case StateParked:
			if revived && !leftPark {
				break // the supervisor has not left park yet
			}
			if revived {
				// The probe this call made has failed: the server parked
				// again.
				return nil, &recovery.Error{Server: s.name, Op: op, Class: recovery.Unavailable,
					Reason: "parked; this call's attempt to revive it failed", Err: lastErr, RetryAt: next}
			}
			if !probe && !s.breaker.CooldownPassed() {
				_, _, until := s.breaker.Snapshot()
				return nil, &recovery.Error{Server: s.name, Op: op, Class: recovery.Unavailable,
					Reason: "parked after its retry budget was spent; a call after the next attempt time revives it", Err: lastErr, RetryAt: until}
			}
			// This call is the half-open probe: start the server and wait
			// for it, within the call's deadline.
			revived, parkedUntil = true, next
			signal(s.revive)
		case StateReconnecting:
			// A remote server waiting out its backoff is tried now, at
			// most once per remoteProbeEvery for all calls: one back from
			// a short outage serves the calls made once it is back, not
			// after the rest of a multi-second delay.
			if s.probeRemote(state, next) {
				break
			}
			if dl, ok := ctx.Deadline(); ok && !next.IsZero() && dl.Before(next) {
				return nil, &recovery.Error{Server: s.name, Op: op, Class: recovery.Unavailable,
					Reason: "reconnecting", Err: lastErr, RetryAt: next}
			}
			if s.cfg.URL != "" && !next.IsZero() && probeAgain == nil {
				// Waiting for the next attempt: probe again when the rate
				// limit allows.
				probeAgain = time.After(remoteProbeEvery)
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
			return nil, &recovery.Error{Server: s.name, Op: op, Class: recovery.Timeout,
				Reason: fmt.Sprintf("server not ready within the call's deadline (state %s)", state), Err: lastErr}
		}
	}
}

// awaitNewer waits for a session newer than gen, at most retryReadyCap.
func (s *Supervisor) awaitNewer(ctx context.Context, gen uint64) (*session, error) {
	ctx, cancel := context.WithTimeout(ctx, retryReadyCap)
	defer cancel()
	for {
		if sess := s.cur.Load(); sess != nil && sess.gen > gen && !sess.isDead() {
			return sess, nil
		}
		s.mu.Lock()
		state, changed, next, lastErr := s.state, s.changed, s.nextAttempt, s.lastErr
		s.mu.Unlock()
		switch state {
		case StateNeedsLogin:
			return nil, &recovery.Error{Class: recovery.NeedsLogin, Reason: "server needs a login", Err: lastErr}
		case StateStopped:
			return nil, &recovery.Error{Reason: s.stopped(), Err: ErrStopped}
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

// rawArgs passes the downstream's argument bytes through without decoding;
// a nil message stays absent rather than becoming JSON null.
func rawArgs(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return raw
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
