package host

/*
The web console (docs/operations.md, "Web console").

GET /ui is one server-rendered page (html/template: everything an upstream
wrote — tool names, descriptions, error messages — is escaped) showing each
server's state, last error, retries, the RSS and CPU time of its process,
the tools it exposes and the host's most recent calls. One EventSource per
page (GET /ui/events) receives the same fragment re-rendered: pushed when a
server's status changes or a call finishes, at most once per
consolePushInterval, and every consoleRefresh otherwise (for RSS and CPU).
The revive and restart buttons POST to the control endpoints
(/control/revive, /control/restart).

Every console request passes the same ingress as /status (Host and Origin
checks, the bearer token), and then the operator check (operator.go): the
console shows every caller's recent calls and restarts servers, so an
OIDC subject needs a policy with operator = true; the shared token's
caller is an operator. A browser cannot attach a bearer token to a page
load or an EventSource, so on a host with a token the console is opened
once as /ui?token=TOKEN from a loopback client: the page sets an HttpOnly,
SameSite=Strict cookie holding a digest of the token and redirects to /ui.
consoleAuth turns that cookie back into the bearer token, but only for the
console's own paths and for control POSTs whose Origin is the page's own
(a cross-site form cannot send the cookie, nor forge the Origin).

Bounds (the host block's console block): at most max_streams live streams
(a further one gets 503), and the recent calls are a ring of recent_calls
records kept in memory whether or not an audit file is configured; a
record never holds arguments or results.
*/

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/audit"
	"github.com/mcpvisor/mcpvisor/host/internal/identity"
	"github.com/mcpvisor/mcpvisor/host/internal/upstream"
)

// Console bounds and pacing.
const (
	// consoleMaxToolsShown bounds the tools listed per server (the rest
	// are counted), so one server with a large catalog does not make
	// every push large.
	consoleMaxToolsShown = 100
	// consolePushInterval is the least time between two pushes to one
	// page: a burst of state changes or calls becomes one update.
	consolePushInterval = time.Second
	// consoleRefresh is how often a page is pushed an update with
	// nothing changed, so RSS, CPU and ages stay current.
	consoleRefresh = 5 * time.Second
	// consoleCookie is the cookie that carries the console's credential
	// on a host with a bearer token.
	consoleCookie = "mcpvisor_console"
)

//go:embed ui
var consoleFiles embed.FS

var consoleTemplates = template.Must(template.New("").Funcs(template.FuncMap{
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return time.Since(t).Round(time.Second).String() + " ago"
	},
	"clock": func(t time.Time) string { return t.UTC().Format("15:04:05") },
}).ParseFS(consoleFiles, "ui/*.html"))

// consoleCall is one finished call as the console lists it: what was
// called, by whom and how it ended; never its arguments or result.
type consoleCall struct {
	Time     time.Time
	Server   string
	Method   string
	Name     string
	Outcome  string
	Duration time.Duration
	// Error is the call's error, redacted like the audit log's.
	Error string
}

// console is the host's web console: the recent calls and the open
// live-update streams.
type console struct {
	// maxStreams bounds the open streams: each holds a connection and
	// re-renders the page fragment, so a tab opened in a loop must not
	// take the host's memory.
	maxStreams int

	mu    sync.Mutex
	calls []consoleCall // guarded by mu: a ring of fixed length, next is the oldest
	next  int           // guarded by mu
	count int           // guarded by mu: records in calls
	// pages are the open streams' wake-up channels (buffer 1), guarded
	// by mu; at most maxStreams.
	pages map[chan struct{}]struct{}
	// logs gives each row its recent log lines (consoletriage.go); set
	// once when the host is built.
	logs consoleLogSource
}

func newConsole(cfg config.Console) *console {
	return &console{
		maxStreams: cmp.Or(cfg.MaxStreams, config.DefaultConsoleMaxStreams),
		calls:      make([]consoleCall, cmp.Or(cfg.RecentCalls, config.DefaultConsoleRecentCalls)),
		pages:      map[chan struct{}]struct{}{},
	}
}

// record adds a finished call to the ring.
func (c *console) record(call *upstream.Call) {
	rec := consoleCall{Time: call.Start, Server: call.Server, Method: call.Method, Name: call.Name,
		Outcome: string(call.Outcome), Duration: call.Duration}
	if call.Method == "resources/read" {
		rec.Name = audit.RedactText(call.Name) // a URI can carry credentials
	}
	if call.Err != nil {
		rec.Error = audit.RedactText(call.Err.Error())
	}
	// One lock per call: the record and the wake-up of open pages.
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[c.next] = rec
	c.next = (c.next + 1) % len(c.calls)
	c.count = min(c.count+1, len(c.calls))
	c.wakeLocked()
}

// recent returns the recorded calls, newest first.
func (c *console) recent() []consoleCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]consoleCall, 0, c.count)
	for i := 1; i <= c.count; i++ {
		out = append(out, c.calls[(c.next-i+len(c.calls))%len(c.calls)])
	}
	return out
}

// changed wakes every open stream; a stream already woken stays so.
func (c *console) changed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wakeLocked()
}

// wakeLocked is changed with c.mu held.
func (c *console) wakeLocked() {
	for ch := range c.pages {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// subscribe opens a stream, or reports false when maxStreams are open.
func (c *console) subscribe() (chan struct{}, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pages) >= c.maxStreams {
		return nil, false
	}
	ch := make(chan struct{}, 1)
	c.pages[ch] = struct{}{}
	return ch, true
}

func (c *console) unsubscribe(ch chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pages, ch)
}

// consoleObserver is the supervisors' Observer: the host's telemetry (nil
// when metrics, tracing and audit are all off) and the console's ring of
// recent calls, which is kept either way.
type consoleObserver struct {
	h *Host
}

func (o consoleObserver) StateChanged(server string, from, to upstream.State) {
	if t := o.h.telemetry; t != nil {
		t.StateChanged(server, from, to)
	}
}

func (o consoleObserver) BreakerChanged(server string, from, to upstream.BreakerState) {
	if t := o.h.telemetry; t != nil {
		t.BreakerChanged(server, from, to)
	}
}

func (o consoleObserver) ConnectFinished(server string, gen uint64, initial bool, err error) {
	if t := o.h.telemetry; t != nil {
		t.ConnectFinished(server, gen, initial, err)
	}
}

func (o consoleObserver) Restarted(server string, gen uint64, reason upstream.RestartReason) {
	if t := o.h.telemetry; t != nil {
		t.Restarted(server, gen, reason)
	}
}

func (o consoleObserver) Notification(server, kind string, forwarded bool) {
	if t := o.h.telemetry; t != nil {
		t.Notification(server, kind, forwarded)
	}
}

func (o consoleObserver) CallStarted(ctx context.Context, c *upstream.Call) context.Context {
	if t := o.h.telemetry; t != nil {
		return t.CallStarted(ctx, c)
	}
	return ctx
}

func (o consoleObserver) CallFinished(ctx context.Context, c *upstream.Call) {
	if t := o.h.telemetry; t != nil {
		t.CallFinished(ctx, c)
	}
	o.h.console.record(c)
}

// consolePage is what the templates render.
type consolePage struct {
	Version  string
	Replica  string
	Draining bool
	Summary  consoleSummary
	Servers  []consoleServer
	Calls    []consoleCall
	MaxCalls int
	Updated  time.Time
	// HTTP is the /mcp endpoint ("" when the host serves none), Config
	// the configuration file, Connect the commands that point a client at
	// this host, Clients the connected ones.
	HTTP    string
	Config  string
	Connect []connectCommand
	Clients []Client
}

// consoleServer is one server's row.
type consoleServer struct {
	ServerStatus
	// RSS and CPU describe the server's process group ("-" without one).
	RSS, CPU string
	Tools    []consoleTool
	// MoreTools counts the exposed tools past consoleMaxToolsShown.
	MoreTools int
	// Reason is why the server is not ready: empty while it is ready or
	// idle, whatever error it had before (consoletriage.go).
	Reason string
	// Next says when a reconnecting or parked server tries again.
	Next string
	// Problem marks a row that needs a person (the summary's problem or
	// parked).
	Problem bool
	// Missing are the variables a needs_config server lacks: the console
	// offers a field for each.
	Missing []string
	// Logs are its recent log lines (consoleLogSource).
	Logs []string
}

// consoleTool is one tool with its call form.
type consoleTool struct {
	ExposedTool
	Fields []consoleField
	// RawArgs is set when the schema could not be read into fields: the
	// form takes the arguments as one JSON object.
	RawArgs bool
}

func (h *Host) consolePage() consolePage {
	now := time.Now()
	p := consolePage{Version: Version, Replica: h.replica, Draining: h.Draining(),
		Calls: h.console.recent(), MaxCalls: len(h.console.calls), Updated: now,
		HTTP: h.HTTPURL(), Config: configPath(h.servers.Load().cfg.Filename), Connect: h.connectCommands(), Clients: h.Clients()}
	tools := map[string][]consoleTool{}
	for _, t := range h.Tools() {
		ct := consoleTool{ExposedTool: ExposedTool{Name: t.Tool.Name, Server: t.Server, Original: t.Original, Description: t.Tool.Description}}
		ct.Fields, ct.RawArgs = toolFields(t.Tool.InputSchema)
		tools[t.Server] = append(tools[t.Server], ct)
	}
	missing := h.missingSecrets()
	logs := h.console.logs
	if logs == nil {
		logs = h.recentLogs
	}
	for _, st := range h.Status() {
		s := consoleServer{ServerStatus: st, RSS: "-", CPU: "-", Tools: tools[st.Name],
			Next: nextAttempt(st, now), Problem: isProblem(st.State) || st.State == StateParked, Logs: logs(st.Name, consoleLogLines)}
		if st.State != StateReady && st.State != StateIdle {
			s.Reason = st.LastError
		}
		if st.State == StateNeedsConfig {
			s.Missing = missing[st.Name]
		}
		if len(s.Tools) > consoleMaxToolsShown {
			s.MoreTools = len(s.Tools) - consoleMaxToolsShown
			s.Tools = s.Tools[:consoleMaxToolsShown]
		}
		// The whole process group's, as status measured it.
		if st.RSSBytes > 0 {
			s.RSS = fmt.Sprintf("%.1f MiB", float64(st.RSSBytes)/(1<<20))
			s.CPU = (time.Duration(st.CPUSeconds * float64(time.Second))).Round(10 * time.Millisecond).String()
		}
		p.Servers = append(p.Servers, s)
	}
	p.Summary = consoleRows(p.Servers)
	return p
}

// mountConsole adds the console's routes to mux.
func (h *Host) mountConsole(mux *http.ServeMux) {
	static, _ := fs.Sub(consoleFiles, "ui/static")
	// Operators only (operator.go): the page and its stream show every
	// caller's recent calls. The check comes before serveConsole, so a
	// caller who is not an operator never gets the console's cookie.
	mux.Handle("GET /ui/static/", h.operatorOnly(http.StripPrefix("/ui/static/", http.FileServerFS(static))))
	mux.Handle("GET /ui", h.operatorOnly(http.HandlerFunc(h.serveConsole)))
	mux.Handle("GET /ui/{$}", h.operatorOnly(http.HandlerFunc(h.serveConsole)))
	mux.Handle("GET /ui/events", h.operatorOnly(http.HandlerFunc(h.serveConsoleEvents)))
	mux.Handle("GET /ui/login", h.operatorOnly(http.HandlerFunc(h.serveConsoleLogin)))
	// The console's own actions (consoletriage.go), CSRF-checked by
	// consolePath like the control POSTs.
	mux.Handle("POST /ui/call", h.operatorOnly(http.HandlerFunc(h.serveConsoleCall)))
	mux.Handle("POST /ui/secret", h.operatorOnly(http.HandlerFunc(h.serveConsoleSecret)))
	// The host's root is the console: a browser pointed at the address
	// lands there (and logs in, or is told how).
	mux.Handle("GET /{$}", http.RedirectHandler("/ui", http.StatusSeeOther))
}

func (h *Host) serveConsole(w http.ResponseWriter, r *http.Request) {
	if token := r.URL.Query().Get("token"); token != "" && h.servers.Load().cfg.Host.BearerToken != "" && sharedTokenCaller(r) {
		// The ingress accepted the token (consoleAuth made it the
		// request's bearer token; a request with a JWT of its own is not
		// the shared token's caller and gets no cookie): keep it as a
		// cookie and take it out of the address bar and the history.
		http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: consoleCredential(token), Path: "/",
			HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
		http.Redirect(w, r, "/ui", http.StatusSeeOther)
		return
	}
	var buf bytes.Buffer
	if err := consoleTemplates.ExecuteTemplate(&buf, "page.html", h.consolePage()); err != nil {
		h.logger.Named("http").Error("console page failed to render", "error", err)
		http.Error(w, "Internal Server Error: the console page failed to render; see the host's log", http.StatusInternalServerError)
		return
	}
	consoleHeaders(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(buf.Bytes())
}

// sharedTokenCaller reports whether the ingress admitted r as the shared
// token's caller.
func sharedTokenCaller(r *http.Request) bool {
	s := identity.FromContext(r.Context())
	return s != nil && s.Via == identity.ViaToken
}

// consoleHeaders keeps the console out of caches and frames and lets it
// run only its own script.
func consoleHeaders(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
}

// serveConsoleEvents is one page's live-update stream: an SSE event
// "update" whose data is the re-rendered live fragment.
func (h *Host) serveConsoleEvents(w http.ResponseWriter, r *http.Request) {
	wake, ok := h.console.subscribe()
	if !ok {
		max := h.console.maxStreams
		h.logger.Named("http").Warn("console stream refused: too many open", "max_streams", max, "remote", r.RemoteAddr)
		w.Header().Set("Retry-After", "10")
		http.Error(w, fmt.Sprintf("Service Unavailable: %d console pages are already receiving live updates, the most this host allows (console { max_streams }); close one and reload, or raise max_streams", max), http.StatusServiceUnavailable)
		return
	}
	defer h.console.unsubscribe(wake)
	rc := http.NewResponseController(w)
	consoleHeaders(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	refresh := time.NewTicker(consoleRefresh)
	defer refresh.Stop()
	var buf bytes.Buffer
	for {
		buf.Reset()
		if err := consoleTemplates.ExecuteTemplate(&buf, "live", h.consolePage()); err != nil {
			h.logger.Named("http").Error("console update failed to render", "error", err)
			return
		}
		if err := writeEvent(w, "update", buf.Bytes()); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
		pause := time.NewTimer(consolePushInterval)
		select {
		case <-r.Context().Done():
			pause.Stop()
			return
		case <-pause.C:
		}
		select {
		case <-r.Context().Done():
			return
		case <-wake:
		case <-refresh.C:
		}
	}
}

// writeEvent writes one server-sent event: data's lines each as a data
// field, as the EventSource format requires.
func writeEvent(w http.ResponseWriter, event string, data []byte) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "event: %s\n", event)
	for _, line := range strings.Split(strings.ReplaceAll(string(data), "\r", ""), "\n") {
		fmt.Fprintf(&b, "data: %s\n", line)
	}
	b.WriteString("\n")
	_, err := w.Write(b.Bytes())
	return err
}

// consoleCredential is the console cookie's value for token: a digest,
// so the cookie never holds the token itself.
func consoleCredential(token string) string {
	sum := sha256.Sum256([]byte("mcpvisor console\x00" + token))
	return hex.EncodeToString(sum[:])
}

// consoleAuth lets a browser use the console (see the note at the top of
// this file and consolelogin.go). It only ever adds a credential to a
// request that proved it may have it — the shared token's own value or
// cookie, a good login code, a live session's cookie; the ingress and the
// operator check still check everything else.
func (h *Host) consoleAuth(token string, next http.Handler) http.Handler {
	want := ""
	if token != "" {
		want = consoleCredential(token)
	}
	operator := h.opts.operator.Token
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" && consolePath(r) {
			proof := ""
			c, cerr := r.Cookie(consoleCookie)
			switch {
			case r.Method == http.MethodGet && r.URL.Path == "/ui/login" && operator != "":
				if session, ok := h.logins.redeem(r.URL.Query().Get("code")); ok {
					proof = operator
					r = r.WithContext(context.WithValue(r.Context(), consoleSessionKey{}, session))
				}
			case token != "" && r.URL.Query().Get("token") != "" && r.Method == http.MethodGet && r.URL.Path == "/ui" && loopbackRemote(r):
				// The query's token itself: the ingress compares it.
				proof = r.URL.Query().Get("token")
			case cerr == nil && want != "" && subtle.ConstantTimeCompare([]byte(c.Value), []byte(want)) == 1:
				proof = token
			case cerr == nil && operator != "" && h.logins.live(c.Value):
				proof = operator
			}
			if proof != "" {
				r = r.Clone(r.Context())
				r.Header.Set("Authorization", "Bearer "+proof)
			}
		}
		next.ServeHTTP(w, r)
	})
}

// consolePath reports whether r is one the console's cookie may
// authorize: a GET of the console's pages, or a control POST sent by a
// console page (its Origin is the host's own).
func consolePath(r *http.Request) bool {
	switch {
	case r.Method == http.MethodGet:
		return r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/")
	case r.Method == http.MethodPost:
		switch r.URL.Path {
		case "/control/revive", "/control/restart", "/ui/call", "/ui/secret":
		default:
			return false
		}
		origin := r.Header.Get("Origin")
		return origin == "http://"+r.Host || origin == "https://"+r.Host
	}
	return false
}

// loopbackRemote reports whether r came from a loopback address.
func loopbackRemote(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	return err == nil && loopbackHost(host)
}
