package host

/*
The console's triage view and actions (docs/operations.md, "Web console").

The page leads with what needs a person: a summary bar (ready, problem,
parked), the servers with a problem first (needs_config, needs_login,
parked, reconnecting), each with its reason — only while it is not ready:
a revived server's old error is history, not a reason — the time of its
next attempt, and its recent log lines. Tools are collapsed per server.

Two actions besides revive and restart, operators only and behind the same
CSRF rule as those (consolePath: a console cookie counts only on a POST
whose Origin is the host's own):

  - POST /ui/call calls a tool with arguments the page built from the
    tool's input schema, through Host.CallTool (the one path every call
    takes: supervision, recovery, policies, audit).
  - POST /ui/secret stores a value a needs_config server lacks in the
    user's secret store (host/internal/secrets, what `mcpvisor secret set`
    writes) and reloads the configuration file, as the CLI does after
    `secret set`: the server starts without a restart of the host. Only a
    name some needs_config server is missing is accepted: the console is
    no general editor of the store. The value is never logged, echoed or
    kept in the page.
*/

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/mcpvisor/mcpvisor/host/internal/secrets"
	"github.com/mcpvisor/mcpvisor/host/internal/statedir"
)

const (
	// consoleLogLines bounds the log lines shown per server.
	consoleLogLines = 20
	// maxConsoleCallBody bounds a console call's request (the tool's
	// name and its arguments).
	maxConsoleCallBody = 1 << 20
	// maxConsoleCallResult bounds the result the console shows of a call.
	maxConsoleCallResult = 64 << 10
)

// consoleLogSource returns the most recent log lines of a server, oldest
// first, at most n; the console shows them per server. The host's
// default is recentLogs.
type consoleLogSource func(server string, n int) []string

// consoleSummary is the summary bar's counts.
type consoleSummary struct {
	Ready, Problem, Parked, Other int
}

// problemRank orders the rows: what needs a person first, then what is
// on its way, then what works, then what is off.
func problemRank(s State) int {
	switch s {
	case StateNeedsConfig, StateNeedsLogin:
		return 0
	case StateParked:
		return 1
	case StateReconnecting:
		return 2
	case StateStarting:
		return 3
	case StateReady, StateIdle:
		return 4
	}
	return 5 // stopped, disabled
}

// isProblem reports whether a server in state s needs attention (the
// summary's "problem"; parked is counted apart).
func isProblem(s State) bool {
	return s == StateNeedsConfig || s == StateNeedsLogin || s == StateReconnecting
}

// consoleField is one input of a tool's call form, from a property of its
// input schema.
type consoleField struct {
	Name        string
	Type        string // string, number, integer, boolean, or json (objects, arrays, anything else)
	Description string
	Required    bool
	Enum        []string
}

// toolFields reads a tool's input schema into form fields, properties in
// name order. A schema it cannot read gives no fields: the form then
// takes the arguments as one JSON object.
func toolFields(schema any) (fields []consoleField, raw bool) {
	b, err := json.Marshal(schema)
	if err != nil {
		return nil, true
	}
	var s struct {
		Properties map[string]struct {
			Type        any    `json:"type"`
			Description string `json:"description"`
			Enum        []any  `json:"enum"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if json.Unmarshal(b, &s) != nil {
		return nil, true
	}
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := s.Properties[n]
		f := consoleField{Name: n, Description: p.Description, Required: slices.Contains(s.Required, n), Type: "json"}
		if t, ok := p.Type.(string); ok {
			switch t {
			case "string", "number", "integer", "boolean":
				f.Type = t
			}
		}
		for _, e := range p.Enum {
			if v, ok := e.(string); ok && f.Type == "string" {
				f.Enum = append(f.Enum, v)
			}
		}
		fields = append(fields, f)
	}
	return fields, false
}

// recentLogs is the default consoleLogSource: the server's kept stderr
// (the lines `mcpvisor logs` shows), else its last error, the one line
// the host keeps for a server without stderr (HTTP, plugins).
func (h *Host) recentLogs(server string, n int) []string {
	if n <= 0 {
		return nil
	}
	if lines, err := h.Logs(server, n); err == nil && len(lines) > 0 {
		out := make([]string, len(lines))
		for i, l := range lines {
			out[i] = l.Time.UTC().Format(time.TimeOnly) + " " + l.Text
		}
		return out
	}
	for _, st := range h.Status() {
		if st.Name == server && st.LastError != "" {
			return []string{st.LastErrorAt.UTC().Format(time.TimeOnly) + " " + st.LastError}
		}
	}
	return nil
}

// missingSecrets returns, by server, the variables the needs_config
// servers lack.
func (h *Host) missingSecrets() map[string][]string {
	out := map[string][]string{}
	for _, s := range h.servers.Load().cfg.Servers {
		if len(s.MissingEnv) > 0 {
			out[s.Name] = s.MissingEnv
		}
	}
	return out
}

// consoleAnswer is what the console's POSTs answer.
type consoleAnswer struct {
	// Error says what failed; empty on success.
	Error string `json:"error,omitempty"`
	// Result is a call's result (JSON, cut at maxConsoleCallResult) and
	// IsError the tool's own error flag.
	Result  string `json:"result,omitempty"`
	IsError bool   `json:"is_error,omitempty"`
	// Stored and Restarted answer a secret: what was stored and the
	// servers the reload started or restarted.
	Stored    string   `json:"stored,omitempty"`
	Restarted []string `json:"restarted,omitempty"`
}

func writeConsoleAnswer(w http.ResponseWriter, status int, a consoleAnswer) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(a)
}

// serveConsoleCall is POST /ui/call: {"tool": NAME, "arguments": {…}}.
func (h *Host) serveConsoleCall(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Tool      string          `json:"tool"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, maxConsoleCallBody)).Decode(&req); err != nil || req.Tool == "" {
		writeConsoleAnswer(w, http.StatusBadRequest, consoleAnswer{Error: "Bad Request: want {\"tool\": NAME, \"arguments\": {…}}"})
		return
	}
	if len(req.Arguments) == 0 || string(req.Arguments) == "null" {
		req.Arguments = json.RawMessage("{}")
	}
	ctx, cancel := context.WithTimeout(r.Context(), controlTimeout)
	defer cancel()
	res, err := h.CallTool(ctx, req.Tool, req.Arguments)
	if err != nil {
		writeConsoleAnswer(w, http.StatusOK, consoleAnswer{Error: err.Error()})
		return
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	text := string(b)
	if len(text) > maxConsoleCallResult {
		text = text[:maxConsoleCallResult] + fmt.Sprintf("\n… (cut at %d KiB; `mcpvisor call` prints all of it)", maxConsoleCallResult>>10)
	}
	writeConsoleAnswer(w, http.StatusOK, consoleAnswer{Result: text, IsError: res.IsError})
}

// serveConsoleSecret is POST /ui/secret (a form: server, name, value).
func (h *Host) serveConsoleSecret(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 128<<10)
	if err := r.ParseForm(); err != nil {
		writeConsoleAnswer(w, http.StatusBadRequest, consoleAnswer{Error: "Bad Request: " + err.Error()})
		return
	}
	server, name, value := r.PostForm.Get("server"), r.PostForm.Get("name"), r.PostForm.Get("value")
	if !slices.Contains(h.missingSecrets()[server], name) {
		writeConsoleAnswer(w, http.StatusBadRequest, consoleAnswer{Error: fmt.Sprintf("Bad Request: server %q is not waiting for %q; the console sets only a variable a needs_config server lacks (use `mcpvisor secret set` for others)", server, name)})
		return
	}
	if value == "" {
		writeConsoleAnswer(w, http.StatusBadRequest, consoleAnswer{Error: "Bad Request: the value is empty; nothing stored"})
		return
	}
	dir, err := statedir.Dir()
	if err == nil {
		err = secrets.Open(dir).Set(name, value)
	}
	if err != nil {
		h.logger.Named("http").Error("console could not store a secret", "name", name, "error", err)
		writeConsoleAnswer(w, http.StatusInternalServerError, consoleAnswer{Error: "storing " + name + " failed: " + err.Error()})
		return
	}
	h.logger.Named("http").Info("secret stored from the console; reloading", "name", name, "server", server)
	ctx, cancel := context.WithTimeout(r.Context(), controlTimeout)
	defer cancel()
	// The reload `mcpvisor secret set` asks for (reloadcontrol.go): the
	// servers whose env() reads the name are started.
	res, err := h.ReloadFile(ctx)
	if err != nil {
		if errors.Is(err, errNotFromFile) {
			err = fmt.Errorf("%s is stored, but this host's configuration was built in Go: restart it to use the value", name)
		}
		writeConsoleAnswer(w, http.StatusConflict, consoleAnswer{Stored: name, Error: err.Error()})
		return
	}
	h.console.changed()
	writeConsoleAnswer(w, http.StatusOK, consoleAnswer{Stored: name, Restarted: append(res.Restarted, res.Added...)})
}

// connectCommands are the "connect a client" panel's commands for this
// host's config.
type connectCommand struct{ Client, Command string }

func (h *Host) connectCommands() []connectCommand {
	cfg := configPath(h.servers.Load().cfg.Filename)
	if cfg == "" {
		return nil
	}
	quoted := shellQuote(cfg)
	var out []connectCommand
	if h.HTTPURL() != "" {
		for _, c := range []string{"claude-code", "cursor", "vscode", "windsurf"} {
			out = append(out, connectCommand{c, "mcpvisor client install -http -config " + quoted + " " + c})
		}
	}
	out = append(out, connectCommand{"claude-desktop", "mcpvisor client install -config " + quoted + " claude-desktop"})
	return out
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:@", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// nextAttempt is the row's "next attempt" text.
func nextAttempt(st ServerStatus, now time.Time) string {
	if st.NextAttempt.IsZero() || (st.State != StateParked && st.State != StateReconnecting) {
		return ""
	}
	in := st.NextAttempt.Sub(now).Round(time.Second)
	if in <= 0 {
		return "next attempt now (at " + st.NextAttempt.UTC().Format(time.TimeOnly) + " UTC)"
	}
	return fmt.Sprintf("next attempt at %s UTC (in %s)", st.NextAttempt.UTC().Format(time.TimeOnly), in)
}

// consoleRows orders the servers for triage and fills the summary.
func consoleRows(rows []consoleServer) consoleSummary {
	var sum consoleSummary
	for _, s := range rows {
		switch {
		case s.State == StateReady || s.State == StateIdle:
			sum.Ready++
		case s.State == StateParked:
			sum.Parked++
		case isProblem(s.State):
			sum.Problem++
		default:
			sum.Other++
		}
	}
	slices.SortStableFunc(rows, func(a, b consoleServer) int {
		return cmp.Compare(problemRank(a.State), problemRank(b.State))
	})
	return sum
}
