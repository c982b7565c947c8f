// Package audit writes mcpvisor's audit log: one JSON line per tools/call,
// resources/read and prompts/get forwarded upstream, with its outcome, and
// one per server event outside a call (a stop at the memory limit, Event).
//
// Refusals (policy, rate limit, session caps) and operator requests have
// lines of their own (RecordRefusal, RecordOperation).
//
// Arguments and results are recorded by size and a keyed digest
// (HMAC-SHA256, digest.go) only, unless the host block opts in with
// include_arguments; values that are written have secrets redacted first
// (redact.go), and so does every error message and resource URI.
// Rotation is left to the OS: Reopen (SIGHUP) starts writing to a fresh
// file at the same path, and so does the next record after the file was
// removed or renamed without a SIGHUP (with a warning), so that no record
// goes into a file nobody can see any more.
package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/identity"
	"github.com/mcpvisor/mcpvisor/host/internal/upstream"
)

// fileMode is the audit file's mode when mcpvisor creates it: calls may
// name private data even without their arguments.
const fileMode = 0o600

// Log is an open audit log. Its methods are safe for concurrent use.
type Log struct {
	path        string
	includeArgs bool
	replica     string
	digest      *digestKey
	logger      hclog.Logger

	mu sync.Mutex
	f  *os.File    // guarded by mu; nil once closed
	fi os.FileInfo // guarded by mu: f's identity, to tell whether path still names it
}

// Open opens (creating it 0600 if needed) the audit log at path for
// appending. With includeArgs, arguments and results are written too
// (secrets redacted). replica, when not empty, names the process in every
// line, so that the logs of several replicas can be merged. logger gets
// the log's warnings (a digest key that cannot be used, a file that was
// removed while open).
func Open(path string, includeArgs bool, replica string, logger hclog.Logger) (*Log, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	f, fi, err := openFile(path)
	if err != nil {
		return nil, err
	}
	digest, keyPath, err := loadDigestKey()
	if err != nil {
		digest = processDigestKey()
		logger.Warn("cannot use the audit digest key file; argument digests use a key of this process only and match only within it",
			"key_file", keyPath, "error", err)
	}
	return &Log{path: path, includeArgs: includeArgs, replica: replica, digest: digest, logger: logger, f: f, fi: fi}, nil
}

func openFile(path string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, fileMode)
	if err != nil {
		return nil, nil, fmt.Errorf("audit log: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("audit log: %w", err)
	}
	return f, fi, nil
}

// Path is the file the log writes to.
func (l *Log) Path() string { return l.path }

// Reopen closes the file and opens the path again, so that a log rotated
// by renaming continues in a new file.
func (l *Log) Reopen() error {
	f, fi, err := openFile(l.path)
	if err != nil {
		return err
	}
	l.mu.Lock()
	old := l.f
	l.f, l.fi = f, fi
	l.mu.Unlock()
	if old != nil {
		return old.Close()
	}
	return nil
}

// Close closes the file; later records are dropped.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// Line is one audit record, as written.
type Line struct {
	// Time is when the call started (UTC).
	Time time.Time `json:"time"`
	// Replica is the host block's replica: which process answered.
	Replica string `json:"replica,omitempty"`
	// Session is the downstream MCP session id ("" for stdio and library
	// calls); Client is the name the downstream client gave in initialize.
	Session string `json:"session,omitempty"`
	Client  string `json:"client,omitempty"`
	// ClientVersion is the version the downstream client gave with its
	// name.
	ClientVersion string `json:"client_version,omitempty"`
	// Subject is who made the call, as the HTTP ingress established it
	// (docs/auth.md): never the token itself; the local user for a
	// token-less request over the control socket of a host with auth.
	// Without policies, absent for stdio, library calls and an endpoint
	// without auth.
	Subject *identity.Subject `json:"subject,omitempty"`
	// Server is the server block; Method the MCP method.
	Server string `json:"server"`
	Method string `json:"method"`
	// Tool, Prompt or URI names what was called, by its upstream name.
	Tool   string `json:"tool,omitempty"`
	Prompt string `json:"prompt,omitempty"`
	URI    string `json:"uri,omitempty"`
	// DurationMS is how long the call took, in milliseconds.
	DurationMS float64 `json:"duration_ms"`
	// Outcome is one of upstream.Outcomes ("ok", "crashed_not_replayed", …).
	Outcome string `json:"outcome"`
	// Generation is the session generation that answered (0: never sent).
	Generation uint64 `json:"generation"`
	// Attempts is how often the call was sent upstream (2: retried).
	Attempts int `json:"attempts"`
	// ErrorKind is the recovery class of the error; Error its message,
	// redacted.
	ErrorKind string `json:"error_kind,omitempty"`
	Error     string `json:"error,omitempty"`
	// Arguments and Result describe the payloads.
	Arguments *Payload `json:"arguments,omitempty"`
	Result    *Payload `json:"result,omitempty"`
	// TraceID is the W3C trace id of the call's span, when traced.
	TraceID string `json:"trace_id,omitempty"`
	// Policy and Rule name the policy rule that refused a call (outcome
	// "denied" or "rate_limited", docs/auth.md); empty otherwise.
	Policy string `json:"policy,omitempty"`
	Rule   string `json:"rule,omitempty"`
}

// Refusal is a request the host refused before it reached a server
// (docs/auth.md): a call, completion or subscription a policy denies
// (outcome "denied"), a call past a rate limit ("rate_limited"), or a
// session past max_sessions or max_sessions_per_subject
// ("session_limit", method "initialize").
type Refusal struct {
	// Time is when it was refused.
	Time time.Time
	// Server is the server block the name routes to ("" when none does);
	// Method the MCP method; Name the tool or prompt's upstream name (the
	// exposed one when no server offers it) or the URI.
	Server, Method, Name string
	// Kind says what Name names when Method does not ("tool", "prompt"
	// or "resource": a completion's reference); "" goes by Method.
	Kind string
	// Downstream is the session the call came on, if known.
	Downstream upstream.Downstream
	// Outcome is "denied", "rate_limited" or "session_limit"; Policy and
	// Rule what decided;
	// Error the message the client got.
	Outcome, Policy, Rule, Error string
}

// RecordRefusal writes the line for a call refused by policy, made by
// who (nil: an anonymous caller).
func (l *Log) RecordRefusal(r Refusal, who *identity.Subject) error {
	line := Line{
		Time: r.Time.UTC(), Replica: l.replica, Server: r.Server, Method: r.Method,
		Outcome: r.Outcome, Subject: who, Policy: r.Policy, Rule: r.Rule,
		ErrorKind: r.Outcome, Error: RedactText(r.Error),
	}
	switch r.Kind {
	case "resource":
		line.URI = RedactText(r.Name)
	case "prompt":
		line.Prompt = r.Name
	default:
		line.setName(r.Method, r.Name)
	}
	line.setDownstream(r.Downstream)
	return l.write(line)
}

// setName puts name in the field its method names.
func (line *Line) setName(method, name string) {
	switch method {
	case "resources/read", "resources/subscribe", "resources/unsubscribe":
		// A URI can carry credentials (user:password@, ?token=).
		line.URI = RedactText(name)
	case "prompts/get":
		line.Prompt = name
	default:
		line.Tool = name
	}
}

// setDownstream names the downstream session and its client.
func (line *Line) setDownstream(d upstream.Downstream) {
	if ss, ok := d.(*mcp.ServerSession); ok && ss != nil {
		line.Session = ss.ID()
		if ip := ss.InitializeParams(); ip != nil && ip.ClientInfo != nil {
			line.Client = ip.ClientInfo.Name
			line.ClientVersion = ip.ClientInfo.Version
		}
	}
}

// Payload is a request's arguments or a call's result.
type Payload struct {
	// Bytes is the size of its JSON; HMAC the hex HMAC-SHA256 of that
	// JSON under the key DigestKey names (digest.go): equal digests under
	// one key are equal payloads, and a guess cannot be confirmed without
	// the key.
	Bytes     int    `json:"bytes"`
	HMAC      string `json:"hmac_sha256"`
	DigestKey string `json:"digest_key"`
	// Value is the JSON itself with secrets redacted, only with
	// include_arguments.
	Value json.RawMessage `json:"value,omitempty"`
}

// Record writes the line for a finished call made by who. traceID and who
// may be empty.
func (l *Log) Record(c *upstream.Call, traceID string, who *identity.Subject) error {
	line := Line{
		Time:       c.Start.UTC(),
		Replica:    l.replica,
		Server:     c.Server,
		Method:     c.Method,
		DurationMS: float64(c.Duration.Microseconds()) / 1000,
		Outcome:    string(c.Outcome),
		Generation: c.Generation(),
		Attempts:   len(c.Attempts),
		TraceID:    traceID,
		Subject:    who,
	}
	line.setName(c.Method, c.Name)
	line.setDownstream(c.Downstream)
	if c.Err != nil {
		line.ErrorKind = c.Class.String()
		line.Error = RedactText(c.Err.Error())
	}
	if len(c.Arguments) > 0 {
		line.Arguments = l.payload(c.Arguments)
	}
	if c.Result != nil {
		var b []byte
		switch r := c.Result.(type) {
		case json.RawMessage:
			b = r
		default:
			b, _ = json.Marshal(r)
		}
		if len(b) > 0 {
			line.Result = l.payload(b)
		}
	}
	return l.write(line)
}

// Event is an audit record of something that happened to a server
// outside any call: its process group stopped for going over its memory
// limit (docs/sandbox.md "Limits"). It has "event" where a call's record
// has "method".
type Event struct {
	// Time is when it happened (UTC).
	Time time.Time `json:"time"`
	// Replica is the host block's replica: which process saw it.
	Replica string `json:"replica,omitempty"`
	// Server is the server block.
	Server string `json:"server"`
	// Event names what happened, the reason of the restart that follows:
	// EventMemoryLimit, EventUnresponsive.
	Event string `json:"event"`
	// Pid is the process stopped (0: not known, or a remote server);
	// Generation the session it served (0: not known).
	Pid        int    `json:"pid,omitempty"`
	Generation uint64 `json:"generation,omitempty"`
	// Error is the reason, redacted ("memory limit 512MiB exceeded").
	Error string `json:"error,omitempty"`
}

// The events of a server.
const (
	// EventMemoryLimit: a server stopped for its memory limit.
	EventMemoryLimit = "memory_limit"
	// EventUnresponsive: a server replaced because it stopped answering
	// (docs/supervision.md, "Liveness").
	EventUnresponsive = "unresponsive"
)

// RecordEvent writes the line for event of server, with err as its reason
// (nil: none).
func (l *Log) RecordEvent(server, event string, err error) error {
	return l.RecordServerEvent(Event{Server: server, Event: event}, err)
}

// RecordServerEvent writes the line of e, with err as its reason (nil:
// none); its time is now.
func (l *Log) RecordServerEvent(e Event, err error) error {
	e.Time, e.Replica = time.Now().UTC(), l.replica
	if err != nil {
		e.Error = RedactText(err.Error())
	}
	return l.write(e)
}

// Operation is an audit record of a request to an operator endpoint
// (docs/auth.md, "The operator endpoints"): POST /control/revive,
// /control/restart and /control/reload — what `mcpvisor revive`,
// `restart`, `add` and `remove` send — carried out, failed, or refused to a
// caller who is not an operator. It has "operation" where a call's record
// has "method".
type Operation struct {
	// Time is when the request arrived (UTC).
	Time time.Time `json:"time"`
	// Replica is the host block's replica: which process served it.
	Replica string `json:"replica,omitempty"`
	// Subject is who asked (nil: an anonymous caller, on a host without
	// auth); never a credential.
	Subject *identity.Subject `json:"subject,omitempty"`
	// Operation is the endpoint's path: "/control/restart", ….
	Operation string `json:"operation"`
	// Server is the server block it names ("" for a reload).
	Server string `json:"server,omitempty"`
	// Outcome is "ok", "failed" (the action's error in Error) or "denied"
	// (the caller is not an operator; Rule says why).
	Outcome string `json:"outcome"`
	// Status is the HTTP status of the answer.
	Status int `json:"status"`
	// Rule is the decision on the caller: what made it an operator, or
	// why it is not one.
	Rule string `json:"rule,omitempty"`
	// Error is what failed, redacted.
	Error string `json:"error,omitempty"`
}

// The outcomes of an Operation.
const (
	OperationOK     = "ok"
	OperationFailed = "failed"
	OperationDenied = "denied"
)

// RecordOperation writes the line of an operator request.
func (l *Log) RecordOperation(op Operation) error {
	op.Time = op.Time.UTC()
	op.Replica = l.replica
	op.Error = RedactText(op.Error)
	return l.write(op)
}

// write appends v as one JSON line.
func (l *Log) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	if err := l.followPath(); err != nil {
		return err
	}
	if _, err := l.f.Write(b); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	return nil
}

// followPath reopens the path when it no longer names the open file: the
// file was deleted, or renamed (rotated) without a SIGHUP. Without this,
// every later record would go into a file no one can find. One stat per
// record: records are per call, and a stat is cheap beside the call.
// l.mu must be held.
func (l *Log) followPath() error {
	fi, err := os.Stat(l.path)
	switch {
	case err == nil && os.SameFile(fi, l.fi):
		return nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil // cannot tell (e.g. a directory made unreadable); keep writing
	}
	f, nfi, err := openFile(l.path)
	if err != nil {
		return err
	}
	l.f.Close()
	l.f, l.fi = f, nfi
	l.logger.Warn("the audit log file was removed or renamed while open; continuing in a new file at its path (send SIGHUP after rotating it)", "path", l.path)
	return nil
}

func (l *Log) payload(b []byte) *Payload {
	p := &Payload{Bytes: len(b), HMAC: l.digest.sum(b), DigestKey: l.digest.id}
	if l.includeArgs {
		p.Value = RedactJSON(b)
	}
	return p
}
