package upstream

import (
	"context"
	"errors"
	"testing"
	"time"
)

// transition is the one place a state changes: it says what it left,
// moves since only when the state changes, and wakes whoever waits on the
// view taken before it.
func TestLifecycleTransition(t *testing.T) {
	l := newLifecycle()
	before := l.view()
	if before.state != StateStarting {
		t.Fatalf("new lifecycle is %s, want starting", before.state)
	}
	var st Status
	next := time.Now().Add(time.Minute)
	if from := l.transition(StateReconnecting, next); from != StateStarting {
		t.Errorf("transition left %s, want starting", from)
	}
	select {
	case <-before.changed:
	default:
		t.Error("the view taken before the transition was not woken")
	}
	after := l.view()
	if after.state != StateReconnecting || !after.next.Equal(next) {
		t.Errorf("after the transition: %s next %v, want reconnecting next %v", after.state, after.next, next)
	}
	l.status(&st)
	moved := st.Since

	// The same state again: the waiters wake, since stays.
	if from := l.transition(StateReconnecting, time.Time{}); from != StateReconnecting {
		t.Errorf("transition left %s, want reconnecting", from)
	}
	select {
	case <-after.changed:
	default:
		t.Error("a transition to the same state did not wake the waiters")
	}
	l.status(&st)
	if !st.Since.Equal(moved) {
		t.Errorf("since moved from %v to %v without a state change", moved, st.Since)
	}
}

// A report about an older generation than one already reported is
// dropped: N callers failing on one session cause one reconnect.
func TestLifecycleReportFailed(t *testing.T) {
	l := newLifecycle()
	first, second := errors.New("gen 2 broke"), errors.New("gen 1 broke")
	l.reportFailed(2, first)
	l.reportFailed(1, second)
	if failed, why := l.failed(2); !failed || why != first {
		t.Errorf("failed(2) = %v, %v; want true, %v", failed, why, first)
	}
	if failed, _ := l.failed(3); failed {
		t.Error("failed(3) = true before generation 3 was reported")
	}
}

// The waiters of the next attempt are taken once; after the run loop has
// exited, a new waiter is answered at once.
func TestLifecycleOutcomeWaiters(t *testing.T) {
	l := newLifecycle()
	stopped := errors.New("stopped")
	w := l.awaitOutcome(func() error { return stopped })
	if !l.waitersPending() {
		t.Fatal("no waiter pending after awaitOutcome")
	}
	ws := l.takeWaiters()
	if len(ws) != 1 || l.waitersPending() {
		t.Fatalf("takeWaiters took %d, pending after: %v; want 1, false", len(ws), l.waitersPending())
	}
	answer(ws, nil)
	if err := <-w; err != nil {
		t.Errorf("the waiter got %v, want nil", err)
	}

	l.exit()
	select {
	case err := <-l.awaitOutcome(func() error { return stopped }):
		if err != stopped {
			t.Errorf("a waiter after exit got %v, want %v", err, stopped)
		}
	default:
		t.Error("a waiter after exit was not answered at once")
	}
	if l.waitersPending() {
		t.Error("a waiter after exit was registered")
	}
}

// waitSettled returns once the state leaves starting, and with ctx's error
// when ctx ends first.
func TestLifecycleWaitSettled(t *testing.T) {
	l := newLifecycle()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.waitSettled(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("waitSettled with a canceled ctx while starting: %v, want context.Canceled", err)
	}
	done := make(chan error, 1)
	go func() { done <- l.waitSettled(context.Background()) }()
	l.transition(StateReady, time.Time{})
	if err := <-done; err != nil {
		t.Errorf("waitSettled after ready: %v", err)
	}
}
