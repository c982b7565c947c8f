package host

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/gateway"
	"github.com/mcpvisor/mcpvisor/host/internal/identity"
	"github.com/mcpvisor/mcpvisor/host/internal/limits"
	"github.com/mcpvisor/mcpvisor/host/internal/policy"
	"github.com/mcpvisor/mcpvisor/host/internal/registry"
	"github.com/mcpvisor/mcpvisor/host/internal/telemetry"
	"github.com/mcpvisor/mcpvisor/host/internal/wire"
)

// HTTP server limits for Serve. Every wait a client can cause has a
// deadline, and nothing a client declares is allocated before it is sent.
const (
	// readHeaderTimeout closes a connection whose request head has not
	// arrived in time, including one that never sends a byte.
	readHeaderTimeout = 10 * time.Second

	// idleTimeout closes a keep-alive connection with no request in flight.
	idleTimeout = 2 * time.Minute

	// maxHeaderBytes bounds a request head (net/http's default is 1 MiB;
	// MCP requests carry a handful of short headers).
	maxHeaderBytes = 64 << 10

	// shutdownGrace is how long Serve lets requests in flight finish once
	// its context ends (after Drain's wait, when the host drained), before
	// it cuts the calls still running (drain.go).
	shutdownGrace = 2 * time.Second

	// streamsEndGrace is how long Serve waits, after ending the clients'
	// GET streams, for their connections to go idle before closing them.
	streamsEndGrace = time.Second
)

// StatusReport is what GET /status answers.
type StatusReport struct {
	// Version is mcpvisor's version.
	Version string `json:"version"`
	// Replica is the host's replica name (Host.Replica).
	Replica string `json:"replica"`
	// Draining is set once Drain has begun: the host is leaving rotation.
	Draining bool `json:"draining,omitempty"`
	// Servers are the servers' states, in config order.
	Servers []ServerStatus `json:"servers"`

	// HTTP is the streamable HTTP endpoint the host serves ("" when it
	// serves none: `run --stdio`), for `client install -http`; operators
	// only.
	HTTP string `json:"http,omitempty"`
	// Clients are the connected downstream clients, oldest first;
	// operators only.
	Clients []Client `json:"clients,omitempty"`

	// Config is the absolute path of the configuration file the host runs
	// ("" for a Config built in Go), so `mcpvisor status` can tell the
	// host of one config from another's on the same address.
	Config string `json:"config,omitempty"`
}

// ExposedTool is one tool as GET /tools lists it: the exposed name, the
// server block it comes from and its name there.
type ExposedTool struct {
	Name        string `json:"name"`
	Server      string `json:"server"`
	Original    string `json:"original"`
	Description string `json:"description,omitempty"`
	// RenamedFrom is the name the tool was exposed under when the
	// policies in force were loaded, when it has changed since (a clash
	// suffix came or went): a policy glob written for the old name may
	// not mean it any more (`mcpvisor policy check` reports it).
	RenamedFrom string `json:"renamed_from,omitempty"`
}

// configPath is the absolute path of the file cfg came from.
func configPath(filename string) string {
	if filename == "" {
		return ""
	}
	if abs, err := filepath.Abs(filename); err == nil {
		return abs
	}
	return filename
}

// Handler returns the host's HTTP handler:
//
//   - /mcp: streamable HTTP MCP;
//   - /status: the servers' states as JSON (a StatusReport);
//   - /tools: the exposed tools with their servers ([]ExposedTool);
//   - /healthz and /readyz: liveness, and readiness (a Readiness; 503 while
//     not ready);
//   - /metrics: Prometheus metrics (unless WithMetrics(false));
//   - /control/revive, /control/restart and /control/reload (POST): what
//     `mcpvisor revive`, `restart`, `add` and `remove` ask of a running host;
//   - /control/logs (GET): a server's recent stderr, for `mcpvisor logs`
//     (LogLine; logs.go);
//   - /ui and /ui/events: the web console (docs/operations.md, "Web console").
//
// The control endpoints and the console answer operators only: the local
// operator credential's holder (WithLocalOperator), the shared token's
// caller, and an OIDC subject a policy with operator = true applies to
// (operator.go, docs/auth.md) — and never a process a host started
// (localsock.go); anyone else gets 403, on a host without auth too.
//
// Every request first passes the ingress checks — a request that reached
// a loopback address must name a loopback Host (DNS rebinding), a
// browser's Origin must be loopback, and the host block's bearer token or,
// with auth { oidc }, a JWT of its OpenID provider is required when set
// (docs/auth.md; the caller's identity.Subject is then in the request's
// context) — then the downstream request bounds (docs/security.md), and then
// the middlewares of WithMiddleware. With oidc, the protected resource
// metadata is served without a token at
// /.well-known/oauth-protected-resource[/mcp]. The one exception to the
// token: a GET of /healthz or /readyz without an Authorization header (an
// orchestrator's probe) gets the status code and a body without details,
// and skips the middlewares. A request whose bearer token is the local
// operator credential is the local user. Over a unix socket served by
// Serve, a peer that is a server's process gets 403 on every path, and
// one of another uid without a token too (localsock.go).
func (h *Host) Handler() http.Handler {
	h.handlerOnce.Do(func() {
		mux := http.NewServeMux()
		mux.Handle("/mcp", h.sessionCap(h.gateway.HTTPHandler()))
		mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			// Read-only, for every caller; without what other callers'
			// calls left for one who is not an operator (operator.go).
			enc.Encode(h.statusFor(r, StatusReport{Version: Version, Replica: h.replica, Draining: h.Draining(), Servers: h.Status(),
				Config: configPath(h.servers.Load().cfg.Filename), HTTP: h.HTTPURL(), Clients: h.Clients()}))
		})
		// The exposed tools with their servers, for `mcpvisor tools`
		// (tools/list carries no server).
		mux.HandleFunc("GET /tools", func(w http.ResponseWriter, r *http.Request) {
			tools := []ExposedTool{}
			// Filtered like tools/list: the caller's policies (docs/auth.md).
			visible := h.policyEngine().Visible(identity.FromContext(r.Context()), policy.Tool)
			for _, t := range h.registry.Tools() {
				renamed := h.policyNames.renamedFrom(t.Server, t.Original, t.Tool.Name)
				if !visible(t.Tool.Name, registry.Aliases(t.Full)...) {
					continue
				}
				tools = append(tools, ExposedTool{Name: t.Tool.Name, Server: t.Server, Original: t.Original, Description: t.Tool.Description, RenamedFrom: renamed})
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(tools)
		})
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "ok\n")
		})
		// The operator endpoints answer operators only (operator.go).
		mux.Handle("POST /control/revive", h.operatorOnly(h.control(h.Revive)))
		mux.Handle("POST /control/restart", h.operatorOnly(h.control(h.Restart)))
		// `mcpvisor add` and `remove` (reloadcontrol.go).
		mux.Handle("POST /control/reload", h.operatorOnly(http.HandlerFunc(h.serveReload)))
		// `mcpvisor ui`: a one-time login code for the console (consolelogin.go).
		mux.Handle("POST /control/console-login", h.operatorOnly(http.HandlerFunc(h.serveConsoleLoginCode)))
		// `mcpvisor logs`: each server's recent stderr (logs.go).
		mux.Handle("GET /control/logs", h.operatorOnly(http.HandlerFunc(h.serveLogs)))
		h.mountConsole(mux) // the web console at /ui (ui.go), operators only
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
			h.readyzAsked.Store(true)
			rep := h.Readiness()
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			if !rep.Ready {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			enc.Encode(rep)
		})
		if c := h.Collector(); c != nil {
			reg := prometheus.NewRegistry()
			reg.MustRegister(c)
			// mcpvisor's own metrics carry the replica label already; the
			// runtime's get it here, so every series names its replica.
			prometheus.WrapRegistererWith(prometheus.Labels{telemetry.ReplicaLabel: h.replica}, reg).MustRegister(
				collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
				ErrorLog: h.logger.Named("metrics").StandardLogger(nil),
			}))
		}
		var next http.Handler = mux
		for i := len(h.opts.middleware) - 1; i >= 0; i-- {
			next = h.opts.middleware[i](next)
		}
		// The request bounds come after the ingress checks (a client
		// without the token is refused before its body is read) and before
		// WithMiddleware's, which may wrap the ResponseWriter.
		next = newRequestLimits(h, h.servers.Load().cfg.Host, next)
		hostCfg := h.servers.Load().cfg.Host
		in := newIngress(hostCfg.BearerToken, h.logger.Named("http"), next)
		in.probes = http.HandlerFunc(h.serveProbe)
		in.door = h.door
		in.localUser = func() *identity.Subject {
			return cmp.Or(h.policyEngine().Local(), policy.LocalSubject(h.servers.Load().cfg.Host.StdioSubject))
		}
		if o := hostCfg.OIDC; o != nil {
			in.withOIDC(identity.NewOIDC(*o))
		}
		h.handler = h.inFlight.counted(h.consoleAuth(hostCfg.BearerToken, in))
	})
	return h.handler
}

// serveProbe answers /healthz and /readyz for an orchestrator's probe that
// sends no token: the status code, and a body that names no server, error
// or replica (those are for callers with the token).
func (h *Host) serveProbe(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if r.URL.Path == "/healthz" {
		io.WriteString(w, "ok\n")
		return
	}
	h.readyzAsked.Store(true)
	rep := h.Readiness()
	w.Header().Set("Content-Type", "application/json")
	if !rep.Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	json.NewEncoder(w).Encode(struct {
		Ready    bool `json:"ready"`
		Draining bool `json:"draining,omitempty"`
	}{rep.Ready, rep.Draining})
}

// Readiness is what GET /readyz answers.
type Readiness struct {
	// Ready is false while the host drains (Drain), while a server with
	// required = true is not ready, or while no server is ready at all (a
	// host with no servers is ready).
	Ready bool `json:"ready"`
	// Replica is the host's replica name (Host.Replica).
	Replica string `json:"replica"`
	// Draining is set once Drain has begun; Reason is then "draining".
	Draining bool `json:"draining,omitempty"`
	// Reason says why the host is not ready.
	Reason string `json:"reason,omitempty"`
	// NotReady lists every server that is not ready, required or not.
	NotReady []NotReadyServer `json:"not_ready,omitempty"`
}

// NotReadyServer is a server that is not ready.
type NotReadyServer struct {
	Name     string `json:"name"`
	State    State  `json:"state"`
	Required bool   `json:"required"`
	// LastError says why, credentials redacted.
	LastError string `json:"last_error,omitempty"`
}

// Readiness reports whether the host should receive traffic: not
// draining, every required server ready, and at least one server ready.
func (h *Host) Readiness() Readiness {
	set := h.servers.Load()
	required := map[string]bool{}
	for _, srv := range set.cfg.Servers {
		required[srv.Name] = srv.Required
	}
	rep := Readiness{Ready: true, Replica: h.replica}
	var missing []string
	ready := 0
	for _, name := range set.order {
		st := set.sups[name].Status()
		// An idle server (stopped after idle_timeout) serves the next
		// call by starting it: it is as ready as a running one.
		if st.State == StateReady || st.State == StateIdle {
			ready++
			continue
		}
		rep.NotReady = append(rep.NotReady, NotReadyServer{Name: name, State: st.State, Required: required[name], LastError: st.LastError})
		if required[name] {
			missing = append(missing, name)
		}
	}
	switch {
	case h.Draining():
		rep.Ready = false
		rep.Draining = true
		rep.Reason = "draining"
	case len(missing) > 0:
		rep.Ready = false
		rep.Reason = "required server(s) not ready: " + strings.Join(missing, ", ")
	case ready == 0 && len(set.order) > 0:
		rep.Ready = false
		rep.Reason = "no server is ready"
	}
	return rep
}

// ControlResult is what POST /control/revive and /control/restart answer:
// the server's status after the action, or why it failed.
type ControlResult struct {
	Server ServerStatus `json:"server"`
	Error  string       `json:"error,omitempty"`
}

// controlTimeout bounds a control action (a restart waits for the new
// process to be ready).
const controlTimeout = 2 * time.Minute

// control serves a control action on the server named by the request's
// "server" query parameter.
func (h *Host) control(act func(ctx context.Context, name string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		name := r.URL.Query().Get("server")
		ctx, cancel := context.WithTimeout(r.Context(), controlTimeout)
		defer cancel()
		var res ControlResult
		status := http.StatusOK
		if err := act(ctx, name); err != nil {
			res.Error = err.Error()
			status = http.StatusInternalServerError
			if errors.Is(err, ErrUnknownServer) {
				status = http.StatusNotFound
			}
		}
		for _, st := range h.Status() {
			if st.Name == name {
				res.Server = st
			}
		}
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(res)
	}
}

// sessionCap holds the sessions open to the host block's max_sessions, and
// each subject's to max_sessions_per_subject: one client opening sessions
// in a loop cannot take the memory the others need, nor one subject the
// sessions of the others. A request that would open one more closes an
// idle session (gateway.AdmitSession): at the subject's own cap one of its
// own, else one of the subject with the most; when none is idle it gets
// 429 (its own cap) or 503 (the host's).
func (h *Host) sessionCap(next http.Handler) http.Handler {
	hostCfg := h.servers.Load().cfg.Host
	max := cmp.Or(hostCfg.MaxSessions, config.DefaultMaxSessions)
	perSubject := cmp.Or(hostCfg.MaxSessionsPerSubject, config.DefaultMaxSessionsPerSubject)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		opens := r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" &&
			r.Header.Get("Mcp-Protocol-Version") < wire.Stateless
		if !opens {
			next.ServeHTTP(w, r)
			return
		}
		who := identity.FromContext(r.Context())
		// The per-subject bound is for the subjects a provider tells
		// apart; every holder of the shared token, every anonymous caller
		// of a host without auth is one caller, bounded by max_sessions.
		mine := 0
		if who != nil && who.Via == identity.ViaOIDC {
			mine = perSubject
		}
		err := h.gateway.AdmitSession(max, mine, who.Caller())
		if err == nil {
			next.ServeHTTP(w, r)
			return
		}
		h.limitHits.Hit(limits.MaxSessions)
		w.Header().Set("Retry-After", "10")
		if errors.Is(err, gateway.ErrSubjectSessions) {
			h.logger.Warn("http request refused: the subject's sessions are all busy", "max_sessions_per_subject", perSubject,
				"subject", callerSelector(who), "remote", r.RemoteAddr)
			h.auditSessionRefusal(r, who, "max_sessions_per_subject", perSubject)
			http.Error(w, fmt.Sprintf("Too Many Requests: %s has %d sessions open, the most this host allows one subject (max_sessions_per_subject), and every one has a request in flight or a stream open; close one (DELETE /mcp) or retry later", callerSelector(who), perSubject), http.StatusTooManyRequests)
			return
		}
		h.logger.Warn("http request refused: every session is busy", "max_sessions", max, "subject", callerSelector(who), "remote", r.RemoteAddr)
		h.auditSessionRefusal(r, who, "max_sessions", max)
		http.Error(w, fmt.Sprintf("Service Unavailable: %d sessions are open, the most this host allows (max_sessions), and every one has a request in flight or a stream open; retry later or raise max_sessions", max), http.StatusServiceUnavailable)
	})
}

// Serve serves Handler on ln until ctx ends, then shuts down: it takes no
// new connection, requests in flight get a short grace, calls still
// running after it are cut (their clients get a JSON-RPC error saying the
// host is shutting down), and then the clients' GET streams end and the
// connections still open are closed. To leave a load balancer's rotation without
// failing calls, call Drain before ending ctx. It returns nil after a shutdown, or why serving
// failed. ln is closed either way.
func (h *Host) Serve(ctx context.Context, ln net.Listener) error {
	// A client's standalone GET stream is a request that never ends: it
	// would hold Shutdown for its whole grace. It is ended the moment
	// shutdown starts; the client sees its stream close.
	streams, endStreams := context.WithCancel(context.Background())
	defer endStreams()
	// requests counts this server's requests but the GET streams.
	var requests requestGauge
	handler := h.Handler()
	if addr, ok := ln.Addr().(*net.TCPAddr); ok {
		// A client on this machine reaches an unspecified address
		// (":8811", "0.0.0.0") on loopback.
		if addr.IP == nil || addr.IP.IsUnspecified() {
			addr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: addr.Port}
		}
		u := "http://" + addr.String() + "/mcp"
		h.httpURL.CompareAndSwap(nil, &u)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				ctx, cancel := context.WithCancel(r.Context())
				defer cancel()
				defer context.AfterFunc(streams, cancel)()
				r = r.WithContext(ctx)
			} else {
				requests.add()
				defer requests.release()
			}
			handler.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          h.logger.Named("http").StandardLogger(nil),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		// Who connected over a unix socket, asked of the kernel once per
		// connection (localsock.go).
		ConnContext: withPeer,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving HTTP on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	h.beginStopping()
	// Stop accepting connections; Shutdown returns once every connection
	// is idle, or closed by Close below.
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	// Requests in flight get shutdownGrace. Calls still running after it
	// are cut: each client gets a JSON-RPC error saying the host is
	// shutting down, on the request it made. Only then do the GET streams
	// end: a client whose stream ends first may give its session up for
	// dead and fail its calls itself, with no word from the host.
	if !waitIdle(&requests, shutdownGrace) {
		h.logger.Warn("cutting the calls still in flight: the host is shutting down", "in_flight", requests.count(), "waited", shutdownGrace)
		h.cutCalls(errHostShuttingDown)
		waitIdle(&requests, cutReplyGrace)
		// A client reads those answers on one connection and the end of
		// its GET stream on another, in whichever order it gets to them;
		// give it a moment to read the answers first.
		time.Sleep(cutDeliveryPause)
	}
	endStreams()
	t := time.NewTimer(streamsEndGrace)
	defer t.Stop()
	select {
	case <-shut:
	case <-t.C:
		srv.Close()
		<-shut
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// ServeStdio serves one MCP client over the process's stdin and stdout
// until ctx ends or the client closes stdin. tools/call requests are
// forwarded as bytes, without the go-sdk server's decoding.
func (h *Host) ServeStdio(ctx context.Context) error {
	return h.gateway.ServeStdio(ctx)
}

// ServeTransport serves one MCP client over t (any go-sdk transport, such
// as one end of mcp.NewInMemoryTransports) until ctx ends or the client
// goes away.
func (h *Host) ServeTransport(ctx context.Context, t mcp.Transport) error {
	return h.gateway.ServeTransport(ctx, t)
}

// ingress is the check every HTTP request passes before any endpoint sees
// it. Who the caller is (docs/auth.md) travels on in the request's
// context as an identity.Subject.
type ingress struct {
	next http.Handler
	// probes answers GET /healthz and /readyz without a token: Kubernetes
	// and Nomad probes cannot send a secret header, and orchestrators
	// need the status code, not the details.
	probes    http.Handler
	logger    interface{ Warn(string, ...any) }
	needToken bool
	wantToken [32]byte // SHA-256 of the token: compared in constant time

	// oidc, when set, admits the JWTs of the host's OpenID provider
	// beside the shared token; metadata is the protected resource
	// metadata (RFC 9728) pointing clients at it.
	oidc     *identity.OIDC
	metadata http.Handler
	// authed is next behind the go-sdk's bearer token middleware, whose
	// TokenInfo is the one way to hand the go-sdk a request's user: its
	// streamable handler binds a session to the user that opened it and
	// passes the TokenInfo to every request's handler (gateway).
	authed http.Handler
	// localUser, when set, is the local user's subject: the caller of a
	// request that carries the local operator credential (localsock.go).
	localUser func() *identity.Subject
	// door holds the local operator credential and tells a server's
	// process from the operator (localsock.go).
	door *door
}

func newIngress(token string, logger interface{ Warn(string, ...any) }, next http.Handler) *ingress {
	in := &ingress{next: next, logger: logger, needToken: token != "", wantToken: sha256.Sum256([]byte(token))}
	in.authed = auth.RequireBearerToken(func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
		s := identity.FromContext(ctx)
		return &auth.TokenInfo{UserID: s.Key(), Scopes: s.Scopes, Extra: map[string]any{identity.TokenInfoKey: s}}, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(next)
	return in
}

// withOIDC makes in admit the tokens o verifies and serve the protected
// resource metadata that names o's issuer.
func (in *ingress) withOIDC(o *identity.OIDC) {
	in.oidc = o
	in.metadata = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodOptions {
			w.Header().Set("Allow", "GET, HEAD, OPTIONS")
			http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
			return
		}
		auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
			Resource:               resourceURL(o.Audience(), r),
			AuthorizationServers:   []string{o.Issuer()},
			ScopesSupported:        o.ScopesSupported(),
			BearerMethodsSupported: []string{"header"},
			ResourceName:           "mcpvisor",
		}).ServeHTTP(w, r)
	})
}

// The protected resource metadata paths (RFC 9728 §3.1): the path-suffixed
// form is the one for the resource /mcp; clients try both.
const (
	resourceMetadataPath    = "/.well-known/oauth-protected-resource"
	resourceMetadataPathMCP = resourceMetadataPath + "/mcp"
)

func (in *ingress) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// DNS rebinding: a page on evil.example whose name resolves to
	// 127.0.0.1 reaches a loopback listener with its own name as Host.
	if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && local != nil {
		if loopbackHost(local.String()) && !loopbackHost(r.Host) {
			in.logger.Warn("http request refused: Host header is not loopback on a loopback listener", "host", r.Host, "remote", r.RemoteAddr)
			http.Error(w, fmt.Sprintf("Forbidden: invalid Host header %q", r.Host), http.StatusForbidden)
			return
		}
	}
	if origin := r.Header.Get("Origin"); origin != "" && !loopbackOrigin(origin) {
		in.logger.Warn("http request refused: origin not allowed", "origin", origin, "remote", r.RemoteAddr)
		http.Error(w, "Forbidden: origin not allowed", http.StatusForbidden)
		return
	}
	// The metadata is how a client without a token learns where to get
	// one: public, like the provider's own discovery document.
	if in.metadata != nil && (r.URL.Path == resourceMetadataPath || r.URL.Path == resourceMetadataPathMCP) {
		in.metadata.ServeHTTP(w, r)
		return
	}
	// The operator's door (localsock.go): a server's process is refused
	// on the control socket whatever it sends; the local operator
	// credential makes the local user.
	if in.refuseServerPeer(w, r) || in.refuseForeignPeer(w, r) {
		return
	}
	if in.serveOperator(w, r) {
		return
	}
	if !in.needToken && in.oidc == nil {
		// A host without auth admits every caller that reaches it as
		// anonymous; the operator endpoints refuse anonymous callers.
		in.next.ServeHTTP(w, r)
		return
	}
	if in.probes != nil && isProbe(r) {
		in.probes.ServeHTTP(w, r)
		return
	}
	s, ok := in.authenticate(w, r)
	if !ok {
		return
	}
	in.authed.ServeHTTP(w, r.WithContext(identity.NewContext(r.Context(), s)))
}

// authenticate returns the caller of r, or answers r with why not: 401
// without a usable token, 403 for a token without the required scopes,
// 503 when the OpenID provider cannot be reached to check one. The
// WWW-Authenticate challenge of a 401 or 403 follows RFC 6750 §3 and,
// with oidc, names the resource metadata (RFC 9728 §5.1).
func (in *ingress) authenticate(w http.ResponseWriter, r *http.Request) (*identity.Subject, bool) {
	got, present := bearerToken(r.Header.Get("Authorization"))
	if in.needToken {
		sum := sha256.Sum256([]byte(got))
		if subtle.ConstantTimeCompare(sum[:], in.wantToken[:]) == 1 && present {
			return &identity.Subject{Via: identity.ViaToken}, true
		}
	}
	if in.oidc == nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="mcpvisor"`)
		http.Error(w, "Unauthorized: a valid bearer token is required", http.StatusUnauthorized)
		return nil, false
	}
	challenge := func(params ...string) {
		params = append([]string{`realm="mcpvisor"`, fmt.Sprintf("resource_metadata=%q", resourceMetadataURL(in.oidc.Audience(), r))}, params...)
		if sc := in.oidc.Scopes(); len(sc) > 0 {
			params = append(params, fmt.Sprintf("scope=%q", strings.Join(sc, " ")))
		}
		w.Header().Set("WWW-Authenticate", "Bearer "+strings.Join(params, ", "))
	}
	if !present {
		// No credentials: no error code (RFC 6750 §3.1), just where to
		// get a token.
		challenge()
		http.Error(w, "Unauthorized: a bearer token is required; the resource metadata named in WWW-Authenticate says which authorization server issues it (docs/auth.md)", http.StatusUnauthorized)
		return nil, false
	}
	s, err := in.oidc.Verify(r.Context(), got)
	switch {
	case err == nil:
		return s, true
	case errors.Is(err, identity.ErrInsufficientScope):
		in.logger.Warn("http request refused: token lacks a required scope", "subject", s.ID, "error", err, "remote", r.RemoteAddr)
		challenge(`error="insufficient_scope"`, fmt.Sprintf("error_description=%q", describe(err)))
		http.Error(w, "Forbidden: "+err.Error()+"; ask the authorization server for a token with the scopes in WWW-Authenticate", http.StatusForbidden)
	case errors.Is(err, identity.ErrProviderUnavailable):
		in.logger.Warn("http request refused: cannot verify its token", "issuer", in.oidc.Issuer(), "error", err, "remote", r.RemoteAddr)
		w.Header().Set("Retry-After", "10")
		http.Error(w, "Service Unavailable: mcpvisor cannot reach its OpenID provider to verify the token; retry later (the host's log says why)", http.StatusServiceUnavailable)
	default:
		in.logger.Warn("http request refused: invalid token", "error", err, "remote", r.RemoteAddr)
		challenge(`error="invalid_token"`, fmt.Sprintf("error_description=%q", describe(err)))
		http.Error(w, "Unauthorized: "+err.Error()+"; get a new token from the authorization server named in the resource metadata", http.StatusUnauthorized)
	}
	return nil, false
}

// maxErrorDescription bounds the error_description of a challenge: it can
// quote claims of the client's token (an unexpected iss or aud).
const maxErrorDescription = 256

// describe is err as an error_description.
func describe(err error) string {
	d := err.Error()
	if len(d) > maxErrorDescription {
		d = strings.ToValidUTF8(d[:maxErrorDescription], "") + "…"
	}
	return d
}

// resourceURL is the resource identifier of /mcp: the audience when it is
// an http(s) URL (the public URL, behind any proxy), else the URL the
// request reached.
func resourceURL(audience string, r *http.Request) string {
	if u, err := url.Parse(audience); err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" {
		return audience
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + "/mcp"
}

// resourceMetadataURL is where the metadata of resourceURL is: the
// well-known path inserted between its host and its path (RFC 9728 §3.1).
func resourceMetadataURL(audience string, r *http.Request) string {
	u, err := url.Parse(resourceURL(audience, r))
	if err != nil {
		return ""
	}
	u.Path = resourceMetadataPath + strings.TrimSuffix(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	return u.String()
}

// isProbe reports whether r is a health probe that sends no credentials:
// a GET or HEAD of /healthz or /readyz without an Authorization header. A
// request with a wrong token is refused like any other.
func isProbe(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		(r.URL.Path == "/healthz" || r.URL.Path == "/readyz") &&
		r.Header.Get("Authorization") == ""
}

// loopbackHost reports whether a host or host:port names the loopback
// interface: "localhost" or a loopback IP (the go-sdk's own rule).
func loopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = strings.Trim(hostport, "[]")
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// loopbackOrigin reports whether origin is http(s) on a loopback host, on
// any port.
func loopbackOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return loopbackHost(u.Host)
}

// bearerToken extracts the token of an "Authorization: Bearer <token>"
// value; the scheme is case-insensitive.
func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
