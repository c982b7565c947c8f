package host

import (
	"net/http"

	"github.com/hashicorp/go-hclog"
)

// Option configures a Host.
type Option func(*options)

type options struct {
	logger     hclog.Logger
	onStatus   func(ServerStatus)
	httpClient *http.Client
	middleware []func(http.Handler) http.Handler
	tokenStore string
}

// WithLogger sets the host's logger. Default: a null logger.
func WithLogger(l hclog.Logger) Option { return func(o *options) { o.logger = l } }

// WithStatusHandler registers a function called on every server state
// change (starting, ready, reconnecting, parked, stopped). It runs on the
// server's supervising goroutine and must not block.
func WithStatusHandler(f func(ServerStatus)) Option {
	return func(o *options) { o.onStatus = f }
}

// WithHTTPClient sets the client HTTP and SSE upstreams are reached with:
// for TLS settings, client certificates (mTLS), proxies or a custom
// transport. mcpvisor adds each block's headers and its 401 handling on top
// of the client's transport; the client's Timeout should stay zero, since
// calls are bounded by each server's timeout and SSE streams stay open.
// Default: net/http's default transport with a larger idle pool and a
// 1 MiB response header limit.
func WithHTTPClient(c *http.Client) Option {
	return func(o *options) { o.httpClient = c }
}

// WithMiddleware wraps every downstream HTTP request Handler serves — every
// MCP request, tools/call included, and /status and /healthz — after the
// host's own ingress checks (Host and Origin, bearer token) have passed.
// Several middlewares run in the order given, the first outermost.
func WithMiddleware(mw func(http.Handler) http.Handler) Option {
	return func(o *options) { o.middleware = append(o.middleware, mw) }
}

// WithTokenStore sets the directory OAuth tokens are kept in, for servers
// with an oauth block. Default: $XDG_STATE_HOME/mcpvisor, else the user's
// state directory (~/.local/state/mcpvisor on Linux). `mcpvisor login` must
// write to the same directory (LoginOptions.TokenStore).
func WithTokenStore(dir string) Option {
	return func(o *options) { o.tokenStore = dir }
}
