package upstream

import (
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcpvisor/mcpvisor/host/config"
)

/*
Design note: the budget (docs/design.md §4–§5).

budget is a server's retry policy: the breaker that fails calls fast while
the server keeps failing them, the reconnect backoff and the parked waits
that the retry budget (max_retries) leads to, and the early probes by which
calls may try a remote server sooner than the policy would by itself. What
a failure means (strike, reconnect, retry, park) is recovery.Decide's; the
budget only says how long and how often.

Lock story: budget has no lock of its own. The breaker has its own (a leaf:
Breaker.mu); the policy fields are set in newBudget and never change; the
early-probe fields are atomics that calls set (remoteProbeDue, probeRemote)
and the run loop swaps. The count of the retry budget spent belongs to the
run loop (a local of run, shown through lifecycle.failures).
*/

// budget is a server's breaker and retry policy; see the design note above.
type budget struct {
	breaker *Breaker
	logger  hclog.Logger
	// reconnect and cooldown are the server block's settings; base is the
	// backoff's base (Options.BackoffBase); remote is set for a server
	// reached by URL (HTTP or SSE), which calls may probe early.
	reconnect config.Reconnect
	cooldown  time.Duration
	base      time.Duration
	remote    bool

	// lastRemoteProbe is when a call last probed this parked remote server
	// early (UnixNano; see remoteProbeDue).
	lastRemoteProbe atomic.Int64
	// earlyRevive is set when such an early probe revives the server: its
	// failure re-parks without lengthening the parked wait, which counts
	// the server's own attempts, not the calls'.
	earlyRevive atomic.Bool
	// earlyRetry is set when a call or a tools/list cuts a remote server's
	// reconnect backoff short (probeRemote): a failure of that attempt is
	// not charged to the retry budget, which counts the server's own
	// attempts, so calls cannot park a server sooner than it would park
	// by itself.
	earlyRetry atomic.Bool
}

func newBudget(srv *config.Server, base time.Duration, now func() time.Time, logger hclog.Logger) *budget {
	return &budget{
		breaker:   NewBreaker(srv.Breaker.Threshold, srv.Breaker.Cooldown, now),
		logger:    logger,
		reconnect: srv.Reconnect,
		cooldown:  srv.Breaker.Cooldown,
		base:      base,
		remote:    srv.URL != "",
	}
}

// spent reports whether failures consecutive failures spend the retry
// budget: the server parks.
func (b *budget) spent(failures int) bool { return failures > b.reconnect.MaxRetries }

// backoff is the delay before retry number n (n ≥ 1 consecutive failures):
// immediate first, then base doubling, capped, with ±20% jitter.
func (b *budget) backoff(n int) time.Duration {
	if n <= 1 {
		return 0
	}
	d := b.base
	for i := 2; i < n && d < b.reconnect.MaxBackoff; i++ {
		d *= 2
	}
	if max := b.reconnect.MaxBackoff; max > 0 && d > max {
		d = max
	}
	j := 1 + backoffJitter*(2*rand.Float64()-1)
	return time.Duration(float64(d) * j)
}

// parkedDelay is how long the n-th consecutive park (n ≥ 1) waits before
// the server tries again by itself: the breaker's cooldown, doubling with
// each park, up to parked_retry. A short outage then heals within about a
// cooldown; a server that stays down is tried less and less often.
func (b *budget) parkedDelay(n int) time.Duration {
	d, max := b.cooldown, b.reconnect.ParkedRetry
	if d <= 0 || d > max {
		return max
	}
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// remoteProbeDue reports whether a call may probe this parked server now,
// before its breaker's cooldown has passed: a remote (HTTP or SSE) server
// at most once per remoteProbeEvery however many calls arrive, and a
// server that never got ready (neverUp: its tools were never listed, so
// calls are all that can bring it up) at most once per
// unlistedProbeEvery.
func (b *budget) remoteProbeDue(neverUp bool) bool {
	every := remoteProbeEvery
	switch {
	case b.remote:
	case neverUp:
		every = unlistedProbeEvery
	default:
		return false
	}
	now := time.Now().UnixNano()
	last := b.lastRemoteProbe.Load()
	return now-last >= int64(every) && b.lastRemoteProbe.CompareAndSwap(last, now)
}

// probeEvery is how often calls may probe the server early (0: never).
func (b *budget) probeEvery(neverUp bool) time.Duration {
	switch {
	case b.remote:
		return remoteProbeEvery
	case neverUp:
		return unlistedProbeEvery
	}
	return 0
}

// probeRemote makes a remote server (or one that never got ready:
// neverUp) that is parked, or waiting out a reconnect backoff until
// next, try now, if an early probe is due (remoteProbeDue), by signalling
// revive. It reports whether it did.
func (b *budget) probeRemote(state State, next time.Time, revive chan struct{}, neverUp bool) bool {
	switch {
	case state == StateParked:
		if !b.remoteProbeDue(neverUp) {
			return false
		}
		b.earlyRevive.Store(true)
	case state == StateReconnecting && time.Until(next) > 0:
		if !b.remoteProbeDue(neverUp) {
			return false
		}
		b.earlyRetry.Store(true)
	default:
		return false
	}
	signal(revive)
	return true
}

// strikeSession is strike for a failure of the session itself (its process
// died, its connection broke): one strike per session however many calls
// were in flight on it, so one crash never opens the breaker by itself.
func (b *budget) strikeSession(op string, sess *session) {
	if sess.struck.CompareAndSwap(false, true) {
		b.strike(op)
	}
}

// strike counts one failure against the breaker.
func (b *budget) strike(op string) {
	if b.breaker.Failure() {
		_, n, until := b.breaker.Snapshot()
		b.logger.Warn("circuit breaker opened", "op", op, "failures", n, "retry_at", until.Format(time.RFC3339))
	}
}
