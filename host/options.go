package host

import (
	"context"
	"net/http"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpvisor/mcpvisor/host/internal/telemetry"
)

// Option configures a Host.
type Option func(*options)

type options struct {
	logger     hclog.Logger
	onStatus   func(ServerStatus)
	httpClient *http.Client
	middleware []func(http.Handler) http.Handler
	tokenStore string
	noMetrics  bool
	tracer     trace.TracerProvider
	operator   LocalOperator
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

// WithMetrics turns the host's Prometheus metrics on (the default) or off.
// Off, Handler answers /metrics with 404, Collector returns nil, and status
// shows no call counts. See docs/operations.md for the metrics.
func WithMetrics(enabled bool) Option {
	return func(o *options) { o.noMetrics = !enabled }
}

// WithTracerProvider traces every operation forwarded upstream with tp: a
// span per tools/call, resources/read and prompts/get, a child of the
// downstream's W3C trace context (its _meta.traceparent, or the HTTP
// request's traceparent header), with child spans for waits, reconnects
// and retries. The span's context is passed upstream in _meta and, to
// HTTP upstreams, as the traceparent header. The host never sets the
// global OpenTelemetry provider. Default: no tracing.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracer = tp }
}

// TracerProviderFromEnv returns a tracer provider that exports spans over
// OTLP/HTTP as the standard OTEL_EXPORTER_OTLP_* variables configure it
// (endpoint, headers, TLS, timeout, compression), for WithTracerProvider.
// It returns nil, and tracing stays off, unless OTEL_EXPORTER_OTLP_ENDPOINT
// or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; OTEL_SDK_DISABLED=true and
// OTEL_TRACES_EXPORTER=none turn it off too. Call shutdown before exiting to
// flush the spans still buffered.
func TracerProviderFromEnv(ctx context.Context) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	return telemetry.TracingFromEnv(ctx, Version)
}

// LocalOperator is how the local user proves at the host's door that it
// is the operator (docs/auth.md, "The operator credential"): a secret the
// user can read and no server can, sent as the bearer token. `mcpvisor
// run` keeps it in a file of the user's runtime directory (0600, in the
// 0700 directory of the control sockets), and the CLI sends it over the
// control socket.
type LocalOperator struct {
	// Token is the operator credential: a request whose bearer token it
	// is, is the local user and an operator — unless it comes from a
	// process an mcpvisor host started. "": no local operator; the
	// operator endpoints answer the host block's token and OIDC
	// operators only.
	Token string
	// OtherHosts returns the pids of the user's other mcpvisor hosts: a
	// process one of them started is refused like one this host started.
	// nil: this host's own processes only.
	OtherHosts func() []int
}

// WithLocalOperator sets the local operator's credential. Without it, no
// request is the local user by its uid or by the socket it reached: a
// process mcpvisor started is never its operator (docs/security.md).
func WithLocalOperator(op LocalOperator) Option {
	return func(o *options) { o.operator = op }
}
