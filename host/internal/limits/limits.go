// Package limits names the bounds an untrusted peer can run into
// (docs/security.md, docs/design.md §17) and counts how often each one
// refused, cut or evicted something, for the mcpvisor_limit_hits_total
// metric. Each bound is enforced where its bytes or requests arrive
// (ingress, gateway, supervisor, transport); they all count into the one
// Hits value their Host made, so two Hosts in one process count apart.
package limits

import "sync/atomic"

// Name is a limit, named by the setting that raises it.
type Name string

// The limits whose hits are counted. Each is the setting an operator would
// raise, so a dashboard points straight at the knob.
const (
	// MaxMessageSize: an upstream message (JSON body, event, stdio line)
	// over the server's max_message_size failed its call.
	MaxMessageSize Name = "max_message_size"
	// MaxInflightBytes: a call's response found no room in the host's
	// max_inflight_bytes and failed as busy.
	MaxInflightBytes Name = "max_inflight_bytes"
	// MaxPendingRequests: a server's sampling, elicitation or roots request
	// past its max_pending_requests was declined.
	MaxPendingRequests Name = "max_pending_requests"
	// BodyTimeout: a downstream request body did not arrive within
	// body_timeout (408).
	BodyTimeout Name = "body_timeout"
	// MaxBodyBytesInflight: a downstream request body found no room in
	// max_body_bytes_inflight (503), or was larger than a request may be
	// (413).
	MaxBodyBytesInflight Name = "max_body_bytes_inflight"
	// MaxInflight: a stateless request past max_inflight got 503.
	MaxInflight Name = "max_inflight"
	// MaxInflightPerSession: a request of a session-based HTTP session
	// past max_inflight_per_session got 503.
	MaxInflightPerSession Name = "max_inflight_per_session"
	// WriteTimeout: a downstream HTTP client did not read its answer
	// within write_timeout; the answer and its stream were dropped.
	WriteTimeout Name = "write_timeout"
	// MaxSessions: a session was evicted to make room at max_sessions, or
	// a newcomer got 503 because every session was busy.
	MaxSessions Name = "max_sessions"
	// CallsPerMinute: a call past a rate block of the caller's policies
	// was refused with a time to retry (docs/auth.md).
	CallsPerMinute Name = "calls_per_minute"
	// MaxSubscriptions: a downstream resources/subscribe past the bound of
	// one session (256) or of the host (10,000 distinct URIs) was refused.
	// Both bounds are fixed; the name follows the others' style.
	MaxSubscriptions Name = "max_subscriptions"
	// StderrBytes: a stdio server's stderr line was not logged: the
	// server's own bound (100 lines and 32 KiB a second) or every
	// server's together (128 KiB a second) was spent. Fixed bounds, like
	// max_subscriptions; the line still reaches the server's log tail.
	StderrBytes Name = "stderr_bytes"
)

// All is every Name, in the order metrics list them.
var All = []Name{MaxMessageSize, MaxInflightBytes, MaxPendingRequests, BodyTimeout, MaxBodyBytesInflight, MaxInflight, MaxInflightPerSession, WriteTimeout, MaxSessions, CallsPerMinute, MaxSubscriptions, StderrBytes}

// Hits counts the hits of every limit. It is safe for concurrent use; a
// nil *Hits counts nothing, so code built without a Host (tests, embedders
// of one package) needs no stand-in.
type Hits struct {
	counts map[Name]*atomic.Uint64 // fixed at New; only the counters change
}

// New returns a Hits with every limit at zero.
func New() *Hits {
	h := &Hits{counts: make(map[Name]*atomic.Uint64, len(All))}
	for _, n := range All {
		h.counts[n] = new(atomic.Uint64)
	}
	return h
}

// Hit counts one hit of limit n. An unknown name is ignored rather than
// creating a series no dashboard expects.
func (h *Hits) Hit(n Name) {
	if h == nil {
		return
	}
	if c := h.counts[n]; c != nil {
		c.Add(1)
	}
}

// Count returns the hits of limit n so far.
func (h *Hits) Count(n Name) uint64 {
	if h == nil {
		return 0
	}
	if c := h.counts[n]; c != nil {
		return c.Load()
	}
	return 0
}
