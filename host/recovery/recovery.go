// Package recovery is mcpvisor's error taxonomy: every error an upstream
// operation can produce is sorted into one Class, and the class alone decides
// what the supervisor does about it (docs/design.md §6): Decide says what,
// for an operation's first try, its retry, or a connect attempt. WireError
// is the one translation of a Go error into the JSON-RPC error a client
// gets.
//
// Classification is deliberately in one place. Scattered string matching is
// how clients end up reconnecting on "Tool failed" or never reconnecting on
// "Invalid or expired session"; here the order is fixed — an error mcpvisor
// made itself (*Error) keeps its class, then canceled, insufficient scope,
// needs login, auth, session gone, process died, timeout, application (the
// upstream's JSON-RPC error), auth again by the HTTP 401 status text, and
// transport for everything else — and the message allow-list for expired
// sessions (with the 401 text) is the only string matching there is.
package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Class is what kind of failure an error is, and so what to do about it.
type Class int

// The classes. Classify tests for them in the order of the package doc,
// not the order of these constants.
const (
	// None is a nil error.
	None Class = iota
	// Canceled means the caller gave up. Never reconnect, never retry.
	Canceled
	// Auth means the upstream refused our credentials (HTTP 401).
	Auth
	// SessionGone means the upstream no longer knows our session. The request
	// was rejected before it ran, so one retry on a new session is safe.
	SessionGone
	// ProcessDied means the upstream process or plugin exited while the
	// operation was in flight; its outcome is unknown.
	ProcessDied
	// Timeout means the per-call timeout expired.
	Timeout
	// Transport means the connection failed (refused, reset, closed, EOF).
	Transport
	// Application means the upstream answered with a JSON-RPC error. It is
	// passed through unchanged.
	Application
	// Unavailable means mcpvisor did not send the operation at all: the
	// server is parked, reconnecting, stopped, or its breaker is open.
	Unavailable
	// NeedsLogin means the server's OAuth tokens are gone or could not be
	// refreshed: only a person running `mcpvisor login NAME` can fix it, so
	// reconnecting would only burn the retry budget.
	NeedsLogin
	// InsufficientScope means the upstream refused this one operation
	// because the access token lacks a scope (HTTP 403 with error
	// "insufficient_scope"): the session is fine and other operations keep
	// working, but only a login granting the scope (step-up authorization)
	// lets this one through. Never reconnect, never strike.
	InsufficientScope
)

var classNames = [...]string{
	None:        "none",
	Canceled:    "canceled",
	Auth:        "auth",
	SessionGone: "session_gone",
	ProcessDied: "process_died",
	Timeout:     "timeout",
	Transport:   "transport",
	Application: "application",
	Unavailable: "unavailable",
	NeedsLogin:  "needs_login",

	InsufficientScope: "insufficient_scope",
}

// String returns the class's snake_case name, as used in logs and status.
func (c Class) String() string {
	if c >= 0 && int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", int(c))
}

// ErrProcessExited is wrapped by errors that report an upstream process (or
// plugin process) exiting.
var ErrProcessExited = errors.New("upstream process exited")

// ErrUnauthorized is wrapped by errors that report HTTP 401 from an upstream.
var ErrUnauthorized = errors.New("upstream rejected the credentials (HTTP 401)")

// ErrCannotStart is wrapped by errors that say a server can never start as
// configured — its command is missing or not executable — so retrying
// cannot help until the configuration or the machine changes.
var ErrCannotStart = errors.New("server cannot start")

// ErrNeedsLogin is wrapped by errors that report an upstream whose OAuth
// tokens are missing, revoked or expired beyond refresh.
var ErrNeedsLogin = errors.New("upstream authorization needs a new login")

// ErrInsufficientScope is wrapped by errors that report an upstream's HTTP
// 403 insufficient_scope challenge: a login asking for more scopes is
// needed. A call fails alone; a connect that meets it waits for the login
// like one that meets ErrNeedsLogin.
var ErrInsufficientScope = errors.New("upstream requires a scope the access token lacks (HTTP 403 insufficient_scope)")

// sessionGonePhrases is the allow-list of messages that mean the upstream
// forgot our session. Matching is case-insensitive. Anything else — "Tool
// failed", "Connection refused", "401 Unauthorized", "" — is not a session
// expiry, however it is phrased.
var sessionGonePhrases = []string{
	"invalid or expired session",
	"session expired",
	"expired session",
	"session not found",
	"unknown session",
}

// clientClosing is the text of the go-sdk's jsonrpc2.ErrClientClosing (an
// internal package, so not importable), which a call gets, wrapped in
// mcp.ErrConnectionClosed, when it is made on a connection already
// closing: the request was never written.
const clientClosing = "client is closing"

// NotSent reports whether err says the operation was never sent: its
// session was already closing when it was made (the go-sdk checks before
// writing). It did not run, so sending it again is safe.
func NotSent(err error) bool {
	return err != nil && errors.Is(err, mcp.ErrConnectionClosed) && strings.HasSuffix(err.Error(), clientClosing)
}

// http401 matches the status text the SDK's HTTP transports produce for a
// 401 response ("401 Unauthorized" inside a longer message).
var http401 = regexp.MustCompile(`(?i)\b401\b[^0-9]*unauthori[sz]ed`)

// IsSessionGone reports whether err says the upstream no longer knows our
// session. A canceled context is never a session expiry, even when the
// message matches.
func IsSessionGone(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, mcp.ErrSessionMissing) {
		return true
	}
	msg := strings.ToLower(err.Error())
	for _, p := range sessionGonePhrases {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// Classify sorts err into a Class. ctx is the caller's context: if it is
// done because the caller canceled, the error is Canceled whatever it says.
func Classify(ctx context.Context, err error) Class {
	if err == nil {
		return None
	}
	var re *Error
	if errors.As(err, &re) && re.Class != None {
		return re.Class
	}
	if errors.Is(err, context.Canceled) || (ctx != nil && errors.Is(ctx.Err(), context.Canceled)) {
		return Canceled
	}
	if errors.Is(err, ErrInsufficientScope) {
		return InsufficientScope
	}
	if errors.Is(err, ErrNeedsLogin) {
		return NeedsLogin
	}
	if errors.Is(err, ErrUnauthorized) {
		return Auth
	}
	if IsSessionGone(err) {
		return SessionGone
	}
	if errors.Is(err, ErrProcessExited) {
		return ProcessDied
	}
	if errors.Is(err, context.DeadlineExceeded) || (ctx != nil && errors.Is(ctx.Err(), context.DeadlineExceeded)) {
		return Timeout
	}
	var wire *jsonrpc.Error
	if errors.As(err, &wire) && !isRejectedByTransport(wire) {
		return Application
	}
	if http401.MatchString(err.Error()) {
		return Auth
	}
	return Transport
}

// rejectedByTransport is the code and message of the go-sdk's
// jsonrpc2.ErrRejected (an internal package, so not importable): the SDK's
// HTTP client wraps a request that never got an answer from the server in
// it — connection refused or reset, a 502/503/504 — so that one failed POST
// does not close the session. It is a *jsonrpc.Error, but no upstream sent
// it: the server was not reached, which is a transport failure, not the
// server's answer. An upstream's own JSON-RPC error in a non-2xx body is
// wrapped before it, so errors.As still finds that one first.
const (
	rejectedByTransportCode    = -32005
	rejectedByTransportMessage = "rejected by transport"
)

func isRejectedByTransport(e *jsonrpc.Error) bool {
	return e.Code == rejectedByTransportCode && e.Message == rejectedByTransportMessage
}

// Error is an error mcpvisor itself produced about an upstream operation.
// Its message says what failed, for which server, and what happens next;
// it never contains credentials.
type Error struct {
	// Server is the server block's name.
	Server string
	// Op is the MCP method, e.g. "tools/call".
	Op string
	// Class is what kind of failure this is.
	Class Class
	// Reason is a short human explanation ("circuit open after 3 failures").
	Reason string
	// RetryAt, when non-zero, is when the server will next be tried.
	RetryAt time.Time
	// NeedsReauth marks an auth failure that a refresh could not fix.
	NeedsReauth bool
	// Limit, when set, names the bound that refused the operation by the
	// setting that raises it ("max_message_size", "max_inflight_bytes";
	// docs/security.md). Clients find it in the error's data.
	Limit string
	// Err is the underlying error, if any.
	Err error
}

// Error formats the error for a user.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "server %q", e.Server)
	if e.Op != "" {
		fmt.Fprintf(&b, " (%s)", e.Op)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	if e.Err != nil {
		fmt.Fprintf(&b, ": %s", Redact(e.Err.Error()))
	}
	if !e.RetryAt.IsZero() {
		d := time.Until(e.RetryAt).Round(time.Second)
		if d < 0 {
			d = 0
		}
		fmt.Fprintf(&b, "; next attempt in %s (at %s)", d, e.RetryAt.UTC().Format(time.RFC3339))
	}
	if e.NeedsReauth {
		b.WriteString("; needs_reauth: update the server's credentials and reload")
	}
	return b.String()
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

var (
	bearerRe = regexp.MustCompile(`(?i)bearer\s+`)
	authRe   = regexp.MustCompile(`(?i)(authorization["']?\s*[:=]\s*["']?)[^"'\n;,}]+`)
	queryRe  = regexp.MustCompile(`(?i)([?&](?:access_token|token|key|api_key|apikey|secret|password)=)[^&\s"']+`)
)

// Redact removes credentials from text that may reach a user or a log:
// bearer tokens, Authorization values and token=/key= query values.
func Redact(s string) string {
	s = authRe.ReplaceAllString(s, "${1}[redacted]")
	s = redactBearer(s)
	s = queryRe.ReplaceAllString(s, "${1}[redacted]")
	return s
}

// redactBearer replaces the token after every "Bearer " with [redacted].
// Each occurrence is handled on its own, so text that merely looks like a
// token ("Bearer xBearer secret") cannot shield the real one behind it.
func redactBearer(s string) string {
	matches := bearerRe.FindAllStringIndex(s, -1)
	if len(matches) == 0 {
		return s
	}
	var b strings.Builder
	last := 0
	for _, m := range matches {
		start := m[1]
		if start < last {
			continue // inside a token already redacted
		}
		end := start
		for end < len(s) && isTokenByte(s[end]) {
			end++
		}
		if end == start {
			continue
		}
		// Stop at a later "Bearer " inside this run, which gets its own turn.
		for _, n := range matches {
			if n[0] > start && n[0] < end {
				end = n[0]
				break
			}
		}
		b.WriteString(s[last:start])
		b.WriteString("[redacted]")
		last = end
	}
	b.WriteString(s[last:])
	return b.String()
}

func isTokenByte(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' ||
		strings.IndexByte("._~+/=-", c) >= 0
}

// CodeUpstream is the JSON-RPC error code a downstream client gets when
// mcpvisor could not complete its call upstream (the server is parked,
// crashed during the call, timed out, …): a code in the JSON-RPC
// "server error" range, with the error's kind in its data. An upstream's
// own JSON-RPC errors keep their codes.
const CodeUpstream = -32010

// CodeDenied is the JSON-RPC error code of a call the host's policies do
// not allow its caller (docs/auth.md): data.kind "denied", data.policy
// and data.rule name the rule that decided. The call never reached a
// server.
const CodeDenied = -32011

// CodeRateLimited is the JSON-RPC error code of a call past a rate limit
// of the caller's policies (docs/auth.md): data.kind "rate_limited",
// data.policy and data.rule name the rate block, data.retry_after_ms and
// data.retry_at say when the call would be admitted. The call never
// reached a server.
const CodeRateLimited = -32012

// Kind names an Error for a downstream client (the "kind" of
// CodeUpstream's data): "parked", "unavailable", "crashed", "timeout",
// "unreachable", "auth", "needs_login", "insufficient_scope",
// "session_gone" or "canceled".
func (e *Error) Kind() string {
	switch e.Class {
	case ProcessDied:
		return "crashed"
	case Transport:
		return "unreachable"
	case Unavailable:
		if strings.Contains(e.Reason, "parked") {
			return "parked"
		}
		return "unavailable"
	}
	return e.Class.String()
}

// WireError is the JSON-RPC error a downstream client gets for err: an
// upstream's own JSON-RPC error unchanged; an Error as CodeUpstream with
// its kind, server and next attempt time in data; anything else as an
// internal error.
func WireError(err error) *jsonrpc.Error {
	var re *Error
	if errors.As(err, &re) {
		data := map[string]any{"kind": re.Kind(), "server": re.Server}
		if re.Limit != "" {
			data["limit"] = re.Limit
		}
		if !re.RetryAt.IsZero() {
			data["retry_at"] = re.RetryAt.UTC().Format(time.RFC3339)
		}
		raw, _ := json.Marshal(data)
		return &jsonrpc.Error{Code: CodeUpstream, Message: re.Error(), Data: raw}
	}
	var wire *jsonrpc.Error
	if errors.As(err, &wire) {
		return wire
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
}

// LimitOf returns the setting of the bound that refused err's operation,
// or "": the Limit of a *Error, or of the JSON-RPC error a transport put
// in the place of an oversized response (WireError's data), which is all
// a caller sees of a refusal made below the go-sdk.
func LimitOf(err error) string {
	var re *Error
	if errors.As(err, &re) {
		return re.Limit
	}
	var wire *jsonrpc.Error
	if errors.As(err, &wire) && wire.Code == CodeUpstream && len(wire.Data) > 0 {
		var data struct {
			Limit string `json:"limit"`
		}
		if json.Unmarshal(wire.Data, &data) == nil {
			return data.Limit
		}
	}
	return ""
}
