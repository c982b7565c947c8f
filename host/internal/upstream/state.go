package upstream

import (
	"context"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/host/recovery"
)

/*
Design note: the lifecycle record (docs/design.md §4).

lifecycle is what the state machine knows: the state and since when, the
generation, the retry budget spent, the last error, the next attempt's
time, the generation a caller reported failed, and the waiters for the
next connect attempt's outcome.

Lock story: mu guards every field. The run loop (lifecycle.go) is the only
writer of the state (transition is the one place a state changes), the
generation, the budget spent and the next attempt time. Anyone may read a
snapshot (view, status), wait for the next change (changed), report a
failed generation (reportFailed) or register for an attempt's outcome
(awaitOutcome). mu is a leaf lock: nothing is called and no I/O is done
while it is held.
*/

// lifecycle is a supervisor's state-machine record; see the design note
// above for its lock story.
type lifecycle struct {
	mu          sync.Mutex
	state       State         // guarded by mu; written by the run loop only
	since       time.Time     // guarded by mu
	gen         uint64        // guarded by mu: the newest session's generation
	failures    int           // guarded by mu: the retry budget spent
	lastErr     error         // guarded by mu
	lastErrAt   time.Time     // guarded by mu
	nextAttempt time.Time     // guarded by mu
	failedGen   uint64        // guarded by mu: highest generation a caller reported failed
	failedErr   error         // guarded by mu: what that caller saw
	changed     chan struct{} // guarded by mu: closed and replaced on every change
	// waiters (guarded by mu) wait for the outcome of the next connect
	// attempt (Start, Revive); the run loop takes them when that attempt
	// starts. exited (guarded by mu) is set once the run loop has
	// returned: a waiter registered later is answered at once.
	waiters []chan error
	exited  bool
}

func newLifecycle() *lifecycle {
	return &lifecycle{state: StateStarting, since: time.Now(), changed: make(chan struct{})}
}

// view is a snapshot of what callers wait on: the state, when the next
// attempt is due, the last error, and a channel closed at the next change.
type view struct {
	state   State
	next    time.Time
	lastErr error
	changed <-chan struct{}
}

func (l *lifecycle) view() view {
	l.mu.Lock()
	defer l.mu.Unlock()
	return view{state: l.state, next: l.nextAttempt, lastErr: l.lastErr, changed: l.changed}
}

// transition is the one place a state changes: it records st (and when
// the next attempt is due) and wakes everyone waiting on a change. It
// returns the state it left.
func (l *lifecycle) transition(st State, next time.Time) (from State) {
	l.mu.Lock()
	defer l.mu.Unlock()
	from = l.state
	if from != st {
		l.since = time.Now()
	}
	l.state = st
	l.nextAttempt = next
	close(l.changed)
	l.changed = make(chan struct{})
	return from
}

// newGeneration numbers a new session.
func (l *lifecycle) newGeneration() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gen++
	return l.gen
}

// generation is the newest session's generation (0 before the first).
func (l *lifecycle) generation() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gen
}

func (l *lifecycle) recordError(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastErr = err
	l.lastErrAt = time.Now()
}

// clearError forgets the last error: the server is ready again.
func (l *lifecycle) clearError() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastErr, l.lastErrAt = nil, time.Time{}
}

func (l *lifecycle) lastError() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr
}

func (l *lifecycle) setFailures(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failures = n
}

// reportFailed records that a caller found generation gen broken; a report
// about an older generation than one already reported is dropped.
func (l *lifecycle) reportFailed(gen uint64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if gen > l.failedGen {
		l.failedGen = gen
		l.failedErr = err
	}
}

// failed reports whether a caller reported generation gen (or a later one)
// broken, and what it saw.
func (l *lifecycle) failed(gen uint64) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failedGen >= gen, l.failedErr
}

// awaitOutcome registers a waiter for the outcome of the next connect
// attempt; once the run loop has exited, the waiter gets stopped at once.
func (l *lifecycle) awaitOutcome(stopped func() error) <-chan error {
	ch := make(chan error, 1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.exited {
		ch <- stopped()
		return ch
	}
	l.waiters = append(l.waiters, ch)
	return ch
}

// takeWaiters removes and returns the waiters for the next attempt.
func (l *lifecycle) takeWaiters() []chan error {
	l.mu.Lock()
	defer l.mu.Unlock()
	ws := l.waiters
	l.waiters = nil
	return ws
}

// waitersPending reports whether someone waits for an attempt to start.
func (l *lifecycle) waitersPending() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.waiters) > 0
}

// exit marks the run loop as returned.
func (l *lifecycle) exit() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.exited = true
}

// status fills the lifecycle fields of st.
func (l *lifecycle) status(st *Status) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st.State, st.Since, st.Generation = l.state, l.since, l.gen
	st.Retries = max(l.failures-1, 0)
	st.NextAttempt, st.LastErrorAt = l.nextAttempt, l.lastErrAt
	if l.lastErr != nil {
		st.LastError = recovery.Redact(l.lastErr.Error())
	}
}

// waitSettled waits until the state is no longer starting, or ctx ends.
func (l *lifecycle) waitSettled(ctx context.Context) error {
	for {
		v := l.view()
		if v.state != StateStarting {
			return nil
		}
		select {
		case <-v.changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
