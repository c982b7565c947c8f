package config

// The HCL schema: what a configuration file may contain, as gohcl-tagged
// structs. Every attribute is decoded as an hcl.Expression and evaluated by
// the decoder in load.go, so that
//
//   - an unset attribute can be told apart from an explicit zero value
//     (`prefix = ""` keeps the prefix empty, `max_retries = 0` is allowed),
//   - every semantic error can point at the attribute's own source range, and
//   - a failed env() or file() call is reported once, not once more as an
//     "unsuitable value" by gohcl's type conversion.
//
// gohcl still owns the structure: unknown attributes and blocks are errors
// with "Did you mean" suggestions, block labels are checked, and a block
// that may appear once cannot appear twice.

import "github.com/hashicorp/hcl/v2"

// fileSchema is the top level of a configuration file.
type fileSchema struct {
	Host     *hostSchema     `hcl:"host,block"`
	Servers  []*serverSchema `hcl:"server,block"`
	Policies []*policySchema `hcl:"policy,block"`
}

// hostSchema is the `host { … }` block.
type hostSchema struct {
	Listen    hcl.Expression `hcl:"listen,optional"`
	LogLevel  hcl.Expression `hcl:"log_level,optional"`
	LogFormat hcl.Expression `hcl:"log_format,optional"`
	Separator hcl.Expression `hcl:"separator,optional"`
	Replica   hcl.Expression `hcl:"replica,optional"`
	Drain     hcl.Expression `hcl:"drain,optional"`

	SessionIdleTimeout hcl.Expression `hcl:"session_idle_timeout,optional"`
	MaxSessions        hcl.Expression `hcl:"max_sessions,optional"`
	MaxSessionsPerSubj hcl.Expression `hcl:"max_sessions_per_subject,optional"`

	// Downstream request bounds (docs/security.md, "Downstream requests
	// and bodies").
	BodyTimeout          hcl.Expression `hcl:"body_timeout,optional"`
	MaxBodyBytesInflight hcl.Expression `hcl:"max_body_bytes_inflight,optional"`
	MaxInflight          hcl.Expression `hcl:"max_inflight,optional"`
	MaxInflightPerSess   hcl.Expression `hcl:"max_inflight_per_session,optional"`
	WriteTimeout         hcl.Expression `hcl:"write_timeout,optional"`
	// Bounds on bytes from upstream servers.
	MaxInflightBytes hcl.Expression `hcl:"max_inflight_bytes,optional"`

	// StdioSubject names the local user, the caller of stdio and library
	// calls, for policies (docs/auth.md).
	StdioSubject hcl.Expression `hcl:"stdio_subject,optional"`

	Auth  *authSchema  `hcl:"auth,block"`
	Audit *auditSchema `hcl:"audit,block"`

	// Metrics bounds the label values of the Prometheus metrics.
	Metrics *metricsSchema `hcl:"metrics,block"`

	// Console bounds the web console at /ui.
	Console *consoleSchema `hcl:"console,block"`

	// Discovery turns on tool search (docs/discovery.md).
	Discovery *discoverySchema `hcl:"discovery,block"`
	// Registry is the MCP registry the CLI searches (docs/registry.md).
	Registry *registrySchema `hcl:"registry,block"`

	DefRange hcl.Range `hcl:",def_range"`
}

// auditSchema is the `audit { … }` block inside the host block.
type auditSchema struct {
	Path             hcl.Expression `hcl:"path,optional"`
	IncludeArguments hcl.Expression `hcl:"include_arguments,optional"`

	DefRange hcl.Range `hcl:",def_range"`
}

// metricsSchema is the `metrics { … }` block inside the host block.
type metricsSchema struct {
	MaxNamesPerServer hcl.Expression `hcl:"max_names_per_server,optional"`
	MaxNames          hcl.Expression `hcl:"max_names,optional"`
}

// consoleSchema is the `console { … }` block inside the host block.
type consoleSchema struct {
	MaxStreams  hcl.Expression `hcl:"max_streams,optional"`
	RecentCalls hcl.Expression `hcl:"recent_calls,optional"`
}

// registrySchema is the `registry { … }` block inside the host block.
type registrySchema struct {
	URL hcl.Expression `hcl:"url,optional"`

	DefRange hcl.Range `hcl:",def_range"`
}

// authSchema is the `auth { … }` block inside the host block.
type authSchema struct {
	BearerToken hcl.Expression `hcl:"bearer_token,optional"`

	// Downstream identity (docs/auth.md): token is bearer_token's newer
	// name; oidc accepts JWTs of an OpenID provider.
	Token hcl.Expression `hcl:"token,optional"`
	OIDC  *oidcSchema    `hcl:"oidc,block"`

	DefRange hcl.Range `hcl:",def_range"`
}

// oidcSchema is the `oidc { … }` block inside the host's auth block.
type oidcSchema struct {
	Issuer       hcl.Expression `hcl:"issuer,optional"`
	Audience     hcl.Expression `hcl:"audience,optional"`
	Scopes       hcl.Expression `hcl:"scopes,optional"` // required_scopes' older name
	Required     hcl.Expression `hcl:"required_scopes,optional"`
	Supported    hcl.Expression `hcl:"scopes_supported,optional"`
	SubjectClaim hcl.Expression `hcl:"subject_claim,optional"`
	GroupsClaim  hcl.Expression `hcl:"groups_claim,optional"`

	TrustUnverifiedEmail hcl.Expression `hcl:"trust_unverified_email,optional"`
	RequireTypAtJWT      hcl.Expression `hcl:"require_typ_at_jwt,optional"`
	ClockSkew            hcl.Expression `hcl:"clock_skew,optional"`
	IntrospectionURL     hcl.Expression `hcl:"introspection_url,optional"`
	ClientID             hcl.Expression `hcl:"client_id,optional"`
	ClientSecret         hcl.Expression `hcl:"client_secret,optional"`

	DefRange hcl.Range `hcl:",def_range"`
}

// serverSchema is one `server "name" { … }` block.
type serverSchema struct {
	Name      string    `hcl:"name,label"`
	NameRange hcl.Range `hcl:"name,label_range"`

	// stdio
	Command hcl.Expression `hcl:"command,optional"`
	Args    hcl.Expression `hcl:"args,optional"`
	Env     hcl.Expression `hcl:"env,optional"`
	Cwd     hcl.Expression `hcl:"cwd,optional"`

	// HTTP
	URL       hcl.Expression `hcl:"url,optional"`
	Headers   hcl.Expression `hcl:"headers,optional"`
	Transport hcl.Expression `hcl:"transport,optional"`

	OAuth *oauthSchema `hcl:"oauth,block"`

	// go-plugin
	Plugin *pluginSchema `hcl:"plugin,block"`

	Timeout         hcl.Expression `hcl:"timeout,optional"`
	ConnectTimeout  hcl.Expression `hcl:"connect_timeout,optional"`
	Prefix          hcl.Expression `hcl:"prefix,optional"`
	ProtocolVersion hcl.Expression `hcl:"protocol_version,optional"`
	Required        hcl.Expression `hcl:"required,optional"`

	// enabled = false keeps the block without running it (mcpvisor import
	// writes it for a client's "disabled": true).
	Enabled hcl.Expression `hcl:"enabled,optional"`
	// Bounds on bytes from this server.
	MaxMessageSize hcl.Expression `hcl:"max_message_size,optional"`

	Tools     *toolsSchema     `hcl:"tools,block"`
	Discovery *discoverySchema `hcl:"discovery,block"`
	Reconnect *reconnectSchema `hcl:"reconnect,block"`
	Breaker   *breakerSchema   `hcl:"breaker,block"`
	Health    *healthSchema    `hcl:"health,block"`

	// Catalog bounds what the server's list operations may hold.
	Catalog *catalogSchema `hcl:"catalog,block"`
	// Requests from the server to downstream clients (docs/security.md).
	MaxPendingRequests hcl.Expression `hcl:"max_pending_requests,optional"`

	// Containment of a stdio server (docs/sandbox.md).
	Sandbox     *sandboxSchema `hcl:"sandbox,block"`
	Limits      *limitsSchema  `hcl:"limits,block"`
	IdleTimeout hcl.Expression `hcl:"idle_timeout,optional"`
	MaxLifetime hcl.Expression `hcl:"max_lifetime,optional"`

	DefRange hcl.Range `hcl:",def_range"`
}

// sandboxSchema is the `sandbox { … }` block inside a server block.
type sandboxSchema struct {
	Read       hcl.Expression `hcl:"read,optional"`
	Write      hcl.Expression `hcl:"write,optional"`
	Network    hcl.Expression `hcl:"network,optional"`
	Connect    hcl.Expression `hcl:"connect,optional"`
	BestEffort hcl.Expression `hcl:"best_effort,optional"`
	// UDP allows UDP sockets under connect; ConnectUnix the Unix socket
	// paths the server may connect to (docs/sandbox.md "System calls").
	UDP         hcl.Expression `hcl:"udp,optional"`
	ConnectUnix hcl.Expression `hcl:"connect_unix,optional"`
	// User and Group run the server as a user of its own.
	User  hcl.Expression `hcl:"user,optional"`
	Group hcl.Expression `hcl:"group,optional"`

	DefRange hcl.Range `hcl:",def_range"`
}

// limitsSchema is the `limits { … }` block inside a server block.
type limitsSchema struct {
	Memory     hcl.Expression `hcl:"memory,optional"`
	Processes  hcl.Expression `hcl:"processes,optional"`
	OpenFiles  hcl.Expression `hcl:"open_files,optional"`
	BestEffort hcl.Expression `hcl:"best_effort,optional"`

	DefRange hcl.Range `hcl:",def_range"`
}

// pluginSchema is the `plugin "name" { … }` block inside a server block.
type pluginSchema struct {
	Name      string    `hcl:"name,label"`
	NameRange hcl.Range `hcl:"name,label_range"`

	Command hcl.Expression `hcl:"command,optional"`
	Args    hcl.Expression `hcl:"args,optional"`
	SHA256  hcl.Expression `hcl:"sha256,optional"`
	Config  hcl.Expression `hcl:"config,optional"`

	DefRange hcl.Range `hcl:",def_range"`
}

// oauthSchema is the `oauth { … }` block inside an HTTP server block.
type oauthSchema struct {
	Grant             hcl.Expression `hcl:"grant,optional"`
	ClientID          hcl.Expression `hcl:"client_id,optional"`
	ClientSecret      hcl.Expression `hcl:"client_secret,optional"`
	ClientMetadataURL hcl.Expression `hcl:"client_metadata_url,optional"`
	Scopes            hcl.Expression `hcl:"scopes,optional"`
	RedirectPort      hcl.Expression `hcl:"redirect_port,optional"`

	// private_key_jwt client authentication, an explicit issuer and the
	// cross_app_access grant (docs/oauth.md).
	PrivateKey       hcl.Expression `hcl:"private_key,optional"`
	Issuer           hcl.Expression `hcl:"issuer,optional"`
	IDToken          hcl.Expression `hcl:"id_token,optional"`
	IdPTokenEndpoint hcl.Expression `hcl:"idp_token_endpoint,optional"`
	IdPClientID      hcl.Expression `hcl:"idp_client_id,optional"`
	IdPClientSecret  hcl.Expression `hcl:"idp_client_secret,optional"`

	DefRange hcl.Range `hcl:",def_range"`
}

// discoverySchema is the `discovery { … }` block inside the host block or
// a server block.
type discoverySchema struct {
	Mode hcl.Expression `hcl:"mode,optional"`
	Pin  hcl.Expression `hcl:"pin,optional"`

	DefRange hcl.Range `hcl:",def_range"`
}

// toolsSchema is the `tools { … }` block inside a server block.
type toolsSchema struct {
	Include hcl.Expression `hcl:"include,optional"`
	Exclude hcl.Expression `hcl:"exclude,optional"`
}

// reconnectSchema is the `reconnect { … }` block inside a server block.
type reconnectSchema struct {
	MaxRetries   hcl.Expression `hcl:"max_retries,optional"`
	MaxBackoff   hcl.Expression `hcl:"max_backoff,optional"`
	ParkedRetry  hcl.Expression `hcl:"parked_retry,optional"`
	HealthyAfter hcl.Expression `hcl:"healthy_after,optional"`

	UnresponsiveAfter hcl.Expression `hcl:"unresponsive_after,optional"`
}

// breakerSchema is the `breaker { … }` block inside a server block.
type breakerSchema struct {
	Threshold hcl.Expression `hcl:"threshold,optional"`
	Cooldown  hcl.Expression `hcl:"cooldown,optional"`
}

// healthSchema is the `health { … }` block inside a server block.
type healthSchema struct {
	Interval hcl.Expression `hcl:"interval,optional"`
	Timeout  hcl.Expression `hcl:"timeout,optional"`

	DefRange hcl.Range `hcl:",def_range"`
}

// catalogSchema is the `catalog { … }` block inside a server block.
type catalogSchema struct {
	MaxTools     hcl.Expression `hcl:"max_tools,optional"`
	MaxResources hcl.Expression `hcl:"max_resources,optional"`
	MaxPrompts   hcl.Expression `hcl:"max_prompts,optional"`
	MaxBytes     hcl.Expression `hcl:"max_bytes,optional"`
	MaxPages     hcl.Expression `hcl:"max_pages,optional"`
}
