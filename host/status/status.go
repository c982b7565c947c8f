// Package status holds the types of a server's status, shared by the
// host (Host.Status, GET /status, the status handler) and the supervisor
// that produces it, so the two never drift: the supervisor fills the
// lifecycle fields, the host adds the catalog and call counts.
package status

import "time"

// State is a server's lifecycle state, as status reports it.
type State string

// The states; the strings are what GET /status and `mcpvisor status`
// show (docs/design.md §4).
const (
	Starting     State = "starting"
	Ready        State = "ready"
	Reconnecting State = "reconnecting"
	Parked       State = "parked"
	Stopped      State = "stopped"
	// NeedsLogin: an OAuth server whose tokens could not be refreshed.
	NeedsLogin State = "needs_login"
	// NeedsConfig: its block reads an environment variable that is not
	// set; it is not started.
	NeedsConfig State = "needs_config"
	// Idle: a stdio server stopped after idle_timeout without a call
	// (docs/design.md §18.3). Not a failure: its tools stay listed and
	// the next call starts it.
	Idle State = "idle"
	// Suspect: a ready server whose calls are timing out: a call reached
	// its timeout with no answer from the server since it was sent. It
	// is ready again at its next answer (a call, a ping), or replaced as
	// unresponsive (docs/supervision.md, "Liveness").
	Suspect State = "suspect"
	// Disabled: a block with enabled = false, validated and never started.
	Disabled State = "disabled"
)

// String returns the state's name as shown in status.
func (s State) String() string { return string(s) }

// Server is one server's status.
type Server struct {
	// Name is the server block's label.
	Name string `json:"name"`
	// Transport is "stdio", "streamable-http", "sse" or "plugin".
	Transport string `json:"transport"`
	// State is "starting", "ready", "reconnecting", "parked",
	// "needs_login" (an OAuth server whose tokens could not be refreshed),
	// "needs_config" (its block reads an environment variable that is not
	// set; it is not started), "idle" (stopped after idle_timeout without
	// a call; the next call starts it), "suspect" (ready, but its calls
	// are timing out with no answer) or "stopped"; "disabled" for a
	// block with enabled = false.
	State State `json:"state"`
	// Since is when the server entered State.
	Since time.Time `json:"since"`
	// Generation counts successful connects; each one is a new session.
	Generation uint64 `json:"generation"`
	// Retries is how many retries the current run of consecutive failures
	// has made (the first failure is not a retry); MaxRetries is the
	// budget: the server parks when that many retries have failed too.
	Retries    int `json:"retries"`
	MaxRetries int `json:"max_retries"`
	// Breaker is the circuit breaker's state: "closed", "open" or
	// "half-open"; BreakerFailures its count of consecutive failures.
	Breaker         string `json:"breaker"`
	BreakerFailures int    `json:"breaker_failures"`
	// BreakerRetryAt is when an open breaker lets the next probe through.
	BreakerRetryAt time.Time `json:"breaker_retry_at,omitzero"`
	// NextAttempt is when a reconnecting or parked server tries again.
	NextAttempt time.Time `json:"next_attempt,omitzero"`
	// LastError says why the last attempt or session failed (credentials
	// redacted); LastErrorAt is when.
	LastError string `json:"last_error,omitempty"`
	// Action says what a person must do for the server to recover, when
	// it cannot on its own ("run `mcpvisor login NAME`").
	Action      string    `json:"action,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	// Tools, Resources and Prompts count what the server offers
	// upstream (resources include templates).
	Tools int `json:"tools"`
	// ExposedTools counts the server's tools clients see: after the
	// block's filters and name collisions; 0 while it is parked.
	ExposedTools int `json:"exposed_tools"`
	Resources    int `json:"resources"`
	Prompts      int `json:"prompts"`
	// Pid is the server process's pid for stdio servers that are running.
	Pid int `json:"pid,omitempty"`
	// Sandbox summarizes the server's sandbox block, "landlock: read 3,
	// write 1; net none" (the block's own paths; the runtime defaults come
	// on top, docs/sandbox.md); empty without one.
	Sandbox string `json:"sandbox,omitempty"`
	// RSSBytes is the resident memory of a running stdio server's whole
	// process group (the server and everything it started), and
	// CPUSeconds their user and system CPU time (that of children they
	// have waited for included), measured when GET /status, Host.Status
	// or /metrics is read (not on state changes or probes). Absent
	// where they cannot be measured (not Linux, not a stdio server, not
	// running).
	RSSBytes   int64   `json:"rss_bytes,omitempty"`
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
	// MemoryLimit is the server's limits.memory in bytes (0: none): a
	// server whose group goes over it is stopped and restarted with the
	// reason "memory limit 512MiB exceeded" (docs/sandbox.md).
	MemoryLimit int64 `json:"memory_limit_bytes,omitempty"`
	// CatalogTruncated is set when the server's last listing stopped at a
	// bound of its catalog block (or at a repeated cursor) before the
	// upstream's end: only the entries up to the bound are exposed.
	// CatalogTruncatedReason says which bound, per list operation.
	CatalogTruncated       bool   `json:"catalog_truncated"`
	CatalogTruncatedReason string `json:"catalog_truncated_reason,omitempty"`

	// Calls counts the tools/call, resources/read and prompts/get
	// operations forwarded to the server since the host started; Errors
	// those answered with an error rather than a result (a tool's own
	// isError result is a result). LastCallError is the last such error,
	// redacted, and LastCallErrorAt when it happened. All zero when
	// metrics are off (WithMetrics(false)).
	Calls           uint64    `json:"calls"`
	Errors          uint64    `json:"errors"`
	LastCallError   string    `json:"last_call_error,omitempty"`
	LastCallErrorAt time.Time `json:"last_call_error_at,omitzero"`
}

// Client is one connected downstream client, as the operator's status
// (GET /status, `mcpvisor status`) and the console list it
// (docs/operations.md, "Connected clients"): what it said it is in
// initialize, its session and since when.
type Client struct {
	// Name and Version are the clientInfo of the client's initialize
	// ("claude-code", "1.0.0"); empty when it sent none.
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	// Transport is "streamable-http" or "stdio".
	Transport string `json:"transport"`
	// Session is the start of the HTTP session id (enough to tell two
	// sessions apart, not enough to use one); empty on stdio.
	Session string `json:"session,omitempty"`
	// Since is when the session began.
	Since time.Time `json:"since"`
	// Protocol is the protocol version the client initialized with.
	Protocol string `json:"protocol,omitempty"`
}
