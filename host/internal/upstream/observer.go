package upstream

/*
Design note: what the supervisor tells an Observer.

Metrics, the audit log and traces (host/internal/telemetry, host/internal/
audit) need facts only the supervisor knows: that a call was replayed on a
new session, that a process died under a call that was therefore not
replayed, which generation answered. They must not need changes to the
recovery path itself, so the hooks sit where outcomes are already decided:

  - an operation made for a downstream client is wrapped (begin, wrap,
    end): wrap counts the attempts do() makes and notes the generation and
    error class of each, so end can name the outcome from the attempts and
    the error do() returned, without do() knowing it is watched;
  - setState reports state changes, the run loop each connect attempt, the
    breaker its transitions, and the downstream routing what it forwarded
    or dropped.

With no Observer every hook is a nil check.
*/

import (
	"context"
	"errors"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// Observer is told what a supervisor does and decides. Every method is
// called synchronously from the supervisor's or a caller's goroutine and
// must not block.
type Observer interface {
	// StateChanged reports a state transition (never from == to).
	StateChanged(server string, from, to State)
	// BreakerChanged reports a circuit breaker transition.
	BreakerChanged(server string, from, to BreakerState)
	// ConnectFinished reports one connect attempt: err is nil when it
	// produced a ready session of generation gen. initial is set for the
	// supervisor's first attempt, which is a start, not a reconnect.
	ConnectFinished(server string, gen uint64, initial bool, err error)
	// Restarted reports a session established after the server's first
	// (generation gen > 1), with why the server was (re)started
	// (docs/design.md §18.3).
	Restarted(server string, gen uint64, reason RestartReason)
	// Notification reports an upstream notification (kind "progress",
	// "log", "resource_updated") that was forwarded to a downstream client
	// or dropped.
	Notification(server, kind string, forwarded bool)
	// CallStarted is called before an operation made for a downstream
	// client is attempted. The context it returns is the one the operation
	// runs with (a tracer puts its span there). It may set c.Propagate.
	CallStarted(ctx context.Context, c *Call) context.Context
	// CallFinished is called once with the operation's outcome, with the
	// context CallStarted returned.
	CallFinished(ctx context.Context, c *Call)
}

// Outcome is how an operation ended, as metrics and the audit log name it.
type Outcome string

// The outcomes of an operation. Exactly one applies to each.
const (
	// OutcomeOK: the upstream answered on the first attempt.
	OutcomeOK Outcome = "ok"
	// OutcomeToolError: the tool answered with isError: true.
	OutcomeToolError Outcome = "tool_error"
	// OutcomeProtocolError: the upstream answered with a JSON-RPC error.
	OutcomeProtocolError Outcome = "protocol_error"
	// OutcomeReplayed: the first attempt failed (session gone, credentials,
	// or a read-only call whose process died) and the upstream answered
	// the retry on a new session.
	OutcomeReplayed Outcome = "replayed"
	// OutcomeTimeout: no answer within the call timeout.
	OutcomeTimeout Outcome = "timeout"
	// OutcomeCrashedNotReplayed: the process died while the call was in
	// flight and it was not replayed; whether it took effect is unknown.
	OutcomeCrashedNotReplayed Outcome = "crashed_not_replayed"
	// OutcomeParked: not sent, the server is parked.
	OutcomeParked Outcome = "parked"
	// OutcomeUnavailable: not sent, the server is reconnecting, its
	// breaker is open, or it is stopped.
	OutcomeUnavailable Outcome = "unavailable"
	// OutcomeTransportError: the connection failed (also a failed retry).
	OutcomeTransportError Outcome = "transport_error"
	// OutcomeAuthError: the upstream refused the credentials.
	OutcomeAuthError Outcome = "auth_error"
	// OutcomeCanceled: the downstream client gave up.
	OutcomeCanceled Outcome = "canceled"
)

// Outcomes lists every Outcome, for exporters that pre-declare series.
func Outcomes() []Outcome {
	return []Outcome{OutcomeOK, OutcomeToolError, OutcomeProtocolError, OutcomeReplayed,
		OutcomeTimeout, OutcomeCrashedNotReplayed, OutcomeParked, OutcomeUnavailable,
		OutcomeTransportError, OutcomeAuthError, OutcomeCanceled}
}

// Call is one operation made for a downstream client, as an Observer sees
// it. The supervisor fills it; CallFinished gets it complete.
type Call struct {
	// Server is the server block's name.
	Server string
	// Method is the MCP method: "tools/call", "resources/read",
	// "prompts/get".
	Method string
	// Name is the tool or prompt's original name, or the resource URI.
	Name string
	// Downstream is the client the operation was made for (nil: a library
	// call).
	Downstream Downstream
	// Arguments are the request's arguments as JSON (tools/call,
	// prompts/get), nil when absent.
	Arguments []byte
	// Traceparent and Tracestate are the W3C trace context the downstream
	// sent in the request's _meta, if any.
	Traceparent, Tracestate string

	// Propagate, set by CallStarted, is added to the _meta of the request
	// sent upstream (W3C trace context: traceparent, tracestate).
	Propagate map[string]string

	// Start is when the operation began; Duration how long it took.
	Start    time.Time
	Duration time.Duration
	// AwaitedSession is set when no ready session existed at the start, so
	// the operation waited for a (re)connect before it was sent.
	AwaitedSession bool
	// Attempts are the times the operation was sent upstream: none when it
	// failed before sending, two when it was retried on a new session.
	Attempts []Attempt

	// Outcome is how it ended; Class the recovery class of its error
	// (recovery.None on success), Err the error itself.
	Outcome Outcome
	Class   recovery.Class
	Err     error
	// Result is what the call returned, for sizes and digests: the JSON
	// bytes of a call forwarded as bytes (json.RawMessage), else the
	// typed result; nil when it returned none.
	Result any
}

// Generation is the generation of the session that answered (or last
// failed) the operation; 0 when it was never sent.
func (c *Call) Generation() uint64 {
	if len(c.Attempts) == 0 {
		return 0
	}
	return c.Attempts[len(c.Attempts)-1].Generation
}

// Attempt is one sending of an operation upstream.
type Attempt struct {
	// Generation is the session it was sent on.
	Generation uint64
	// Start and End bound the attempt.
	Start, End time.Time
	// Class is the recovery class of the attempt's error.
	Class recovery.Class
}

// newCall starts the record of an operation; nil when there is no
// Observer. The caller adds the downstream's trace context, then calls
// started.
func (s *Supervisor) newCall(d Downstream, method, name string, args []byte) *Call {
	if s.opts.Observer == nil {
		return nil
	}
	c := &Call{Server: s.name, Method: method, Name: name, Downstream: d, Arguments: args, Start: time.Now()}
	if s.sessions.live() == nil {
		c.AwaitedSession = true
	}
	return c
}

// started tells the Observer an operation begins and returns the context
// to run it with.
func (s *Supervisor) started(ctx context.Context, c *Call) context.Context {
	if c == nil {
		return ctx
	}
	return s.opts.Observer.CallStarted(ctx, c)
}

// traceFromMeta records the W3C trace context of a downstream's _meta.
func (c *Call) traceFromMeta(meta map[string]any) {
	if c == nil || meta == nil {
		return
	}
	c.Traceparent, _ = meta["traceparent"].(string)
	c.Tracestate, _ = meta["tracestate"].(string)
}

// propagated returns meta with c.Propagate added (a copy; meta itself is
// the downstream's and is not changed).
func (c *Call) propagated(meta map[string]any) map[string]any {
	if c == nil || len(c.Propagate) == 0 {
		return meta
	}
	out := make(map[string]any, len(meta)+len(c.Propagate))
	for k, v := range meta {
		out[k] = v
	}
	for k, v := range c.Propagate {
		out[k] = v
	}
	return out
}

// wrap returns fn, recording each attempt on c.
func (c *Call) wrap(s *Supervisor, fn func(context.Context, *session) error) func(context.Context, *session) error {
	if c == nil {
		return fn
	}
	return func(ctx context.Context, sess *session) error {
		a := Attempt{Generation: sess.gen, Start: time.Now()}
		err := fn(ctx, sess)
		a.End = time.Now()
		a.Class = classify(ctx, sess, err)
		c.Attempts = append(c.Attempts, a)
		return err
	}
}

// end names the outcome of an operation do() returned err for and tells
// the Observer. toolError says the result carried isError: true; result
// is the result, if there is one.
func (s *Supervisor) end(ctx context.Context, c *Call, err error, toolError bool, result any) {
	if c == nil {
		return
	}
	c.Duration = time.Since(c.Start)
	c.Err = err
	c.Result = result
	c.Class = recovery.Classify(ctx, err)
	c.Outcome = s.outcome(c, err, toolError)
	s.opts.Observer.CallFinished(ctx, c)
}

func (s *Supervisor) outcome(c *Call, err error, toolError bool) Outcome {
	sent := len(c.Attempts)
	if err == nil {
		switch {
		case sent > 1:
			return OutcomeReplayed
		case toolError:
			return OutcomeToolError
		}
		return OutcomeOK
	}
	// A call mcpvisor refused (parked, reconnecting) never reached the
	// upstream, even when the error it carries is the JSON-RPC error the
	// server's last start failed with.
	var refused *recovery.Error
	var wire *jsonrpc.Error
	if !(errors.As(err, &refused) && refused.Class == recovery.Unavailable) && errors.As(err, &wire) {
		if sent > 1 {
			return OutcomeReplayed
		}
		return OutcomeProtocolError
	}
	switch c.Class {
	case recovery.Canceled:
		return OutcomeCanceled
	case recovery.Timeout:
		return OutcomeTimeout
	case recovery.Auth:
		return OutcomeAuthError
	case recovery.ProcessDied:
		if sent == 1 {
			return OutcomeCrashedNotReplayed
		}
		return OutcomeTransportError
	case recovery.Unavailable:
		parked := s.life.view().state == StateParked
		if parked {
			return OutcomeParked
		}
		return OutcomeUnavailable
	}
	return OutcomeTransportError
}

// notified reports a notification forwarded or dropped.
func (s *Supervisor) notified(kind string, forwarded bool) {
	if s.opts.Observer != nil {
		s.opts.Observer.Notification(s.name, kind, forwarded)
	}
}
