package recovery

import "errors"

// Stage is where a failure happened: an operation's first try, its one
// retry, or one of the supervisor's connect attempts.
type Stage int

// The stages.
const (
	// FirstTry is an operation's first try on a session.
	FirstTry Stage = iota
	// Retry is an operation's one retry, on a session newer than the one
	// its first try failed on.
	Retry
	// Connect is one of the supervisor's connect attempts (dial,
	// initialize, list).
	Connect
)

var stageNames = [...]string{FirstTry: "first_try", Retry: "retry", Connect: "connect"}

// String returns the stage's snake_case name.
func (s Stage) String() string {
	if s >= 0 && int(s) < len(stageNames) {
		return stageNames[s]
	}
	return "stage(?)"
}

// Next is what follows a failure.
type Next int

// What can follow a failure.
const (
	// Return ends the operation with its result or error: nothing more is
	// tried for it.
	Return Next = iota
	// RetryOnce sends the operation once more, on a new session.
	RetryOnce
	// Backoff counts a failed connect attempt against the retry budget:
	// the supervisor tries again after the backoff delay, or parks once
	// the budget is spent (docs/design.md §4).
	Backoff
	// Park parks the server now: no retry can change the outcome (its
	// command is missing or not executable).
	Park
	// AwaitLogin withdraws the server's tools and waits for `mcpvisor
	// login` (needs_login).
	AwaitLogin
)

var nextNames = [...]string{Return: "return", RetryOnce: "retry_once", Backoff: "backoff", Park: "park", AwaitLogin: "await_login"}

// String returns the name of what follows.
func (n Next) String() string {
	if n >= 0 && int(n) < len(nextNames) {
		return nextNames[n]
	}
	return "next(?)"
}

// Failure is what the supervisor knows about an outcome it must decide on.
type Failure struct {
	// Stage is where it happened.
	Stage Stage
	// Class is the outcome's class (Classify, with a broken connection to
	// a process-backed server refined to ProcessDied). Unused for Connect.
	Class Class
	// Replayable is set for an operation that is safe to send twice
	// (reads, lists, tools that declared readOnlyHint).
	Replayable bool
	// Stalled is set when the session's process stopped reading its
	// input: a request may be half written into its pipe.
	Stalled bool
	// Err is a connect attempt's error (Stage Connect).
	Err error
	// Unanswered is set for a timeout that makes the session unresponsive:
	// the server's own call timeout passed with no answer on the session
	// since the call was sent, for the reconnect.unresponsive_after-th
	// time in a row, or on a half-open probe. The executor counts.
	Unanswered bool
	// NotSent is set when the operation was never sent: its session was
	// already closing (NotSent). It did not run, so it is sent again on a
	// newer session, whatever it is.
	NotSent bool
}

// Decision is what a failure means for the supervisor: what follows, and
// what it tells the breaker, the session and the run loop first. It is the
// one place where the recovery policy of docs/design.md §6 is written down;
// the supervisor's call path (do) and its run loop (run) only carry it out.
type Decision struct {
	// Next is what follows.
	Next Next
	// Answered means the upstream answered (a result, its own error, or a
	// refusal for want of a scope): the breaker closes and the session is
	// proven healthy.
	Answered bool
	// ReleaseProbe gives a half-open probe the operation held back to the
	// breaker without a verdict (the caller canceled, or no retry can help).
	ReleaseProbe bool
	// Strike counts one failure of this operation against the breaker.
	Strike bool
	// StrikeSession counts the session's own failure against the breaker,
	// once per session however many operations were in flight on it, so
	// one crash never opens the breaker by itself.
	StrikeSession bool
	// Reconnect reports the session broken: the run loop replaces it.
	Reconnect bool
	// SessionFailed means the session itself failed under the operation
	// (gone, dead or broken): when the supervisor is stopping, that is
	// why, and the caller is told it stopped.
	SessionFailed bool
	// DiedInCall means the process died with this operation in flight:
	// possibly the operation's doing, so the death is not charged to the
	// retry budget that parks the server for every client.
	DiedInCall bool
	// Unresponsive means the session no longer answers (a deadlocked or
	// stopped process, a hung remote server): it is replaced, with the
	// restart reason "unresponsive". The call is not replayed: it may
	// have run.
	Unresponsive bool
	// Expired means the server answered that it no longer knows the
	// session (it expired it): the server is reachable, so the breaker
	// is not struck and the session's end does not spend the retry
	// budget; the request did not run, so it is retried on the newest
	// session, again if another caller's expiry ended that one too.
	Expired bool
}

// Decide says what a failure means (docs/design.md §6):
//
//   - none, application: the upstream answered; return its answer.
//   - canceled: return at once; never reconnect or retry.
//   - insufficient_scope: the upstream answered on a healthy session;
//     return the step-up error.
//   - needs_login: reconnect (the run loop finds the same and waits for a
//     login); no strike, since the server is reachable.
//   - not sent (the session was already closing): retry on a newer
//     session, replayable or not, since the operation did not run.
//   - timeout: strike; replace a session whose process stopped reading,
//     and one that no longer answers (Unanswered: unresponsive). Never
//     retried: the call may have run.
//   - auth: the server rejected the request before running it: reconnect
//     and retry once. Auth again after that is given up.
//   - session_gone: the server expired the session and rejected the
//     request before running it: reconnect and retry, at the retry stage
//     too (the new session may have been ended by another caller's
//     expiry; the executor bounds the retries by the call's deadline).
//     Not a failure of the server: no strike, no budget spent.
//   - process_died, transport: strike the session, reconnect, and retry
//     once only when the operation is replayable.
//
// A retry is never retried, except after a session_gone. At the Connect stage Err decides: a missing
// login or scope awaits a login, a command that cannot start parks, and
// anything else backs off against the retry budget.
func Decide(f Failure) Decision {
	if f.Stage == Connect {
		switch {
		case errors.Is(f.Err, ErrNeedsLogin) || errors.Is(f.Err, ErrInsufficientScope):
			// A connect refused for want of a scope cannot succeed until
			// a login grants it, like one without valid tokens.
			return Decision{Next: AwaitLogin}
		case errors.Is(f.Err, ErrCannotStart):
			// Only what no retry can change parks at once. A process that
			// exits before initialize, even the same way every time, may
			// be waiting for something that is ready a moment later: it
			// backs off.
			return Decision{Next: Park}
		}
		return Decision{Next: Backoff}
	}
	first := f.Stage == FirstTry
	if f.NotSent && f.Class != Canceled {
		// The session was closing under the operation (another caller's
		// failure ended it): nothing was sent, nothing to strike or
		// report; the run loop is replacing the session already.
		return Decision{Next: RetryOnce, SessionFailed: first}
	}
	switch f.Class {
	case None, Application, InsufficientScope:
		return Decision{Answered: true}
	case Canceled:
		return Decision{ReleaseProbe: first}
	case NeedsLogin:
		return Decision{ReleaseProbe: first, Reconnect: true}
	case Timeout:
		if f.Unanswered {
			return Decision{Strike: true, Reconnect: true, Unresponsive: true}
		}
		return Decision{Strike: true, Reconnect: first && f.Stalled}
	case Auth:
		if !first {
			return Decision{}
		}
		return Decision{Next: RetryOnce, Reconnect: true, SessionFailed: true}
	case SessionGone:
		return Decision{Next: RetryOnce, Reconnect: true, SessionFailed: first, Expired: true}
	}
	// process_died, transport, and anything else that failed the session.
	d := Decision{StrikeSession: true, Reconnect: true, SessionFailed: first, DiedInCall: f.Class == ProcessDied}
	if first && f.Replayable {
		d.Next = RetryOnce
	}
	return d
}
