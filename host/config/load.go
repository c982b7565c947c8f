package config

// Loading runs in two stages, like Terraform's: first the file is parsed,
// checked against the schema and every expression evaluated; only if that
// succeeds are the semantic checks of Validate run on the result. The
// second stage relies on every value being what the file said or a default,
// so that a value that failed to evaluate cannot cause a second, misleading
// error ("timeout must be greater than zero") about the same line.

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
)

// Load reads and decodes the configuration file at path, and the plugin
// lock file beside it (LockFileName) when there is one. Relative paths in
// the file (file(), cwd, a plugin's command) are resolved against the
// file's directory. Any error is a *DiagnosticsError; when the file cannot
// be read it wraps the I/O error (errors.Is(err, fs.ErrNotExist) works).
func Load(path string) (*Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		diag := &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Cannot read configuration file",
			Detail:   fmt.Sprintf("mcpvisor could not read the configuration file %q: %s.", path, plainPathError(err)),
		}
		if errors.Is(err, fs.ErrNotExist) {
			diag.Summary = "Configuration file not found"
			diag.Detail = fmt.Sprintf("There is no file at %q. Pass the right path with -config, or create the file (an empty file is a valid configuration with no servers).", path)
		}
		return nil, &DiagnosticsError{Diags: hcl.Diagnostics{diag}, cause: err}
	}
	baseDir := filepath.Dir(path)
	if abs, err := filepath.Abs(baseDir); err == nil {
		baseDir = abs
	}
	cfg, err := parse(src, path, baseDir, false, userSecrets())
	if err != nil {
		return nil, err
	}
	if err := cfg.loadLockFor(path); err != nil {
		return nil, err
	}
	return cfg, nil
}

// LoadForRun is Load for a host about to run the file: a server block
// whose only errors are env() calls of unset variables without a default
// does not fail the load. That server is returned with MissingEnv set (its
// other settings unchecked) and the host holds it in needs_config while
// the other servers run: one missing secret does not stop every server.
// `mcpvisor validate` uses Load, which still reports it as an error.
func LoadForRun(path string) (*Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return Load(path) // the same diagnostic as Load's
	}
	baseDir := filepath.Dir(path)
	if abs, err := filepath.Abs(baseDir); err == nil {
		baseDir = abs
	}
	cfg, err := parse(src, path, baseDir, true, userSecrets())
	if err != nil {
		return nil, err
	}
	if err := cfg.loadLockFor(path); err != nil {
		return nil, err
	}
	return cfg, nil
}

// LoadHost reads only the host block of the file at path: what a command
// that talks to a running host needs (where it listens, its token) without
// evaluating the server blocks, whose env() and file() secrets it has no
// business needing. Any error is a *DiagnosticsError.
func LoadHost(path string) (*Host, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		_, err := Load(path) // the same diagnostic as Load's
		return nil, err
	}
	baseDir := filepath.Dir(path)
	if abs, err := filepath.Abs(baseDir); err == nil {
		baseDir = abs
	}
	p := hclparse.NewParser()
	file, diags := p.ParseHCL(src, path)
	if diags.HasErrors() {
		return nil, newDiagnosticsError(diags, p.Files())
	}
	labelRates(file.Body)
	var raw fileSchema
	if diags := gohcl.DecodeBody(file.Body, nil, &raw); diags.HasErrors() {
		return nil, newDiagnosticsError(diags, p.Files())
	}
	d := &decoder{ctx: evalContext(baseDir, userSecrets()), baseDir: baseDir, src: newSourceMap()}
	h := defaultHost()
	if raw.Host != nil {
		d.host(raw.Host, &h)
	}
	if d.diags.HasErrors() {
		return nil, newDiagnosticsError(d.diags, p.Files())
	}
	return &h, nil
}

// Parse decodes a configuration from src; filename is used in diagnostics
// and its directory, as given, is where relative paths are resolved. Parse
// reads no lock file. Any error is a *DiagnosticsError.
func Parse(src []byte, filename string) (*Config, error) {
	return parse(src, filename, filepath.Dir(filename), false, nil)
}

// parse decodes src. holdUnset makes a server block whose only errors are
// env() of unset variables a server with MissingEnv (LoadForRun); env()
// falls back to stored (nil: the environment only).
func parse(src []byte, filename, baseDir string, holdUnset bool, stored SecretLookup) (*Config, error) {
	p := hclparse.NewParser()
	file, diags := p.ParseHCL(src, filename)
	if diags.HasErrors() {
		var body hcl.Body
		if file != nil {
			body = file.Body
		}
		suggestNames(body, diags)
		return nil, newDiagnosticsError(diags, p.Files())
	}

	labelRates(file.Body)
	var raw fileSchema
	diags = append(diags, gohcl.DecodeBody(file.Body, nil, &raw)...)

	d := &decoder{
		ctx:     evalContext(baseDir, stored),
		baseDir: baseDir,
		src:     newSourceMap(),
		// A misspelled required attribute is already reported as
		// unsupported; reporting it missing as well would be noise.
		quiet:     diags.HasErrors(),
		holdUnset: holdUnset,
	}
	cfg := d.config(&raw, filename)
	diags = append(diags, d.diags...)
	suggestNames(file.Body, diags)
	if diags.HasErrors() {
		return nil, newDiagnosticsError(diags, p.Files())
	}

	if diags := cfg.check(d.src); diags.HasErrors() {
		return nil, newDiagnosticsError(diags, p.Files())
	}
	return cfg, nil
}

// decoder turns the raw schema into a Config, evaluating each expression
// and recording where each value came from for the semantic checks.
type decoder struct {
	ctx     *hcl.EvalContext
	baseDir string
	src     *sourceMap
	diags   hcl.Diagnostics
	quiet   bool // skip "missing required attribute" errors
	// holdUnset: see parse.
	holdUnset bool
}

func (d *decoder) config(raw *fileSchema, filename string) *Config {
	c := &Config{Filename: filename, Host: defaultHost()}
	if raw.Host != nil {
		d.host(raw.Host, &c.Host)
	}
	for _, rs := range raw.Servers {
		if rs == nil {
			continue
		}
		before := len(d.diags)
		s := d.server(rs)
		if d.holdUnset {
			d.holdIfOnlyUnsetEnv(s, before)
		}
		c.Servers = append(c.Servers, s)
	}
	for _, rp := range raw.Policies {
		if rp != nil {
			c.Policies = append(c.Policies, d.policy(rp))
		}
	}
	return c
}

// holdIfOnlyUnsetEnv drops the diagnostics decoding s added (from index
// before) and records the variables in s.MissingEnv when every one of
// them is an env() of an unset variable; any other error is kept, so the
// load still fails for it.
func (d *decoder) holdIfOnlyUnsetEnv(s *Server, before int) {
	var names []string
	for _, diag := range d.diags[before:] {
		if diag.Severity != hcl.DiagError {
			continue
		}
		name := unsetEnvName(diag)
		if name == "" {
			return
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return
	}
	d.diags = d.diags[:before]
	s.MissingEnv = names
}

func (d *decoder) host(rh *hostSchema, h *Host) {
	at := func(key string, expr hcl.Expression) { d.src.host[key] = expr.Range() }

	if v, ok := d.str(rh.Listen, "listen"); ok {
		h.Listen = v
		at("listen", rh.Listen)
	}
	if v, ok := d.str(rh.LogLevel, "log_level"); ok {
		h.LogLevel = v
		at("log_level", rh.LogLevel)
	}
	if v, ok := d.str(rh.LogFormat, "log_format"); ok {
		h.LogFormat = v
		at("log_format", rh.LogFormat)
	}
	if v, ok := d.str(rh.Separator, "separator"); ok {
		h.Separator = v
		at("separator", rh.Separator)
	}
	if v, ok := d.duration(rh.SessionIdleTimeout, "session_idle_timeout", "the host block"); ok {
		h.SessionIdleTimeout = v
		at("session_idle_timeout", rh.SessionIdleTimeout)
	}
	if v, ok := d.integer(rh.MaxSessions, "max_sessions"); ok {
		h.MaxSessions = v
		at("max_sessions", rh.MaxSessions)
	}
	if v, ok := d.integer(rh.MaxSessionsPerSubj, "max_sessions_per_subject"); ok {
		h.MaxSessionsPerSubject = v
		at("max_sessions_per_subject", rh.MaxSessionsPerSubj)
	}
	if v, ok := d.str(rh.Replica, "replica"); ok {
		h.Replica = v
		at("replica", rh.Replica)
	}
	if v, ok := d.duration(rh.Drain, "drain", "the host block"); ok {
		h.Drain = v
		at("drain", rh.Drain)
	}
	// Downstream request bounds.
	if v, ok := d.duration(rh.BodyTimeout, "body_timeout", "the host block"); ok {
		h.BodyTimeout = v
		at("body_timeout", rh.BodyTimeout)
	}
	if v, ok := d.size(rh.MaxBodyBytesInflight, "max_body_bytes_inflight", "the host block"); ok {
		h.MaxBodyBytesInflight = v
		at("max_body_bytes_inflight", rh.MaxBodyBytesInflight)
	}
	if v, ok := d.integer(rh.MaxInflight, "max_inflight"); ok {
		h.MaxInflight = v
		at("max_inflight", rh.MaxInflight)
	}
	if v, ok := d.integer(rh.MaxInflightPerSess, "max_inflight_per_session"); ok {
		h.MaxInflightPerSession = v
		at("max_inflight_per_session", rh.MaxInflightPerSess)
	}
	if v, ok := d.duration(rh.WriteTimeout, "write_timeout", "the host block"); ok {
		h.WriteTimeout = v
		at("write_timeout", rh.WriteTimeout)
	}
	if v, ok := d.size(rh.MaxInflightBytes, "max_inflight_bytes", "the host block"); ok {
		h.MaxInflightBytes = v
		at("max_inflight_bytes", rh.MaxInflightBytes)
	}
	if v, ok := d.str(rh.StdioSubject, "stdio_subject"); ok {
		h.StdioSubject = v
		at("stdio_subject", rh.StdioSubject)
	}
	if ra := rh.Audit; ra != nil {
		d.src.host["audit"] = ra.DefRange
		a := &Audit{}
		before := len(d.diags)
		v, ok := d.str(ra.Path, "path")
		switch {
		case ok && v == "":
			d.errorf(ra.Path.Range().Ptr(), "Empty audit path",
				"path in the audit block is empty. Set it to the file to append audit lines to, such as path = \"/var/log/mcpvisor/audit.jsonl\", or remove the audit block.")
		case ok:
			a.Path = d.resolve(v)
			at("audit.path", ra.Path)
		case len(d.diags) == before && !d.quiet:
			d.errorf(ra.DefRange.Ptr(), "Missing required argument",
				"The audit block needs path, the file to append audit lines to. For example: audit { path = \"audit.jsonl\" }.")
		}
		if v, ok := d.boolean(ra.IncludeArguments, "include_arguments"); ok {
			a.IncludeArguments = v
		}
		h.Audit = a
	}
	if rm := rh.Metrics; rm != nil {
		if v, ok := d.integer(rm.MaxNamesPerServer, "max_names_per_server"); ok {
			h.Metrics.MaxNamesPerServer = v
			at("metrics.max_names_per_server", rm.MaxNamesPerServer)
		}
		if v, ok := d.integer(rm.MaxNames, "max_names"); ok {
			h.Metrics.MaxNames = v
			at("metrics.max_names", rm.MaxNames)
		}
	}
	if rd := rh.Discovery; rd != nil {
		d.src.host["discovery"] = rd.DefRange
		h.Discovery = d.discovery(rd, at, "discovery.")
	}
	if rc := rh.Console; rc != nil {
		if v, ok := d.integer(rc.MaxStreams, "max_streams"); ok {
			h.Console.MaxStreams = v
			at("console.max_streams", rc.MaxStreams)
		}
		if v, ok := d.integer(rc.RecentCalls, "recent_calls"); ok {
			h.Console.RecentCalls = v
			at("console.recent_calls", rc.RecentCalls)
		}
	}
	if rr := rh.Registry; rr != nil {
		v, ok := d.str(rr.URL, "url")
		switch {
		case !ok:
		case !validRegistryURL(v):
			d.errorf(rr.URL.Range().Ptr(), "Invalid registry URL",
				fmt.Sprintf("url in the host block's registry block is %q; it must be an http:// or https:// URL, the registry's base URL without /v0, such as \"https://registry.modelcontextprotocol.io\" (remove the block for that default).", v))
		default:
			h.Registry.URL = v
			at("registry.url", rr.URL)
		}
	}
	if rh.Auth != nil {
		d.src.host["auth"] = rh.Auth.DefRange
		before := len(d.diags)
		// token is bearer_token's newer name (docs/auth.md); one of them.
		tokenExpr, tokenName := rh.Auth.BearerToken, "bearer_token"
		if !exprIsNull(rh.Auth.Token) {
			if !exprIsNull(rh.Auth.BearerToken) {
				d.errorf(rh.Auth.Token.Range().Ptr(), "Conflicting arguments",
					"The auth block sets both token and bearer_token, two names for the same secret. Keep token and remove bearer_token.")
			}
			tokenExpr, tokenName = rh.Auth.Token, "token"
		}
		v, ok := d.str(tokenExpr, tokenName)
		switch {
		case ok && v == "":
			remove := "the auth block"
			if rh.Auth.OIDC != nil {
				remove = "it (oidc alone admits the provider's tokens)"
			}
			d.errorf(tokenExpr.Range().Ptr(), "Empty bearer token",
				tokenName+" is empty, which would let any client in. Set it to a secret, for example "+tokenName+" = env(\"MCPVISOR_TOKEN\"), or remove "+remove+".")
		case ok:
			h.BearerToken = v
			at("bearer_token", tokenExpr)
		case len(d.diags) == before && !d.quiet && rh.Auth.OIDC == nil:
			d.errorf(rh.Auth.DefRange.Ptr(), "Missing required argument",
				"The auth block needs token, the secret clients send as \"Authorization: Bearer <token>\", or an oidc block. For example: auth { token = env(\"MCPVISOR_TOKEN\") }.")
		}
		if ro := rh.Auth.OIDC; ro != nil {
			h.OIDC = d.oidc(ro)
		}
	}
}

// oidc decodes the host's `auth { oidc { … } }` block.
func (d *decoder) oidc(ro *oidcSchema) *OIDC {
	o := &OIDC{SubjectClaim: DefaultOIDCSubjectClaim, GroupsClaim: DefaultOIDCGroupsClaim}
	d.src.host["auth.oidc"] = ro.DefRange
	required := func(expr hcl.Expression, name, example string) string {
		v, ok := d.str(expr, name)
		if !ok || v == "" {
			if !d.quiet {
				d.errorf(ro.DefRange.Ptr(), "Missing required argument",
					fmt.Sprintf("The oidc block needs %s. For example: %s = %q.", name, name, example))
			}
			return ""
		}
		d.src.host["auth.oidc."+name] = expr.Range()
		return v
	}
	o.Issuer = required(ro.Issuer, "issuer", "https://idp.example.com")
	if o.Issuer != "" {
		if u, err := url.Parse(o.Issuer); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			d.errorf(ro.Issuer.Range().Ptr(), "Invalid issuer",
				fmt.Sprintf("issuer in the oidc block is %q; it must be the OpenID provider's issuer URL, such as \"https://idp.example.com\" (its discovery document is at /.well-known/openid-configuration under it).", o.Issuer))
		}
	}
	o.Audience = required(ro.Audience, "audience", "https://mcp.example.com/mcp")
	if v, ok := d.strList(ro.Scopes, "scopes"); ok {
		o.Scopes = v
	}
	if v, ok := d.strList(ro.Required, "required_scopes"); ok {
		if o.Scopes != nil {
			d.errorf(ro.Required.Range().Ptr(), "Duplicate scopes",
				"The oidc block sets both scopes and required_scopes, its newer name; keep required_scopes only.")
		}
		o.Scopes = v
	}
	if v, ok := d.strList(ro.Supported, "scopes_supported"); ok {
		o.ScopesSupported = v
	}
	if v, ok := d.boolean(ro.TrustUnverifiedEmail, "trust_unverified_email"); ok {
		o.TrustUnverifiedEmail = v
	}
	if v, ok := d.boolean(ro.RequireTypAtJWT, "require_typ_at_jwt"); ok {
		o.RequireTypAtJWT = v
	}
	if v, ok := d.duration(ro.ClockSkew, "clock_skew", "the oidc block"); ok {
		if v < 0 || v > time.Hour {
			d.errorf(ro.ClockSkew.Range().Ptr(), "Invalid clock_skew",
				fmt.Sprintf("clock_skew in the oidc block is %s; it must be between 0s and 1h, such as the default %s.", v, DefaultOIDCClockSkew))
		}
		o.ClockSkew = v
	}
	if v, ok := d.str(ro.IntrospectionURL, "introspection_url"); ok && v != "" {
		if u, err := url.Parse(v); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			d.errorf(ro.IntrospectionURL.Range().Ptr(), "Invalid introspection_url",
				fmt.Sprintf("introspection_url in the oidc block is %q; it must be the provider's token introspection endpoint (RFC 7662), such as \"https://idp.example.com/oauth/introspect\".", v))
		}
		o.IntrospectionURL = v
	}
	if v, ok := d.str(ro.ClientID, "client_id"); ok {
		o.ClientID = v
	}
	if v, ok := d.str(ro.ClientSecret, "client_secret"); ok {
		o.ClientSecret = v
	}
	if o.IntrospectionURL != "" && (o.ClientID == "" || o.ClientSecret == "") {
		d.errorf(ro.DefRange.Ptr(), "Incomplete introspection settings",
			"The oidc block sets introspection_url without client_id and client_secret: the provider's introspection endpoint only answers the clients it knows. Register mcpvisor as a client (a resource server / API) at the provider and set both, such as client_secret = env(\"MCPVISOR_INTROSPECTION_SECRET\").")
	}
	if v, ok := d.str(ro.SubjectClaim, "subject_claim"); ok && v != "" {
		o.SubjectClaim = v
	}
	if v, ok := d.str(ro.GroupsClaim, "groups_claim"); ok && v != "" {
		o.GroupsClaim = v
	}
	return o
}

func (d *decoder) server(rs *serverSchema) *Server {
	s := defaultServer(rs.Name)
	s.DeclRange = rs.DefRange
	r := map[string]hcl.Range{"name": rs.NameRange}
	d.src.servers[s] = r
	at := func(key string, expr hcl.Expression) { r[key] = expr.Range() }
	where := fmt.Sprintf("server %q", rs.Name)

	if v, ok := d.str(rs.Command, "command"); ok {
		at("command", rs.Command)
		if v == "" {
			d.errorf(rs.Command.Range().Ptr(), "Empty command",
				fmt.Sprintf("command in %s is empty. Set it to the program to run, such as \"npx\", or remove it.", where))
		}
		// A bare name ("npx") is looked up in PATH; a path with a slash
		// ("./bin/echo") is relative to the config file, so the file works
		// from any working directory.
		if strings.ContainsRune(v, '/') {
			v = d.resolve(v)
		}
		s.Command = v
	}
	if v, ok := d.strList(rs.Args, "args"); ok {
		s.Args = v
	}
	if v, ok := d.strMap(rs.Env, "env"); ok {
		s.Env = v
		at("env", rs.Env)
	}
	if v, ok := d.str(rs.Cwd, "cwd"); ok && v != "" {
		s.Cwd = d.resolve(v)
	} else if s.Command != "" && d.baseDir != "" {
		// A stdio server runs in the config file's directory, so a
		// relative path means the same inside the server (sh -c
		// "exec ../bin/notes") as in command.
		s.Cwd = d.baseDir
	}

	if v, ok := d.str(rs.URL, "url"); ok {
		at("url", rs.URL)
		if v == "" {
			d.errorf(rs.URL.Range().Ptr(), "Empty url",
				fmt.Sprintf("url in %s is empty. Set it to the server's endpoint, such as \"https://mcp.example.com/mcp\", or remove it.", where))
		}
		s.URL = v
	}
	if v, ok := d.strMap(rs.Headers, "headers"); ok {
		s.Headers = v
		at("headers", rs.Headers)
	}
	if rs.OAuth != nil {
		s.OAuth = d.oauth(rs.OAuth, r)
	}
	if v, ok := d.str(rs.Transport, "transport"); ok {
		at("transport", rs.Transport)
		if s.URL == "" {
			d.errorf(rs.Transport.Range().Ptr(), "Transport without url",
				fmt.Sprintf("transport in %s chooses between the HTTP transports (\"streamable-http\" or \"sse\") and applies only to a server with url. A server with command always uses stdio, and one with a plugin block uses its plugin; remove transport.", where))
		} else {
			s.Transport = Transport(v)
		}
	}
	if rs.Plugin != nil {
		s.Plugin = d.plugin(rs.Plugin, r)
	}
	if s.Transport == "" {
		s.Transport = impliedTransport(s)
	}

	if v, ok := d.duration(rs.Timeout, "timeout", where); ok {
		s.Timeout = v
		at("timeout", rs.Timeout)
	}
	if v, ok := d.duration(rs.ConnectTimeout, "connect_timeout", where); ok {
		s.ConnectTimeout = v
		at("connect_timeout", rs.ConnectTimeout)
	}
	if v, ok := d.size(rs.MaxMessageSize, "max_message_size", where); ok {
		s.MaxMessageSize = v
		at("max_message_size", rs.MaxMessageSize)
	}
	// An explicit prefix, even "", replaces the default (the name).
	if v, ok := d.str(rs.Prefix, "prefix"); ok {
		s.Prefix = v
		at("prefix", rs.Prefix)
	}
	if v, ok := d.str(rs.ProtocolVersion, "protocol_version"); ok {
		s.ProtocolVersion = v
		at("protocol_version", rs.ProtocolVersion)
	}

	if v, ok := d.boolean(rs.Required, "required"); ok {
		s.Required = v
	}
	if v, ok := d.boolean(rs.Enabled, "enabled"); ok {
		s.Disabled = !v
	}

	if v, ok := d.integer(rs.MaxPendingRequests, "max_pending_requests"); ok {
		s.MaxPendingRequests = v
		at("max_pending_requests", rs.MaxPendingRequests)
	}

	if t := rs.Tools; t != nil {
		if v, ok := d.strList(t.Include, "include"); ok {
			s.Tools.Include = v
			at("tools.include", t.Include)
		}
		if v, ok := d.strList(t.Exclude, "exclude"); ok {
			s.Tools.Exclude = v
			at("tools.exclude", t.Exclude)
		}
	}

	if rd := rs.Discovery; rd != nil {
		s.Discovery = d.discovery(rd, at, "discovery.")
	}

	if rr := rs.Reconnect; rr != nil {
		if v, ok := d.integer(rr.MaxRetries, "max_retries"); ok {
			s.Reconnect.MaxRetries = v
			at("reconnect.max_retries", rr.MaxRetries)
		}
		if v, ok := d.duration(rr.MaxBackoff, "max_backoff", where); ok {
			s.Reconnect.MaxBackoff = v
			at("reconnect.max_backoff", rr.MaxBackoff)
		}
		if v, ok := d.duration(rr.ParkedRetry, "parked_retry", where); ok {
			s.Reconnect.ParkedRetry = v
			at("reconnect.parked_retry", rr.ParkedRetry)
		}
		if v, ok := d.duration(rr.HealthyAfter, "healthy_after", where); ok {
			s.Reconnect.HealthyAfter = v
			at("reconnect.healthy_after", rr.HealthyAfter)
		}
		if v, ok := d.integer(rr.UnresponsiveAfter, "unresponsive_after"); ok {
			s.Reconnect.UnresponsiveAfter = v
			at("reconnect.unresponsive_after", rr.UnresponsiveAfter)
		}
	}

	if rb := rs.Breaker; rb != nil {
		if v, ok := d.integer(rb.Threshold, "threshold"); ok {
			s.Breaker.Threshold = v
			at("breaker.threshold", rb.Threshold)
		}
		if v, ok := d.duration(rb.Cooldown, "cooldown", where); ok {
			s.Breaker.Cooldown = v
			at("breaker.cooldown", rb.Cooldown)
		}
	}

	if rh := rs.Health; rh != nil {
		r["health"] = rh.DefRange
		if v, ok := d.duration(rh.Interval, "interval", where); ok {
			s.Health.Interval = v
			at("health.interval", rh.Interval)
		}
		if v, ok := d.duration(rh.Timeout, "timeout", where); ok {
			s.Health.Timeout = v
			at("health.timeout", rh.Timeout)
		}
		if _, written := r["health.timeout"]; !written {
			s.Health.applyDefaults()
		}
	}

	if rc := rs.Catalog; rc != nil {
		for _, f := range []struct {
			expr hcl.Expression
			name string
			dst  *int
		}{
			{rc.MaxTools, "max_tools", &s.Catalog.MaxTools},
			{rc.MaxResources, "max_resources", &s.Catalog.MaxResources},
			{rc.MaxPrompts, "max_prompts", &s.Catalog.MaxPrompts},
			{rc.MaxBytes, "max_bytes", &s.Catalog.MaxBytes},
			{rc.MaxPages, "max_pages", &s.Catalog.MaxPages},
		} {
			if v, ok := d.integer(f.expr, f.name); ok {
				*f.dst = v
				at("catalog."+f.name, f.expr)
			}
		}
	}

	d.containment(rs, s, r, where)
	return s
}

// containment decodes the sandbox and limits blocks, idle_timeout and
// max_lifetime (docs/sandbox.md).
func (d *decoder) containment(rs *serverSchema, s *Server, r map[string]hcl.Range, where string) {
	at := func(key string, expr hcl.Expression) { r[key] = expr.Range() }
	if rsb := rs.Sandbox; rsb != nil {
		r["sandbox"] = rsb.DefRange
		sb := &Sandbox{}
		s.Sandbox = sb
		if v, ok := d.strList(rsb.Read, "read"); ok {
			sb.Read = d.resolveAll(v)
			at("sandbox.read", rsb.Read)
		}
		if v, ok := d.strList(rsb.Write, "write"); ok {
			sb.Write = d.resolveAll(v)
			at("sandbox.write", rsb.Write)
		}
		if v, ok := d.str(rsb.Network, "network"); ok {
			sb.Network = v
			at("sandbox.network", rsb.Network)
		}
		if v, ok := d.intList(rsb.Connect, "connect"); ok {
			sb.Connect = v
			at("sandbox.connect", rsb.Connect)
		}
		if v, ok := d.boolean(rsb.BestEffort, "best_effort"); ok {
			sb.BestEffort = v
		}
		if v, ok := d.boolean(rsb.UDP, "udp"); ok {
			sb.UDP = v
			at("sandbox.udp", rsb.UDP)
		}
		if v, ok := d.strList(rsb.ConnectUnix, "connect_unix"); ok {
			sb.ConnectUnix = d.resolveAll(v)
			at("sandbox.connect_unix", rsb.ConnectUnix)
		}
		if v, ok := d.str(rsb.User, "user"); ok {
			sb.User = v
			at("sandbox.user", rsb.User)
		}
		if v, ok := d.str(rsb.Group, "group"); ok {
			sb.Group = v
			at("sandbox.group", rsb.Group)
		}
		if sb.Network == "" {
			sb.Network = NetworkAny
		}
	}
	if rl := rs.Limits; rl != nil {
		r["limits"] = rl.DefRange
		if v, ok := d.size(rl.Memory, "memory", where); ok {
			s.Limits.Memory = v
			at("limits.memory", rl.Memory)
		}
		if v, ok := d.integer(rl.Processes, "processes"); ok {
			s.Limits.Processes = v
			at("limits.processes", rl.Processes)
		}
		if v, ok := d.integer(rl.OpenFiles, "open_files"); ok {
			s.Limits.OpenFiles = v
			at("limits.open_files", rl.OpenFiles)
		}
		if v, ok := d.boolean(rl.BestEffort, "best_effort"); ok {
			s.Limits.BestEffort = v
		}
	}
	if v, ok := d.duration(rs.IdleTimeout, "idle_timeout", where); ok {
		s.IdleTimeout = v
		at("idle_timeout", rs.IdleTimeout)
	}
	if v, ok := d.duration(rs.MaxLifetime, "max_lifetime", where); ok {
		s.MaxLifetime = v
		at("max_lifetime", rs.MaxLifetime)
	}
}

func (d *decoder) plugin(rp *pluginSchema, r map[string]hcl.Range) *Plugin {
	p := &Plugin{Name: rp.Name}
	r["plugin"] = rp.DefRange
	r["plugin.name"] = rp.NameRange

	before := len(d.diags)
	v, ok := d.str(rp.Command, "command")
	switch {
	case ok && v != "":
		p.Command = d.resolve(v)
		r["plugin.command"] = rp.Command.Range()
	case len(d.diags) == before && !d.quiet:
		subject := rp.DefRange.Ptr()
		if ok {
			subject = rp.Command.Range().Ptr()
		}
		d.errorf(subject, "Missing plugin command",
			fmt.Sprintf("The plugin %q block needs command, the path of the plugin binary, such as command = \"./bin/mcpvisor-transport-%s\".", rp.Name, rp.Name))
	}
	if v, ok := d.strList(rp.Args, "args"); ok {
		p.Args = v
	}
	if v, ok := d.str(rp.SHA256, "sha256"); ok {
		p.SHA256 = v
		r["plugin.sha256"] = rp.SHA256.Range()
	}
	if v, ok := d.jsonObject(rp.Config, "config"); ok {
		p.Config = v
		r["plugin.config"] = rp.Config.Range()
	}
	return p
}

func (d *decoder) oauth(ro *oauthSchema, r map[string]hcl.Range) *OAuth {
	o := &OAuth{Grant: GrantAuthorizationCode}
	r["oauth"] = ro.DefRange
	at := func(key string, expr hcl.Expression) { r["oauth."+key] = expr.Range() }
	if v, ok := d.str(ro.Grant, "grant"); ok {
		o.Grant = v
		at("grant", ro.Grant)
	}
	if v, ok := d.str(ro.ClientID, "client_id"); ok {
		o.ClientID = v
		at("client_id", ro.ClientID)
	}
	if v, ok := d.str(ro.ClientSecret, "client_secret"); ok {
		o.ClientSecret = v
		at("client_secret", ro.ClientSecret)
	}
	if v, ok := d.str(ro.ClientMetadataURL, "client_metadata_url"); ok {
		o.ClientMetadataURL = v
		at("client_metadata_url", ro.ClientMetadataURL)
	}
	if v, ok := d.strList(ro.Scopes, "scopes"); ok {
		o.Scopes = v
		at("scopes", ro.Scopes)
	}
	if v, ok := d.integer(ro.RedirectPort, "redirect_port"); ok {
		o.RedirectPort = v
		at("redirect_port", ro.RedirectPort)
	}
	// private_key_jwt, issuer and cross_app_access.
	for _, f := range []struct {
		expr hcl.Expression
		key  string
		dst  *string
	}{
		{ro.PrivateKey, "private_key", &o.PrivateKey},
		{ro.Issuer, "issuer", &o.Issuer},
		{ro.IDToken, "id_token", &o.IDToken},
		{ro.IdPTokenEndpoint, "idp_token_endpoint", &o.IdPTokenEndpoint},
		{ro.IdPClientID, "idp_client_id", &o.IdPClientID},
		{ro.IdPClientSecret, "idp_client_secret", &o.IdPClientSecret},
	} {
		if v, ok := d.str(f.expr, f.key); ok {
			*f.dst = v
			at(f.key, f.expr)
		}
	}
	return o
}

// discovery decodes a discovery block; at records where each attribute
// was written, under prefix.
func (d *decoder) discovery(rd *discoverySchema, at func(string, hcl.Expression), prefix string) Discovery {
	var out Discovery
	if v, ok := d.str(rd.Mode, "mode"); ok {
		out.Mode = v
		at(prefix+"mode", rd.Mode)
	}
	if v, ok := d.strList(rd.Pin, "pin"); ok {
		out.Pin = v
		at(prefix+"pin", rd.Pin)
	}
	return out
}

// validRegistryURL reports whether v can be the base URL of an MCP
// registry: http or https, a host, no query or fragment.
func validRegistryURL(v string) bool {
	u, err := url.Parse(v)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.RawQuery == "" && u.Fragment == "" && u.User == nil
}
