package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

/*
Design note: the calls in flight (docs/design.md §3, §4).

calls is the supervisor's record of what is in flight: how many operations
run through do() (Drain waits for none), which of them were made for a
downstream client (what the upstream sends back during a call is routed
by it: downstream.go), and how many of the upstream's requests to clients
are waiting (max_pending_requests). How an operation runs (breaker gate,
waiting for a session, retry) is do()'s, in exec.go, and what a failure
means is recovery.Decide's.

Lock story: mu guards the in-flight table (seq, flights, byToken). It is a
leaf lock, held only to add, remove or look up an entry: by a call
starting and ending (track's release) and by the SDK's handlers routing a
notification or a request of the upstream's (byProgress, latest). n,
requestsToClients and declined are atomics; maxPending never changes.
*/

// calls is the supervisor's record of the operations in flight; see the
// design note above for its lock story.
type calls struct {
	// n counts the operations in flight through do(), for Drain.
	n atomic.Int64

	mu      sync.Mutex
	seq     uint64               // guarded by mu
	flights map[uint64]*inflight // guarded by mu
	byToken map[string]*inflight // guarded by mu

	// requestsToClients counts the upstream's requests to downstream
	// clients (sampling, elicitation, roots) being handled, for
	// max_pending_requests (downstream.go).
	requestsToClients atomic.Int64
	maxPending        int64         // max_pending_requests
	declined          atomic.Uint64 // requests declined for max_pending_requests
}

func newCalls(maxPending int) *calls {
	return &calls{flights: map[uint64]*inflight{}, byToken: map[string]*inflight{}, maxPending: int64(maxPending)}
}

// begin counts an operation in flight until its end is called.
func (c *calls) begin() (end func()) {
	c.n.Add(1)
	return func() { c.n.Add(-1) }
}

// drain waits until no operation is in flight, or ctx ends.
func (c *calls) drain(ctx context.Context) error {
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for c.n.Load() > 0 {
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// byProgress returns the in-flight call whose upstream progress token is
// tok, if any.
func (c *calls) byProgress(tok any) *inflight {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byToken[tokenKey(tok)]
}

// track records an in-flight call made with ctx for the downstream client
// d (nil: none, nothing to record). It returns the progress token to send
// upstream (tok itself unless another in-flight call uses it; rewritten
// says so) and a release func.
func (s *Supervisor) track(ctx context.Context, d Downstream, tok any) (upTok any, rewritten bool, release func()) {
	return s.calls.track(ctx, d, tok, s.cfg.Timeout, s.name)
}

// track is Supervisor.track for a server named server whose calls time out
// after timeout (zero: never).
func (c *calls) track(ctx context.Context, d Downstream, tok any, timeout time.Duration, server string) (upTok any, rewritten bool, release func()) {
	if d == nil {
		return tok, false, func() {}
	}
	f := &inflight{d: d, ctx: ctx, token: tok}
	if timeout > 0 {
		f.deadline = time.Now().Add(timeout)
	}
	c.mu.Lock()
	c.seq++
	id := c.seq
	upTok = tok
	if tok != nil {
		key := tokenKey(tok)
		if _, taken := c.byToken[key]; taken {
			upTok = fmt.Sprintf("mcpvisor-%s-%d", server, id)
			rewritten = true
			key = tokenKey(upTok)
		}
		f.upKey = key
		c.byToken[key] = f
	}
	c.flights[id] = f
	c.mu.Unlock()
	return upTok, rewritten, func() {
		c.mu.Lock()
		delete(c.flights, id)
		if f.upKey != "" {
			delete(c.byToken, f.upKey)
		}
		c.mu.Unlock()
	}
}

// tokenKey normalises a progress token (string or number) for lookup.
func tokenKey(tok any) string {
	b, err := json.Marshal(tok)
	if err != nil {
		return fmt.Sprint(tok)
	}
	return string(b)
}

// latest returns the most recently started in-flight call, if any.
func (c *calls) latest() *inflight {
	c.mu.Lock()
	defer c.mu.Unlock()
	var best uint64
	var f *inflight
	for id, fl := range c.flights {
		if id > best {
			best, f = id, fl
		}
	}
	return f
}
