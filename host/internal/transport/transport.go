// Package transport turns a server block into live connections. Every
// transport — a stdio subprocess, streamable HTTP, legacy SSE, a go-plugin
// binary — yields the same thing: a Link carrying a go-sdk mcp.Transport and a
// Done channel that closes the moment the link is known to be dead. The
// supervisor in package upstream treats all of them alike.
package transport

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/time/rate"

	"github.com/mcpvisor/mcpvisor/host/config"
	bounds "github.com/mcpvisor/mcpvisor/host/internal/limits"
	"github.com/mcpvisor/mcpvisor/host/internal/oauth"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// A Link is one connection attempt's worth of upstream: for stdio, one
// process; for HTTP, one client transport; for a plugin, one plugin process.
type Link interface {
	// Transport is handed to mcp.Client.Connect exactly once.
	Transport() mcp.Transport
	// Done is closed when the link is known dead without anyone having
	// called Close: the process exited, the plugin died. HTTP links never
	// close it; their death shows as a failed session instead.
	Done() <-chan struct{}
	// Err says why Done closed. It wraps recovery.ErrProcessExited for
	// process deaths.
	Err() error
	// Close tears the link down (for processes: the whole process group),
	// waiting at most until ctx is done.
	Close(ctx context.Context) error
}

// ProcessLink is a Link over a child process (stdio, plugins): its
// death is observed, so a broken connection means the process is gone or
// going, and Pid names it in status.
type ProcessLink interface {
	Link
	Pid() int
}

// A Dialer makes new Links for one server block.
type Dialer interface {
	Dial(ctx context.Context) (Link, error)
}

// PluginDialerFunc builds a Dialer for a plugin block. It is set by the
// plugin adapter package so this package need not import go-plugin.
type PluginDialerFunc func(srv *config.Server, logger hclog.Logger) (Dialer, error)

// Options are the knobs shared by all dialers.
type Options struct {
	// Logger receives the server's own output (stderr lines) and transport
	// events. It should already be named for the server.
	Logger hclog.Logger
	// HTTPClient is used for HTTP upstreams; nil means a default client.
	HTTPClient *http.Client
	// Plugin builds dialers for plugin blocks; nil makes plugin blocks an error.
	Plugin PluginDialerFunc
	// TokenStore holds the OAuth tokens of servers with an oauth block;
	// required for those.
	TokenStore *oauth.Store
	// ResultBudget bounds the upstream response bytes held at once across
	// all the servers sharing it (the host's max_inflight_bytes); nil
	// gives the server a budget of its own of the default size.
	ResultBudget *ResultBudget
	// LimitStop, if set, is told when a stdio server's process group is
	// stopped for going over its memory limit (the error wraps
	// ErrMemoryLimit), for the audit log.
	LimitStop func(server string, err error)
	// StderrTotal bounds, in bytes a second, what the stderr of every
	// stdio server sharing it adds to the log (each has its own bound
	// too); nil: only each server's own.
	StderrTotal *rate.Limiter
	// LimitHits counts the stderr lines over those bounds.
	LimitHits *bounds.Hits
	// StderrLog, if set, keeps a stdio server's stderr lines within those
	// bounds, for `mcpvisor logs` (ProcessConfig.StderrLog).
	StderrLog StderrLog
}

// A LoginWaiter is a Dialer whose credentials come from `mcpvisor login`.
// A supervisor whose server needs a login polls HasNewLogin instead of
// reconnecting into the same refusal.
type LoginWaiter interface {
	// HasNewLogin reports whether tokens newer than the refused ones have
	// been stored.
	HasNewLogin() bool
}

// NewDialer returns the Dialer for a server block.
func NewDialer(srv *config.Server, opts Options) (Dialer, error) {
	logger := opts.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	switch srv.Transport {
	case config.TransportStdio, "":
		if srv.Command == "" {
			return nil, fmt.Errorf("server %q: no command to run", srv.Name)
		}
		return &stdioDialer{cfg: ProcessConfig{
			Command: srv.Command,
			Args:    srv.Args,
			Env:     ChildEnv(srv.Env),
			Dir:     srv.Cwd,
			Logger:  logger,

			MaxMessageSize: messageLimit(srv),
			Server:         srv.Name,
			Sandbox:        srv.Sandbox,
			Limits:         srv.Limits,
			OnLimitStop:    limitStop(srv.Name, opts.LimitStop),
			StderrTotal:    opts.StderrTotal,
			LimitHits:      opts.LimitHits,
			StderrLog:      opts.StderrLog,
		}}, nil
	case config.TransportStreamable, config.TransportSSE:
		hc := opts.HTTPClient
		if hc == nil {
			hc = &http.Client{Transport: DefaultHTTPTransport()}
		}
		var tokens *oauth.Source
		if srv.OAuth != nil {
			if opts.TokenStore == nil {
				return nil, fmt.Errorf("server %q: has an oauth block but no token store is configured", srv.Name)
			}
			// Token requests go out on the embedder's client, without the
			// block's headers and without tokens of their own.
			tokens = oauth.NewSource(oauth.SourceConfig{Server: srv, Store: opts.TokenStore, HTTPClient: hc, Logger: logger})
		}
		d := &httpDialer{url: srv.URL, sse: srv.Transport == config.TransportSSE, client: wrapClient(hc, srv.Headers, tokens), logger: logger}
		d.server, d.maxMessage, d.budget = srv.Name, messageLimit(srv), opts.ResultBudget
		if d.budget == nil {
			d.budget = NewResultBudget(0)
		}
		if tokens != nil && srv.OAuth.Interactive() {
			return &loginDialer{httpDialer: d, tokens: tokens}, nil
		}
		return d, nil
	case config.TransportPlugin:
		if opts.Plugin == nil {
			return nil, fmt.Errorf("server %q: plugin transports are not available in this build", srv.Name)
		}
		return opts.Plugin(srv, logger)
	default:
		return nil, fmt.Errorf("server %q: unknown transport %q", srv.Name, srv.Transport)
	}
}

// limitStop binds a LimitStop hook to its server; nil without one.
func limitStop(server string, hook func(string, error)) func(error) {
	if hook == nil {
		return nil
	}
	return func(err error) { hook(server, err) }
}

// stdioDialer starts one process per Dial.
type stdioDialer struct{ cfg ProcessConfig }

func (d *stdioDialer) Dial(ctx context.Context) (Link, error) {
	return StartProcess(d.cfg)
}

// httpDialer makes a fresh client transport per Dial; the HTTP client (and
// its connection pool) is shared across dials.
type httpDialer struct {
	url    string
	sse    bool
	client *http.Client
	logger hclog.Logger

	// Bounds on the bytes the server sends (bytes.go).
	server     string
	maxMessage int64
	budget     *ResultBudget
}

func (d *httpDialer) Dial(ctx context.Context) (Link, error) {
	l := &httpLink{done: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	// The link's own client: the same pool, its event streams relayed to
	// this link's session (relay.go).
	client := *d.client
	client.Transport = &firstAnswer{link: l, sse: d.sse, base: &boundedRoundTripper{
		base:   &relayingRoundTripper{base: d.client.Transport, relay: &l.relay, logger: d.logger},
		server: d.server, limit: d.maxMessage, budget: d.budget, logger: d.logger,
	}}
	// Set explicitly: the go-sdk v1.8.0 streamable client passes a zero on
	// as "no limit", so an upstream's endless event was read into memory
	// whole (a 40 MB one raised RSS by 125 MB). Events are bounded by the
	// server's limit before the go-sdk sees them (events.go); its own
	// bound is a backstop just above.
	maxEventSize := int(d.maxMessage + sdkEventSlack)
	if d.sse {
		l.t = &sseTransport{t: &mcp.SSEClientTransport{Endpoint: d.url, HTTPClient: &client, MaxEventSize: maxEventSize}, linkCtx: l.ctx}
	} else {
		// MaxRetries 1: one resumption of an SSE stream the server ended
		// (SEP-1699: after the retry it sent, with Last-Event-ID), which is
		// how a server with an event store hands a long call's result over
		// a new GET; without it the call's result is lost. A resumption
		// that fails, or a stream that ends again without progress, fails
		// the session at once: the SDK does not quietly retry a dead
		// session for us, the supervisor owns reconnects and counts them.
		l.t = &mcp.StreamableClientTransport{Endpoint: d.url, HTTPClient: &client, MaxRetries: streamResumptions, MaxEventSize: maxEventSize}
	}
	return l, nil
}

// loginDialer is an HTTP dialer whose tokens come from `mcpvisor login`.
type loginDialer struct {
	*httpDialer
	tokens *oauth.Source
}

func (d *loginDialer) HasNewLogin() bool { return d.tokens.HasNewLogin() }

type httpLink struct {
	t      mcp.Transport
	done   chan struct{}
	ctx    context.Context // the link's lifetime: ends with Close
	cancel context.CancelFunc
	relay  atomic.Pointer[relay] // set by RelayNotifications
	// asked is set by the link's first request; refused is the error of
	// its answer when that was not a success (firstAnswer).
	asked   atomic.Bool
	refused atomic.Pointer[error]
}

// ConnectError says why the link's first request (the initialize POST,
// or a legacy SSE server's GET) was refused, in HTTP terms: the go-sdk's
// own error for it is only the status text ("Not Found"). Nil when it
// was not refused.
func (l *httpLink) ConnectError() error {
	if e := l.refused.Load(); e != nil {
		return *e
	}
	return nil
}

// firstAnswer records how the server answered a link's first request when
// that was an HTTP error, with the status, the URL and what to check, for
// the supervisor's connect error (docs/operations.md, "Common errors").
type firstAnswer struct {
	base http.RoundTripper
	link *httpLink
	sse  bool
}

func (f *firstAnswer) RoundTrip(req *http.Request) (*http.Response, error) {
	first := f.link.asked.CompareAndSwap(false, true)
	resp, err := f.base.RoundTrip(req)
	if !first || err != nil || resp.StatusCode < 300 {
		return resp, err
	}
	e := fmt.Errorf("%s %s answered HTTP %d %s", req.Method, recovery.Redact(req.URL.String()), resp.StatusCode, http.StatusText(resp.StatusCode))
	switch resp.StatusCode {
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		if f.sse {
			e = fmt.Errorf("%w: is the URL the server's SSE endpoint? Legacy SSE servers usually serve /sse; one that speaks streamable HTTP (often at /mcp) needs no transport = \"sse\"", e)
		} else {
			e = fmt.Errorf("%w: is the URL the server's MCP endpoint? Streamable HTTP servers usually serve /mcp; a legacy server at /sse needs transport = \"sse\"", e)
		}
	case http.StatusBadRequest, http.StatusNotAcceptable, http.StatusUnsupportedMediaType:
		if !f.sse {
			e = fmt.Errorf("%w: does the URL speak MCP's streamable HTTP? A legacy SSE server needs transport = \"sse\"", e)
		}
	}
	f.link.refused.Store(&e)
	return resp, nil
}

func (l *httpLink) Transport() mcp.Transport { return l.t }
func (l *httpLink) Done() <-chan struct{}    { return l.done }
func (l *httpLink) Err() error               { return nil }

// Close ends what the link holds open (a legacy SSE stream); the session's
// Close releases the SDK's side.
func (l *httpLink) Close(context.Context) error {
	l.cancel()
	return nil
}

// sseTransport connects the SDK's legacy SSE client so that its event
// stream lives as long as the link. The SDK ties that GET request to the
// context Connect is given, and the supervisor's connect context ends when
// the initialize handshake is done (or at connect_timeout): the stream
// would end with it, and the server with it. The connect context still
// bounds opening the stream.
type sseTransport struct {
	t       *mcp.SSEClientTransport
	linkCtx context.Context
}

func (s *sseTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	streamCtx, cancel := context.WithCancel(s.linkCtx)
	stop := context.AfterFunc(ctx, cancel)
	conn, err := s.t.Connect(streamCtx)
	if !stop() {
		// ctx ended while the stream was opening.
		cancel()
		if err == nil {
			conn.Close()
			err = ctx.Err()
		}
		return nil, err
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return conn, nil
}

// upstreamRoundTripper adds the block's headers (and, with an oauth block,
// the access token) to every request and turns an HTTP 401 into an error
// wrapping recovery.ErrUnauthorized, and a 403 insufficient_scope challenge
// to our token into one wrapping recovery.ErrInsufficientScope (the Source
// keeps the scopes for the next login), so auth failures are typed at the
// source instead of recognised by their text. The go-sdk transports'
// OAuthHandler hook is not used: it exists on the streamable transport only,
// and it retries a 401 inside the transport, where the supervisor's auth
// path (reconnect, retry once, needs_login) could not see it.
type upstreamRoundTripper struct {
	base    http.RoundTripper
	headers map[string]string
	tokens  *oauth.Source // nil without an oauth block
}

func (h *upstreamRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	var token string
	if h.tokens != nil {
		var err error
		if token, err = h.tokens.Token(req.Context()); err != nil {
			return nil, err
		}
	}
	if len(h.headers) > 0 || token != "" {
		req = req.Clone(req.Context())
		for k, v := range h.headers {
			req.Header.Set(k, v)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
	}
	resp, err := h.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusUnauthorized {
		resp.Body.Close()
		if token != "" {
			// The next request (the supervisor's reconnect) refreshes.
			h.tokens.Refused(token)
		}
		return nil, fmt.Errorf("%w: %s %s", recovery.ErrUnauthorized, req.Method, recovery.Redact(req.URL.String()))
	}
	if resp.StatusCode == http.StatusForbidden && token != "" {
		if scopes, ok := insufficientScope(resp.Header); ok {
			resp.Body.Close()
			return nil, h.tokens.StepUp(token, scopes)
		}
	}
	return resp, nil
}

// insufficientScope reports whether a 403's challenge is the MCP
// authorization spec's step-up signal, a Bearer challenge with
// error="insufficient_scope", and the scopes it asks for.
func insufficientScope(h http.Header) ([]string, bool) {
	challenges, err := oauthex.ParseWWWAuthenticate(h.Values("WWW-Authenticate"))
	if err != nil {
		return nil, false
	}
	for _, c := range challenges {
		if c.Scheme == "bearer" && c.Params["error"] == "insufficient_scope" {
			return strings.Fields(c.Params["scope"]), true
		}
	}
	return nil, false
}

func wrapClient(c *http.Client, headers map[string]string, tokens *oauth.Source) *http.Client {
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	cc := *c
	cc.Transport = &upstreamRoundTripper{base: base, headers: headers, tokens: tokens}
	return &cc
}

const (
	// streamResumptions is how often the go-sdk resumes an SSE stream the
	// server ended before the response came, without progress in between.
	streamResumptions = 1

	// maxIdleConnsPerUpstream keeps enough idle connections for concurrent
	// calls to one HTTP upstream; net/http's default of 2 would open a new
	// connection for most calls under load.
	maxIdleConnsPerUpstream = 64

	// maxUpstreamHeaderBytes bounds an upstream's response header block
	// (net/http's default is 10 MiB): an upstream that answers with an
	// endless header block gets an error, not mcpvisor's memory.
	maxUpstreamHeaderBytes = 1 << 20
)

// messageLimit is the server's max_message_size, or the default for a
// Config built in Go that left it zero.
func messageLimit(srv *config.Server) int64 {
	if srv.MaxMessageSize > 0 {
		return srv.MaxMessageSize
	}
	return config.DefaultMaxMessageSize
}

// DefaultHTTPTransport returns the transport HTTP upstreams use when the
// embedder supplies no client: net/http's defaults (proxy from the
// environment, dial and TLS handshake timeouts, at most five informational
// responses in a row), a larger idle pool and a tighter header limit.
func DefaultHTTPTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 0 // no global cap; the per-host cap bounds it
	t.MaxIdleConnsPerHost = maxIdleConnsPerUpstream
	t.MaxResponseHeaderBytes = maxUpstreamHeaderBytes
	return t
}
