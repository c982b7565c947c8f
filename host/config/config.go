// Package config holds mcpvisor's HCL schema: the host block, the server
// blocks, their defaults and their validation.
//
// A Config is plain data. Everything that acts on it (supervisors, the
// registry, the gateway) lives elsewhere, so a Config can be built from Go
// structs by an embedding program just as well as loaded from a file.
package config

import (
	"time"

	"github.com/hashicorp/hcl/v2"
)

// Defaults applied when a block leaves a value unset. They follow the
// behaviour contract in docs/design.md §4 and §5.
const (
	// DefaultListen is where `mcpvisor run` serves streamable HTTP when the
	// host block has no listen attribute and --stdio is not given.
	DefaultListen = "127.0.0.1:8811"

	// DefaultTimeout bounds one upstream call.
	DefaultTimeout = 300 * time.Second

	// DefaultConnectTimeout bounds one connect attempt (spawn + initialize).
	DefaultConnectTimeout = 60 * time.Second

	// DefaultMaxRetries is the budget of consecutive failed (re)connects
	// before a server is parked.
	DefaultMaxRetries = 5

	// DefaultMaxBackoff caps the doubling reconnect backoff.
	DefaultMaxBackoff = 60 * time.Second

	// DefaultParkedRetry is how often a parked server tries again on its own.
	DefaultParkedRetry = 300 * time.Second

	// DefaultHealthyAfter is how long a session must stay up before the
	// retry budget resets even without a successful call. It guards against
	// a server that connects and drops at once respawning forever.
	DefaultHealthyAfter = 30 * time.Second

	// DefaultUnresponsiveAfter is how many consecutive call timeouts with
	// no answer in between replace a server that no longer answers.
	DefaultUnresponsiveAfter = 2

	// DefaultHealthTimeout bounds a health ping when the health block sets
	// only interval (at most half the interval).
	DefaultHealthTimeout = 5 * time.Second

	// MinHealthInterval is the shortest health interval: pings more often
	// than that cost the server work and say nothing a call would not.
	MinHealthInterval = time.Second

	// DefaultBreakerThreshold is the number of consecutive transport
	// failures that opens a server's circuit breaker.
	DefaultBreakerThreshold = 3

	// DefaultBreakerCooldown is how long an open breaker fails calls fast
	// before letting one half-open probe through.
	DefaultBreakerCooldown = 60 * time.Second

	// DefaultSeparator joins a server's prefix and an upstream tool name.
	DefaultSeparator = "__"

	// DefaultSessionIdleTimeout closes downstream HTTP sessions abandoned
	// without a DELETE.
	DefaultSessionIdleTimeout = 30 * time.Minute

	// DefaultMaxSessions bounds the downstream HTTP sessions open at once.
	DefaultMaxSessions = 10000
	// DefaultMaxSessionsPerSubject bounds the downstream HTTP sessions of
	// one OIDC subject: far more than one client needs, and a hundredth of
	// DefaultMaxSessions, so one subject cannot take them all.
	DefaultMaxSessionsPerSubject = 100

	// DefaultMaxPendingRequests bounds the sampling, elicitation and roots
	// requests one server may have waiting on downstream clients at once.
	DefaultMaxPendingRequests = 16

	// DefaultDrain is how long `mcpvisor run` keeps serving after SIGTERM
	// with /readyz answering 503: long enough for a load balancer checking
	// readiness every second or two to take the replica out of rotation.
	DefaultDrain = 5 * time.Second

	// Downstream request bounds (docs/security.md, "Downstream requests
	// and bodies").

	// DefaultBodyTimeout is how long a downstream request's body may take
	// to arrive: a client on a slow link sends 4 MiB in far less, and a
	// connection that trickles its body cannot hold memory for longer.
	DefaultBodyTimeout = 30 * time.Second

	// DefaultMaxBodyBytesInflight bounds the memory held by request bodies
	// still arriving, host-wide: sixteen bodies of the largest size a
	// request may have (4 MiB).
	DefaultMaxBodyBytesInflight = 64 << 20

	// DefaultMaxInflight bounds the stateless (2026-07-28) requests served
	// at once; each holds a goroutine, its body and an upstream call.
	DefaultMaxInflight = 256

	// DefaultMaxInflightPerSession bounds the requests one session-based
	// (2025-11-25 and older) HTTP session has in flight at once.
	DefaultMaxInflightPerSession = 64

	// DefaultWriteTimeout is how long a write of an answer to an HTTP
	// client may take: a client that does not read for this long loses
	// its answer and its stream, and the bytes held for it are released.
	DefaultWriteTimeout = 30 * time.Second

	// Bounds on bytes from upstream servers (docs/security.md, "Bytes from
	// upstream servers").

	// DefaultMaxMessageSize bounds one message from an upstream: a JSON
	// response body, an event of an event stream, a stdio line. It is the
	// go-sdk's own default for event streams and stdio lines.
	DefaultMaxMessageSize int64 = 16 << 20
	// DefaultMaxInflightBytes bounds the upstream response bytes held at
	// once across all servers and calls: sixteen results at the default
	// max_message_size.
	DefaultMaxInflightBytes int64 = 256 << 20
)

// Catalog bounds (the server block's catalog block; docs/security.md,
// "Catalogs"). An upstream chooses how much it lists; these keep one
// server's catalog from taking the host's memory.
const (
	// DefaultMaxTools bounds the tools kept from one server's tools/list.
	DefaultMaxTools = 10000
	// DefaultMaxResources bounds the resources, and separately the
	// resource templates, kept from one server.
	DefaultMaxResources = 10000
	// DefaultMaxPrompts bounds the prompts kept from one server.
	DefaultMaxPrompts = 10000
	// DefaultCatalogMaxBytes bounds the encoded size of everything one
	// server lists (tools, resources, templates and prompts together).
	DefaultCatalogMaxBytes = 32 << 20
	// DefaultMaxPages bounds the pages one list operation follows.
	DefaultMaxPages = 1000
)

// Transport names a server block's transport.
type Transport string

// The transports a server block can use.
const (
	// TransportStdio runs `command` as a managed subprocess.
	TransportStdio Transport = "stdio"
	// TransportStreamable connects to `url` with streamable HTTP.
	TransportStreamable Transport = "streamable-http"
	// TransportSSE connects to `url` with the legacy HTTP+SSE transport.
	TransportSSE Transport = "sse"
	// TransportPlugin launches a go-plugin transport binary.
	TransportPlugin Transport = "plugin"
)

// Config is one loaded configuration file.
type Config struct {
	// Filename is the file the configuration came from ("" when built in Go).
	Filename string

	// Host holds the host block's settings; defaults when the block is absent.
	Host Host

	// Servers are the server blocks in file order. Names are unique.
	Servers []*Server

	// Policies are the policy blocks in file order (docs/auth.md). With
	// none, every caller may use everything; with any, what no policy
	// allows a caller is denied to it.
	Policies []*Policy

	// Lock is the plugin lock file Load read beside the configuration file
	// (see LockFileName); nil when there is none, and after Parse or for a
	// Config built in Go.
	Lock *Lock
}

// Host configures mcpvisor itself.
type Host struct {
	// Listen is the host:port for streamable HTTP at /mcp. Empty means the
	// attribute was not set; `mcpvisor run` then uses DefaultListen unless it
	// serves stdio.
	Listen string

	// LogLevel is an hclog level name: trace, debug, info, warn, error.
	LogLevel string

	// LogFormat is "text" or "json".
	LogFormat string

	// BearerToken, when set, is required as `Authorization: Bearer …` on
	// every downstream HTTP request. Required for a non-loopback Listen.
	BearerToken string

	// OIDC, when set, also admits clients with a JWT access token of an
	// OpenID provider (docs/auth.md). With BearerToken set too, either
	// is accepted.
	OIDC *OIDC

	// StdioSubject is the name of the local user, the caller of stdio
	// (`mcpvisor run --stdio`) and library calls, as policies see it:
	// "local" and "sub:<StdioSubject>" match it. Empty means the name of
	// the user mcpvisor runs as.
	StdioSubject string

	// Separator joins prefix and tool name in exposed names ("__").
	Separator string

	// Audit, when set, turns on the audit log of forwarded calls.
	Audit *Audit

	// Metrics bounds the tool label values of the Prometheus metrics.
	Metrics Metrics

	// Console bounds the web console at /ui.
	Console Console

	// Discovery says whether tools/list shows every tool or the tool
	// search meta-tools and the pinned tools (docs/discovery.md). A server
	// block's own Discovery.Mode wins for its tools.
	Discovery Discovery
	// Registry is the MCP registry `mcpvisor search` and `add -registry`
	// ask (docs/registry.md).
	Registry Registry

	// SessionIdleTimeout closes a downstream HTTP session that has seen no
	// request for this long (a client that went away without DELETE).
	// Zero means DefaultSessionIdleTimeout.
	SessionIdleTimeout time.Duration

	// MaxSessions bounds the downstream HTTP sessions open at once; a new
	// session past it is refused with HTTP 503. Zero means
	// DefaultMaxSessions.
	MaxSessions int

	// MaxSessionsPerSubject bounds the downstream HTTP sessions of one
	// OIDC subject (every holder of the shared token, and every anonymous
	// caller, is one caller that only MaxSessions bounds): at it, the subject's own least
	// recently used idle session makes room, and with none idle its new
	// session is refused with HTTP 429 while other subjects still get
	// theirs. Zero means DefaultMaxSessionsPerSubject.
	MaxSessionsPerSubject int

	// Replica names this process among the replicas of one deployment; it
	// labels the log, /status, every metric and every audit line. Empty
	// means the machine's hostname (on Kubernetes, the pod's name).
	Replica string

	// Drain is how long `mcpvisor run` keeps serving after SIGTERM while
	// /readyz answers 503, so that load balancers and orchestrators take
	// the replica out of rotation before it stops; then it finishes the
	// calls in flight and stops. Zero stops at once. Load sets
	// DefaultDrain when the attribute is unset; ApplyDefaults leaves it.
	Drain time.Duration

	// Downstream request bounds (docs/security.md, "Downstream requests
	// and bodies").

	// BodyTimeout is how long a downstream HTTP request's body may take to
	// arrive; a request whose body is slower gets 408 and its connection
	// is closed. Zero means DefaultBodyTimeout.
	BodyTimeout time.Duration

	// MaxBodyBytesInflight bounds the memory, host-wide, held by request
	// bodies still arriving; a request whose body would go past it waits
	// a moment, then gets 503 with Retry-After. Zero means
	// DefaultMaxBodyBytesInflight.
	MaxBodyBytesInflight int64

	// MaxInflight bounds the stateless (2026-07-28) MCP requests served at
	// once; one past it gets 503 with Retry-After. Zero means
	// DefaultMaxInflight.
	MaxInflight int
	// MaxInflightPerSession bounds the MCP requests one session-based
	// (2025-11-25 and older) HTTP session has in flight at once; one past
	// it gets 503 with Retry-After. Zero means
	// DefaultMaxInflightPerSession.
	MaxInflightPerSession int
	// WriteTimeout bounds each write to a downstream HTTP client: a client
	// that does not read its answer within it loses the answer and its
	// stream. Zero means DefaultWriteTimeout.
	WriteTimeout time.Duration
	// MaxInflightBytes bounds the bytes of upstream responses held at once
	// across all servers and calls, from the first byte read until the
	// call's result has been handed on. A call whose response does not fit
	// waits for room within its timeout, or fails as busy. Zero means
	// DefaultMaxInflightBytes.
	MaxInflightBytes int64
}

// Discovery modes (docs/discovery.md).
const (
	// DiscoveryList lists every tool in tools/list, as without the block.
	DiscoveryList = "list"
	// DiscoverySearch lists the meta-tools mcpvisor__search_tools and
	// mcpvisor__call_tool, and the pinned tools, instead of every tool.
	DiscoverySearch = "search"
)

// Discovery is a `discovery { … }` block, in the host block or in a server
// block (docs/discovery.md).
type Discovery struct {
	// Mode is DiscoveryList or DiscoverySearch. Empty means unset: list for
	// the host, the host's mode for a server.
	Mode string
	// Pin are globs (path.Match syntax) of tools that stay in tools/list in
	// search mode: in the host block over exposed names ("github__*" keeps
	// a server's tools listed), in a server block over the upstream's own
	// tool names.
	Pin []string
}

// Audit is the `audit { … }` block inside the host block: a JSON-lines
// record of every tools/call, resources/read and prompts/get.
type Audit struct {
	// Path is the audit file, relative to the config file's directory when
	// not absolute. It is created 0600 and appended to.
	Path string
	// IncludeArguments writes arguments and results themselves (secrets
	// redacted), not only their size and SHA-256.
	IncludeArguments bool
}

// Server is one `server "name" { … }` block.
type Server struct {
	// Name is the block label. It is unique within a Config.
	Name string

	// Transport is derived from which attributes are set: command → stdio,
	// url → streamable-http (or sse when transport = "sse"), plugin → plugin.
	Transport Transport

	// Command, Args, Env and Cwd describe a stdio subprocess.
	Command string
	Args    []string
	// Env is added to the small safe set of the host's variables; the host's
	// other variables never reach the child.
	Env map[string]string
	// Cwd is the child's working directory, relative to the config file's
	// directory when not absolute. Load sets it to the config file's
	// directory when the block has none; empty (a Config built in Go) means
	// the host's working directory.
	Cwd string

	// URL and Headers describe an HTTP upstream (streamable HTTP or SSE).
	URL     string
	Headers map[string]string

	// OAuth, when set, authorizes requests to an HTTP upstream with OAuth 2.1
	// access tokens (docs/design.md §14) instead of a static header.
	OAuth *OAuth

	// Plugin is set for a server backed by a go-plugin transport binary.
	Plugin *Plugin

	// Timeout bounds one call to this server.
	Timeout time.Duration
	// ConnectTimeout bounds one connect attempt.
	ConnectTimeout time.Duration

	// Prefix namespaces exposed names: "<prefix><separator><name>". It
	// defaults to Name; an explicit empty prefix exposes names unchanged.
	Prefix string

	// ProtocolVersion, when set, is the MCP protocol version requested from
	// the upstream instead of the newest the host speaks.
	ProtocolVersion string

	// Required makes the host unready (GET /readyz answers 503) while
	// this server is not ready.
	Required bool

	// Disabled is set by `enabled = false`: the block is validated but its
	// server is not started, and its tools are not listed; status shows it
	// as "disabled". The zero value (a Config built in Go) is enabled.
	Disabled bool

	// Tools filters which upstream tools are exposed.
	Tools Filter

	// Discovery overrides the host's discovery mode for this server's
	// tools; its Pin globs name upstream tool names that stay listed.
	Discovery Discovery

	// Reconnect configures respawn, backoff and parking.
	Reconnect Reconnect

	// Breaker configures the per-server circuit breaker.
	Breaker Breaker

	// Health configures a periodic MCP ping of a ready server; the zero
	// value sends none.
	Health Health

	// Catalog bounds what the server's list operations may hold.
	Catalog Catalog
	// MaxPendingRequests bounds the sampling, elicitation and roots
	// requests this server may have waiting on downstream clients at once;
	// past it the server's request is declined at once. Zero means
	// DefaultMaxPendingRequests.
	MaxPendingRequests int
	// MaxMessageSize bounds one message from this server in bytes: an HTTP
	// response body, one event of an event stream, one stdio line. A
	// larger result fails its call; the session stays up. Zero means
	// DefaultMaxMessageSize.
	MaxMessageSize int64

	// Sandbox, when set, confines the server's process with the kernel
	// (docs/sandbox.md): Landlock filesystem and TCP rules, and its own
	// network namespace for Network "none". Only for stdio servers.
	Sandbox *Sandbox
	// Limits bounds the server's process group (docs/sandbox.md). The
	// zero value sets no limit. Only for stdio servers.
	Limits Limits
	// IdleTimeout, when positive, stops the server after this long without
	// a call; its catalog stays listed and the next call starts it again
	// (docs/sandbox.md). Only for stdio servers.
	IdleTimeout time.Duration
	// MaxLifetime, when positive, restarts the server between calls once
	// its process is this old. Only for stdio servers.
	MaxLifetime time.Duration

	// DeclRange is where the block was declared, for errors that point back
	// into the file. Zero when built in Go.
	DeclRange hcl.Range

	// MissingEnv (set by LoadForRun only) names the environment variables
	// the block reads with env() and no default that were unset when the
	// file was loaded. Such a server is not started: it is held in the
	// needs_config state, saying what to set, while the others run. Its
	// other settings are incomplete and were not checked.
	MissingEnv []string
}

// Plugin is a `plugin "name" { … }` block inside a server block.
type Plugin struct {
	// Name is the block label: the transport's name.
	Name string
	// Command is the plugin binary, relative to the config file's directory
	// when not absolute.
	Command string
	// Args are passed to the plugin binary.
	Args []string
	// SHA256 is the expected hex checksum of Command. When set it wins over
	// the lock file's entry.
	SHA256 string
	// Config is the block's `config` object encoded as JSON, handed to the
	// plugin's Configure call unchanged.
	Config []byte
	// Lock is what the lock file beside the configuration file records for
	// this block. Load sets it for every plugin block, entry or not; it is
	// nil after Parse and for a Config built in Go.
	Lock *PluginLock
}

// PluginLock is a plugin block's view of its lock file.
type PluginLock struct {
	// ConfigFile is the configuration file the block is in; the lock file
	// is rewritten with `mcpvisor plugins lock -config ConfigFile`.
	ConfigFile string
	// File is the lock file's path.
	File string
	// Path is the binary the entry was written for, absolute; empty when
	// the lock file has no entry for this block (or does not exist).
	Path string
	// SHA256 is the locked hash, 64 lowercase hexadecimal digits; empty
	// when the lock file has no entry for this block (or does not exist).
	SHA256 string
}

// OIDC is the `oidc { … }` block of the host's auth block: mcpvisor's
// HTTP endpoint as an OAuth protected resource whose authorization server
// is Issuer (docs/auth.md).
type OIDC struct {
	// Issuer is the OpenID provider's issuer URL: its discovery document
	// and signing keys are fetched from there, and a token's iss must
	// equal it.
	Issuer string
	// Audience is the value a token's aud must contain: the resource
	// identifier, normally the public URL of /mcp.
	Audience string
	// Scopes, when set, must all be granted to a token (its scope or scp
	// claim); a token missing one gets 403 insufficient_scope.
	Scopes []string
	// ScopesSupported are the scopes the protected resource metadata
	// advertises (RFC 9728 scopes_supported) without requiring them; when
	// empty, Scopes are advertised.
	ScopesSupported []string
	// SubjectClaim and GroupsClaim name the claims that carry the
	// subject's identifier ("sub") and its groups ("groups").
	SubjectClaim string
	GroupsClaim  string
	// TrustUnverifiedEmail lets policies' email: selectors match a token
	// whose email_verified is not true. Off: an email is matched only
	// when this issuer says it verified it.
	TrustUnverifiedEmail bool
	// RequireTypAtJWT refuses a JWT whose header typ is not "at+jwt"
	// (RFC 9068 §4), so an ID token or another JWT of the issuer with the
	// right audience is not taken for an access token.
	RequireTypAtJWT bool
	// ClockSkew is how far a token's exp, nbf and iat may be off mcpvisor's
	// clock. Zero means DefaultOIDCClockSkew.
	ClockSkew time.Duration
	// IntrospectionURL, when set, is the provider's token introspection
	// endpoint (RFC 7662): a bearer token that is not a JWT (an opaque
	// token) is checked there, authenticated as ClientID with
	// ClientSecret (HTTP basic, client_secret_basic).
	IntrospectionURL string
	ClientID         string
	ClientSecret     string
}

// DefaultOIDCClockSkew is the default of the oidc block's clock_skew.
const DefaultOIDCClockSkew = time.Minute

// Defaults of the oidc block.
const (
	DefaultOIDCSubjectClaim = "sub"
	DefaultOIDCGroupsClaim  = "groups"
)

// The OAuth grants an oauth block may use.
const (
	// GrantAuthorizationCode gets tokens through a browser login
	// (`mcpvisor login NAME`) and refreshes them; the default.
	GrantAuthorizationCode = "authorization_code"
	// GrantClientCredentials gets tokens with the client's own credentials,
	// for machine-to-machine servers; no login.
	GrantClientCredentials = "client_credentials"
	// GrantCrossAppAccess gets tokens with an enterprise identity
	// provider's ID token: exchanged there for an ID-JAG (RFC 8693), which
	// the server's authorization server takes as a JWT bearer grant (RFC
	// 7523); no login.
	GrantCrossAppAccess = "cross_app_access"
)

// OAuth is the `oauth { … }` block of an HTTP server. Everything not set
// here is discovered from the server (RFC 9728 protected resource metadata,
// RFC 8414 / OpenID authorization server metadata).
type OAuth struct {
	// Grant is GrantAuthorizationCode, GrantClientCredentials or
	// GrantCrossAppAccess.
	Grant string
	// ClientID is a client registered with the authorization server ahead
	// of time. Empty means dynamic client registration (RFC 7591) or, with
	// ClientMetadataURL, a Client ID Metadata Document.
	ClientID string
	// ClientSecret is ClientID's secret; empty for a public client.
	ClientSecret string
	// ClientMetadataURL is an https URL serving a Client ID Metadata
	// Document, used as the client id where the server supports it.
	ClientMetadataURL string
	// Scopes are requested when neither the server's WWW-Authenticate
	// challenge nor its metadata's scopes_supported name any.
	Scopes []string
	// RedirectPort is the loopback port `mcpvisor login` listens on for the
	// authorization redirect; 0 picks a free one.
	RedirectPort int

	// PrivateKey is a PEM private key (EC P-256/P-384/P-521, RSA or
	// Ed25519) the client authenticates with instead of a secret, by a
	// signed JWT assertion (private_key_jwt, RFC 7523 §2.2); for the
	// client_credentials and cross_app_access grants.
	PrivateKey string
	// Issuer, when set, is the authorization server's issuer identifier as
	// its metadata states it, accepted even where it differs from the URL
	// the metadata was fetched from (RFC 8414 §3.3 refuses that otherwise).
	Issuer string
	// IDToken is the enterprise identity provider's ID token the
	// cross_app_access grant exchanges for an ID-JAG.
	IDToken string
	// IdPTokenEndpoint is the identity provider's token endpoint, where the
	// cross_app_access grant exchanges IDToken.
	IdPTokenEndpoint string
	// IdPClientID and IdPClientSecret identify mcpvisor at the identity
	// provider; the secret is empty for a public client.
	IdPClientID     string
	IdPClientSecret string
}

// Interactive reports whether the block's tokens come from `mcpvisor
// login` (the authorization_code grant) rather than from the host itself.
func (o *OAuth) Interactive() bool {
	return o.Grant == "" || o.Grant == GrantAuthorizationCode
}

// Filter selects upstream tools by glob (path.Match syntax). A name matching
// Include is always exposed ("include wins"); otherwise a name matching
// Exclude is hidden; with a non-empty Include, names matching neither are
// hidden.
type Filter struct {
	Include []string
	Exclude []string
}

// Reconnect is the `reconnect { … }` block.
type Reconnect struct {
	// MaxRetries is the budget of consecutive failed connects before parking.
	MaxRetries int
	// MaxBackoff caps the doubling backoff between attempts.
	MaxBackoff time.Duration
	// ParkedRetry is how often a parked server retries on its own.
	ParkedRetry time.Duration
	// HealthyAfter is how long a session must stay up to reset the budget.
	HealthyAfter time.Duration
	// UnresponsiveAfter is how many consecutive call timeouts with no
	// answer in between make a session unresponsive: its process is
	// replaced (a remote server's session is replaced), reason
	// "unresponsive".
	UnresponsiveAfter int
}

// Health is the `health { … }` block: a ready server that has answered
// nothing for Interval is sent an MCP ping; a ping that gets no answer
// within Timeout (nor anything else from the server meanwhile) makes the
// server unresponsive: its process is replaced (a remote server's session
// is), reason "unresponsive" (docs/supervision.md).
type Health struct {
	// Interval is how often a ping is due; zero sends none.
	Interval time.Duration
	// Timeout bounds one ping; it must be shorter than Interval. Zero
	// (with Interval set) means DefaultHealthTimeout, at most Interval/2.
	Timeout time.Duration
}

// Breaker is the `breaker { … }` block.
type Breaker struct {
	// Threshold is the number of consecutive failures that opens the breaker.
	Threshold int
	// Cooldown is how long the breaker stays open before a half-open probe.
	Cooldown time.Duration
}

// Metrics is the host's `metrics { … }` block. The tool label of
// mcpvisor_calls_total takes its values from upstream catalogs, which are
// untrusted; calls past these bounds are counted under the label "_other".
// Zero means the default (only in a Config built in Go).
type Metrics struct {
	// MaxNamesPerServer bounds the distinct tool and prompt names one
	// server may add as label values (default 500).
	MaxNamesPerServer int
	// MaxNames bounds them for all servers together (default 5000).
	MaxNames int
}

// Registry is the host's `registry { … }` block: the MCP registry the
// CLI reads server.json entries from (docs/registry.md). The host itself
// never asks it.
type Registry struct {
	// URL is the registry's base URL, its REST API under /v0; "" means the
	// official registry (mcpregistry.DefaultURL).
	URL string
}

// Console is the host's `console { … }` block: bounds on the web console
// at /ui (docs/operations.md, "Web console"). Zero means the default
// (only in a Config built in Go).
type Console struct {
	// MaxStreams bounds the console pages receiving live updates at once
	// (DefaultConsoleMaxStreams); one more gets 503.
	MaxStreams int
	// RecentCalls is how many finished calls the console keeps in memory
	// to show (DefaultConsoleRecentCalls, at most MaxConsoleRecentCalls).
	RecentCalls int
}

// Defaults and bounds of the console block.
const (
	// DefaultConsoleMaxStreams: a few operators with a few tabs each.
	DefaultConsoleMaxStreams = 16
	// DefaultConsoleRecentCalls: a screenful of calls.
	DefaultConsoleRecentCalls = 50
	// MaxConsoleRecentCalls bounds recent_calls: the whole list is
	// re-rendered on every live update.
	MaxConsoleRecentCalls = 1000
)

// The sandbox's network modes (Sandbox.Network).
const (
	// NetworkAny leaves the server on the host's network; Connect may
	// still restrict the TCP ports it connects to.
	NetworkAny = "any"
	// NetworkNone gives the server a network namespace of its own with
	// nothing but a loopback device that is down: it reaches no host, not
	// even the host's loopback.
	NetworkNone = "none"
)

// Sandbox is the `sandbox { … }` block of a stdio server
// (docs/sandbox.md). The runtime's own needs (system directories, the
// command's installation, a private temp directory, the caches of npx
// and uvx) are added to Read and Write by the sandbox itself.
type Sandbox struct {
	// Read lists paths the server may read (and execute), beyond the
	// runtime defaults. Relative paths are resolved against the
	// configuration file's directory.
	Read []string
	// Write lists paths the server may read and write.
	Write []string
	// Network is NetworkAny (the default, "" in a Config built in Go) or
	// NetworkNone.
	Network string
	// Connect, when not empty, lists the only TCP ports the server may
	// connect to (with Network "any").
	Connect []int
	// BestEffort starts the server with what the kernel can enforce when
	// it lacks a needed feature, with a warning, instead of refusing to
	// start it.
	BestEffort bool
	// UDP allows UDP sockets under Connect, which otherwise refuses them
	// (seccomp): a resolver's DNS queries (docs/sandbox.md).
	UDP bool
	// ConnectUnix lists the Unix socket paths the server may connect to.
	// Without it the server may create no AF_UNIX socket (socketpair
	// stays allowed); with it AF_UNIX sockets are allowed, and the paths
	// are what the server's view of the file system shows.
	ConnectUnix []string
	// User, when set, is the user (a name, or a numeric uid) the server
	// runs as; Group its group (a name or a numeric gid), by default the
	// user's primary group. Only mcpvisor running as root can switch.
	User  string
	Group string
}

// Limits is the `limits { … }` block of a stdio server
// (docs/sandbox.md). A zero field sets no limit.
type Limits struct {
	// Memory bounds the resident memory of the server's whole process
	// group, in bytes. A server over it is stopped and restarted through
	// the normal supervision path.
	Memory int64
	// Processes bounds the processes (and threads) of the server.
	Processes int
	// OpenFiles bounds the open file descriptors of each of its processes.
	OpenFiles int
	// BestEffort starts the server when this machine cannot enforce a
	// limit the way it must be (memory and processes need a cgroup of the
	// server's own), with a warning: memory is then sampled from /proc
	// and processes is not enforced. Without it such a server is refused
	// at start (docs/sandbox.md, "Limits").
	BestEffort bool
}

// IsZero reports whether l sets no limit (best_effort alone sets none).
func (l Limits) IsZero() bool { return l.Memory == 0 && l.Processes == 0 && l.OpenFiles == 0 }

// Catalog is the `catalog { … }` block: bounds on what one server lists.
// A zero field (only in a Config built in Go: a file must write 1 or more)
// means its default (WithDefaults); listing stops with a warning when a
// bound is reached and keeps the entries up to it.
type Catalog struct {
	// MaxTools bounds the tools kept (DefaultMaxTools).
	MaxTools int
	// MaxResources bounds the resources kept, and separately the resource
	// templates (DefaultMaxResources).
	MaxResources int
	// MaxPrompts bounds the prompts kept (DefaultMaxPrompts).
	MaxPrompts int
	// MaxBytes bounds the JSON size of all entries kept, all lists
	// together (DefaultCatalogMaxBytes).
	MaxBytes int
	// MaxPages bounds the pages one list operation follows
	// (DefaultMaxPages).
	MaxPages int
}

// WithDefaults returns c with every zero field set to its default.
func (c Catalog) WithDefaults() Catalog {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.MaxTools, DefaultMaxTools)
	def(&c.MaxResources, DefaultMaxResources)
	def(&c.MaxPrompts, DefaultMaxPrompts)
	def(&c.MaxBytes, DefaultCatalogMaxBytes)
	def(&c.MaxPages, DefaultMaxPages)
	return c
}
