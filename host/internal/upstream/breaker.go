package upstream

import (
	"sync"
	"time"
)

// BreakerState is a circuit breaker's position.
type BreakerState int

// The breaker's states (docs/design.md §5).
const (
	// BreakerClosed lets every call through.
	BreakerClosed BreakerState = iota
	// BreakerOpen fails calls at once until the cooldown has passed.
	BreakerOpen
	// BreakerHalfOpen lets exactly one probe call through.
	BreakerHalfOpen
)

// String returns "closed", "open" or "half-open".
func (b BreakerState) String() string {
	switch b {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return "unknown"
}

// Breaker is a per-server circuit breaker: Threshold consecutive failures
// open it for Cooldown; then one call is let through as a half-open probe.
// The probe's success closes it; its failure re-opens it with a fresh
// cooldown. A successful (re)connect closes it from any state.
//
// It has its own small lock so the call path never contends with the
// supervisor's state lock.
type Breaker struct {
	threshold int
	cooldown  time.Duration
	now       func() time.Time

	mu       sync.Mutex
	state    BreakerState
	failures int
	openedAt time.Time
	probing  bool // a half-open probe is in flight

	// onChange, if set, is told every transition (under mu).
	onChange func(from, to BreakerState)
}

// OnChange registers f to be told every state transition. f runs with the
// breaker's lock held: it must not block or call the breaker. Set it
// before the breaker is used.
func (b *Breaker) OnChange(f func(from, to BreakerState)) { b.onChange = f }

// report tells onChange about a transition from the state a method found.
// Deferred by every method that may change the state, with b.mu held.
func (b *Breaker) report(from BreakerState) {
	if b.onChange != nil && b.state != from {
		b.onChange(from, b.state)
	}
}

// NewBreaker returns a closed breaker. now may be nil (time.Now).
func NewBreaker(threshold int, cooldown time.Duration, now func() time.Time) *Breaker {
	if threshold < 1 {
		threshold = 1
	}
	if now == nil {
		now = time.Now
	}
	return &Breaker{threshold: threshold, cooldown: cooldown, now: now}
}

// Allow asks whether a call may proceed. probe is true when this call is the
// half-open probe. When the call may not proceed, retryAt says when the
// breaker will let a probe through.
func (b *Breaker) Allow() (ok, probe bool, retryAt time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.report(b.state)
	switch b.state {
	case BreakerClosed:
		return true, false, time.Time{}
	case BreakerOpen:
		until := b.openedAt.Add(b.cooldown)
		if b.now().Before(until) {
			return false, false, until
		}
		b.state = BreakerHalfOpen
		b.probing = true
		return true, true, time.Time{}
	default: // half-open
		if b.probing {
			// One probe at a time; others fail fast until it reports.
			return false, false, b.now().Add(time.Second)
		}
		b.probing = true
		return true, true, time.Time{}
	}
}

// Success records a call that reached the upstream and got an answer.
func (b *Breaker) Success() {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.report(b.state)
	b.state = BreakerClosed
	b.failures = 0
	b.probing = false
}

// Failure records a transport failure. It returns true when this failure
// opened (or re-opened) the breaker.
func (b *Breaker) Failure() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.report(b.state)
	b.failures++
	if b.state == BreakerHalfOpen || b.failures >= b.threshold {
		opened := b.state != BreakerOpen
		b.state = BreakerOpen
		b.openedAt = b.now()
		b.probing = false
		return opened
	}
	return false
}

// Release ends a probe that neither succeeded nor failed (the caller
// canceled, or the probe only triggered a revive) without closing the
// breaker; the cooldown starts again so revival has time to finish.
func (b *Breaker) Release(probe bool) {
	if !probe {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == BreakerHalfOpen {
		b.probing = false
	}
}

// Trip opens the breaker now, whatever its count (used when a server parks).
func (b *Breaker) Trip() {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.report(b.state)
	b.state = BreakerOpen
	b.openedAt = b.now()
	b.probing = false
}

// Reset closes the breaker (a successful connect proves the server is back).
func (b *Breaker) Reset() { b.Success() }

// Snapshot returns the state, consecutive failures and, when open, when the
// next probe is allowed.
func (b *Breaker) Snapshot() (BreakerState, int, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var until time.Time
	if b.state == BreakerOpen {
		until = b.openedAt.Add(b.cooldown)
	}
	return b.state, b.failures, until
}

// CooldownPassed reports whether an open breaker would let a probe through now.
func (b *Breaker) CooldownPassed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state != BreakerOpen || !b.now().Before(b.openedAt.Add(b.cooldown))
}
