package upstream

import (
	"sync"
	"sync/atomic"
)

/*
Design note: the run loop's inbox (docs/design.md §4).

Callers never change a supervisor's state; they tell the run loop, which
alone does (lifecycle.go). inbox holds the channels they tell it through.
Each signal channel has room for one signal, and a signal sent while one
is pending merges with it (signal): N callers reporting the same failure
wake the run loop once.

Lock story: inbox has no lock. Its channels are made in newInbox and never
replaced; stopCh is closed once (stopOnce), after stopReason is stored,
and done is closed by the run loop when it returns.
*/

// inbox is how callers signal the run loop; see the design note above.
type inbox struct {
	wake     chan struct{} // a caller reported a failed generation
	revive   chan struct{} // leave park / skip backoff now
	relist   chan struct{} // the upstream said a list changed
	healthy  chan struct{} // a call succeeded: the session is proven
	start    chan struct{} // a call found the server idle: start it (idle.go)
	suspect  chan struct{} // a call timed out unanswered, or one was answered after that (health.go)
	stopCh   chan struct{} // closed to stop the supervisor
	done     chan struct{} // closed when the run loop has returned
	stopOnce sync.Once
	// stopReason says why the supervisor stopped, for the errors of calls
	// that meet it stopping ("host shutting down", "restarted by reload").
	stopReason atomic.Pointer[string]
}

func newInbox() inbox {
	return inbox{
		wake:    make(chan struct{}, 1),
		revive:  make(chan struct{}, 1),
		relist:  make(chan struct{}, 1),
		healthy: make(chan struct{}, 1),
		start:   make(chan struct{}, 1),
		suspect: make(chan struct{}, 1),
		stopCh:  make(chan struct{}),
		done:    make(chan struct{}),
	}
}

// signal sends on a signal channel without blocking; a signal already
// pending absorbs it.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// stop asks the run loop to stop, for reason; only the first call counts.
func (in *inbox) stop(reason string) {
	in.stopOnce.Do(func() {
		in.stopReason.Store(&reason)
		close(in.stopCh)
	})
}

func (in *inbox) isStopping() bool {
	select {
	case <-in.stopCh:
		return true
	default:
		return false
	}
}

// stopped is the reason the supervisor stopped.
func (in *inbox) stopped() string {
	if r := in.stopReason.Load(); r != nil {
		return *r
	}
	return "stopped"
}
