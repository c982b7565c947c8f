package recovery_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// TestDecide is the recovery policy of docs/design.md §6 as a table: what
// every class means at an operation's first try (replayable or not, on a
// session whose process stopped reading or not) and at its retry.
func TestDecide(t *testing.T) {
	type D = recovery.Decision
	answered := D{Answered: true}
	cases := []struct {
		stage      recovery.Stage
		class      recovery.Class
		replayable bool
		stalled    bool
		want       D
	}{
		{recovery.FirstTry, recovery.None, false, false, answered},
		{recovery.FirstTry, recovery.Application, false, false, answered},
		{recovery.FirstTry, recovery.InsufficientScope, false, false, answered},
		{recovery.FirstTry, recovery.Canceled, true, false, D{ReleaseProbe: true}},
		{recovery.FirstTry, recovery.NeedsLogin, true, false, D{ReleaseProbe: true, Reconnect: true}},
		{recovery.FirstTry, recovery.Timeout, true, false, D{Strike: true}},
		{recovery.FirstTry, recovery.Timeout, true, true, D{Strike: true, Reconnect: true}},
		{recovery.FirstTry, recovery.Auth, false, false, D{Next: recovery.RetryOnce, Reconnect: true, SessionFailed: true}},
		{recovery.FirstTry, recovery.SessionGone, false, false, D{Next: recovery.RetryOnce, Reconnect: true, SessionFailed: true, Expired: true}},
		{recovery.FirstTry, recovery.ProcessDied, false, false, D{StrikeSession: true, Reconnect: true, SessionFailed: true, DiedInCall: true}},
		{recovery.FirstTry, recovery.ProcessDied, true, false, D{Next: recovery.RetryOnce, StrikeSession: true, Reconnect: true, SessionFailed: true, DiedInCall: true}},
		{recovery.FirstTry, recovery.Transport, false, false, D{StrikeSession: true, Reconnect: true, SessionFailed: true}},
		{recovery.FirstTry, recovery.Transport, true, false, D{Next: recovery.RetryOnce, StrikeSession: true, Reconnect: true, SessionFailed: true}},
		{recovery.FirstTry, recovery.Unavailable, true, false, D{Next: recovery.RetryOnce, StrikeSession: true, Reconnect: true, SessionFailed: true}},

		// A retry is never retried, except after a session expiry (the
		// request did not run), and releases no probe (the first try
		// settled it).
		{recovery.Retry, recovery.None, true, false, answered},
		{recovery.Retry, recovery.Application, true, false, answered},
		{recovery.Retry, recovery.InsufficientScope, true, false, answered},
		{recovery.Retry, recovery.Canceled, true, false, D{}},
		{recovery.Retry, recovery.NeedsLogin, true, false, D{Reconnect: true}},
		{recovery.Retry, recovery.Timeout, true, true, D{Strike: true}},
		{recovery.Retry, recovery.Auth, true, false, D{}},
		{recovery.Retry, recovery.SessionGone, true, false, D{Next: recovery.RetryOnce, Reconnect: true, Expired: true}},
		{recovery.Retry, recovery.SessionGone, false, false, D{Next: recovery.RetryOnce, Reconnect: true, Expired: true}},
		{recovery.Retry, recovery.ProcessDied, true, false, D{StrikeSession: true, Reconnect: true, DiedInCall: true}},
		{recovery.Retry, recovery.Transport, true, false, D{StrikeSession: true, Reconnect: true}},
	}
	for _, c := range cases {
		name := fmt.Sprintf("%s/%s/replayable=%t/stalled=%t", c.stage, c.class, c.replayable, c.stalled)
		got := recovery.Decide(recovery.Failure{Stage: c.stage, Class: c.class, Replayable: c.replayable, Stalled: c.stalled})
		if got != c.want {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, c.want)
		}
	}
}

// TestDecideUnanswered: a timeout that leaves the session unresponsive
// (no answer since the call was sent, unresponsive_after times in a row,
// or on a half-open probe) replaces the session at either stage, and is
// never retried: the call may have run.
func TestDecideUnanswered(t *testing.T) {
	want := recovery.Decision{Strike: true, Reconnect: true, Unresponsive: true}
	for _, stage := range []recovery.Stage{recovery.FirstTry, recovery.Retry} {
		for _, replayable := range []bool{false, true} {
			got := recovery.Decide(recovery.Failure{Stage: stage, Class: recovery.Timeout, Replayable: replayable, Unanswered: true})
			if got != want {
				t.Errorf("%s/replayable=%t: got %+v, want %+v", stage, replayable, got, want)
			}
		}
	}
}

// TestDecideNotSent: an operation made on a session already closing was
// never sent: it is sent again on a newer session, replayable or not,
// with no strike (the failure that closed the session was counted).
func TestDecideNotSent(t *testing.T) {
	for _, stage := range []recovery.Stage{recovery.FirstTry, recovery.Retry} {
		for _, replayable := range []bool{false, true} {
			got := recovery.Decide(recovery.Failure{Stage: stage, Class: recovery.Transport, Replayable: replayable, NotSent: true})
			want := recovery.Decision{Next: recovery.RetryOnce, SessionFailed: stage == recovery.FirstTry}
			if got != want {
				t.Errorf("%s/replayable=%t: got %+v, want %+v", stage, replayable, got, want)
			}
		}
	}
	err := fmt.Errorf("%w: calling %q: %v", mcp.ErrConnectionClosed, "tools/call", errors.New("client is closing"))
	if !recovery.NotSent(err) {
		t.Errorf("NotSent(%v) = false", err)
	}
	for _, err := range []error{nil, mcp.ErrConnectionClosed, errors.New("client is closing"),
		fmt.Errorf("%w: calling %q: %v", mcp.ErrConnectionClosed, "tools/call", errors.New("server is closing"))} {
		if recovery.NotSent(err) {
			t.Errorf("NotSent(%v) = true", err)
		}
	}
}

// TestDecideConnect: what a failed connect attempt means for the run loop.
func TestDecideConnect(t *testing.T) {
	cases := []struct {
		err  error
		want recovery.Next
	}{
		{fmt.Errorf("dial: %w", recovery.ErrNeedsLogin), recovery.AwaitLogin},
		{fmt.Errorf("initialize: %w", recovery.ErrInsufficientScope), recovery.AwaitLogin},
		{fmt.Errorf(`starting "nope": %w: no such file`, recovery.ErrCannotStart), recovery.Park},
		{fmt.Errorf("initialize: %w", recovery.ErrProcessExited), recovery.Backoff},
		{errors.New("connection refused"), recovery.Backoff},
		{fmt.Errorf("initialize: %w", recovery.ErrUnauthorized), recovery.Backoff},
	}
	for _, c := range cases {
		got := recovery.Decide(recovery.Failure{Stage: recovery.Connect, Err: c.err})
		if got != (recovery.Decision{Next: c.want}) {
			t.Errorf("Decide(connect, %v) = %+v, want {Next: %s}", c.err, got, c.want)
		}
	}
}
