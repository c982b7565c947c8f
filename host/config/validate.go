package config

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"

	"github.com/mcpvisor/mcpvisor/host/internal/wire"
)

// ProtocolVersions are the MCP protocol versions a server block's
// protocol_version may request, oldest first.
func ProtocolVersions() []string {
	return wire.ProtocolVersions()
}

// logLevels are the hclog level names log_level accepts.
var logLevels = []string{"trace", "debug", "info", "warn", "error"}

// logFormats are the values log_format accepts.
var logFormats = []string{"text", "json"}

// Validate checks a Config's semantics: unique non-empty server names,
// exactly one transport per server, well-formed URLs, listen addresses,
// checksums, globs and versions, positive timeouts, and a bearer token for a
// non-loopback listen. Load and Parse run the same checks, with source
// ranges; on a Config built in Go the diagnostics have no Subject and name
// the server in their text instead. A non-nil error is a *DiagnosticsError.
//
// Validate does not fill defaults. On a Config built in Go, an empty
// Host.LogLevel, LogFormat or Separator and an empty Transport on a command
// server are accepted as "the default"; zero durations and thresholds are
// not, so call ApplyDefaults first.
func (c *Config) Validate() error {
	if c == nil {
		return &DiagnosticsError{Diags: hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "No configuration",
			Detail:   "Validate was called on a nil *Config.",
		}}}
	}
	if diags := c.check(nil); diags.HasErrors() {
		return newDiagnosticsError(diags, nil)
	}
	return nil
}

// sourceMap remembers where decoded values came from, so that the checks
// shared with Validate can point into the file. Keys are attribute names,
// dotted for nested blocks ("reconnect.max_retries"); "name" is a server's
// label.
type sourceMap struct {
	host     map[string]hcl.Range
	servers  map[*Server]map[string]hcl.Range
	policies map[*Policy]map[string]hcl.Range
}

func newSourceMap() *sourceMap {
	return &sourceMap{
		host:     map[string]hcl.Range{},
		servers:  map[*Server]map[string]hcl.Range{},
		policies: map[*Policy]map[string]hcl.Range{},
	}
}

// checker accumulates the diagnostics of one check run.
type checker struct {
	src   *sourceMap
	diags hcl.Diagnostics
}

func (c *Config) check(src *sourceMap) hcl.Diagnostics {
	k := &checker{src: src}
	k.host(&c.Host)
	k.policies(c.Policies)

	first := make(map[string]*Server, len(c.Servers))
	for i, s := range c.Servers {
		if s == nil {
			k.errorf(nil, "Missing server", "Servers[%d] is nil.", i)
			continue
		}
		if s.Name == "" {
			k.errorf(k.at(s, "name"), "Empty server name",
				"A server block's label is its name, which prefixes its tools; it must not be empty. Write server \"github\" { … }.")
		} else if prev, dup := first[s.Name]; dup {
			where := "is already defined"
			if prev.DeclRange.Filename != "" {
				where = fmt.Sprintf("was already defined at %s:%d", prev.DeclRange.Filename, prev.DeclRange.Start.Line)
			}
			k.errorf(k.at(s, "name"), "Duplicate server name",
				"A server named %q %s. Server names must be unique; rename or remove one of the two blocks.", s.Name, where)
		} else {
			first[s.Name] = s
		}
		if len(s.MissingEnv) > 0 {
			// Held in needs_config, never started: its settings are
			// incomplete (LoadForRun).
			continue
		}
		k.server(s)
		k.messageFitsInflight(s, c.Host.MaxInflightBytes)
	}
	return k.diags
}

// at is where a server's key was set: the attribute's value, else the
// server block's header, else nowhere (a Config built in Go).
func (k *checker) at(s *Server, key string) *hcl.Range {
	if k.src != nil {
		if r, ok := k.src.servers[s][key]; ok {
			return &r
		}
	}
	if s.DeclRange.Filename != "" || s.DeclRange.End.Byte > 0 {
		r := s.DeclRange
		return &r
	}
	return nil
}

// written reports whether a server's key was written in a file (where
// zero is a value, not "unset").
func (k *checker) written(s *Server, key string) bool {
	if k.src == nil {
		return false
	}
	_, ok := k.src.servers[s][key]
	return ok
}

// hostAt is where a host key was set, or nowhere.
func (k *checker) hostAt(key string) *hcl.Range {
	if k.src != nil {
		if r, ok := k.src.host[key]; ok {
			return &r
		}
	}
	return nil
}

func (k *checker) errorf(subject *hcl.Range, summary, format string, args ...any) {
	k.diags = append(k.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf(format, args...),
		Subject:  subject,
	})
}

// unset reports whether a host string is empty because it was never set:
// on a Config built in Go an empty LogLevel, LogFormat or Separator means
// the default, while in a file `log_level = ""` is a mistake.
func (k *checker) unset(key, value string) bool {
	return value == "" && k.hostAt(key) == nil
}

// defaultsHint ends a message about a zero value. In a file zero was
// written; in Go it was more likely forgotten.
func (k *checker) defaultsHint() string {
	if k.src != nil {
		return ""
	}
	return " Call ApplyDefaults to fill unset values with their defaults."
}

func (k *checker) host(h *Host) {
	k.discovery(h.Discovery, k.hostAt("discovery.mode"), k.hostAt("discovery.pin"), "the host block")
	if !k.unset("log_level", h.LogLevel) && !slices.Contains(logLevels, h.LogLevel) {
		k.errorf(k.hostAt("log_level"), "Invalid log level",
			"log_level in the host block is %q; use one of %s.", h.LogLevel, quoteList(logLevels))
	}
	if !k.unset("log_format", h.LogFormat) && !slices.Contains(logFormats, h.LogFormat) {
		k.errorf(k.hostAt("log_format"), "Invalid log format",
			"log_format in the host block is %q; use \"text\" for people or \"json\" for log collectors.", h.LogFormat)
	}
	if !k.unset("separator", h.Separator) && (h.Separator == "" || strings.Trim(h.Separator, nameChars) != "") {
		k.errorf(k.hostAt("separator"), "Invalid separator",
			"separator in the host block is %q. It joins a server's prefix and a tool's name, and exposed names may only contain letters, digits, '_', '.' and '-'; use a non-empty string of those, such as the default \"__\".", h.Separator)
	}
	// Zero in a Config built in Go means the default; in a file it was
	// written.
	if h.SessionIdleTimeout < 0 || (h.SessionIdleTimeout == 0 && k.hostAt("session_idle_timeout") != nil) {
		k.errorf(k.hostAt("session_idle_timeout"), "Invalid session idle timeout",
			"session_idle_timeout in the host block is %s; it must be positive, such as \"30m\" (an abandoned session is closed after it).", h.SessionIdleTimeout)
	}
	if h.MaxSessionsPerSubject < 0 || (h.MaxSessionsPerSubject == 0 && k.hostAt("max_sessions_per_subject") != nil) {
		k.errorf(k.hostAt("max_sessions_per_subject"), "Invalid max_sessions_per_subject",
			"max_sessions_per_subject in the host block is %d; it must be 1 or more, such as the default %d.", h.MaxSessionsPerSubject, DefaultMaxSessionsPerSubject)
	}
	if h.MaxSessions < 0 || (h.MaxSessions == 0 && k.hostAt("max_sessions") != nil) {
		k.errorf(k.hostAt("max_sessions"), "Invalid max_sessions",
			"max_sessions in the host block is %d; it must be 1 or more, such as the default %d.", h.MaxSessions, DefaultMaxSessions)
	}
	for _, f := range []struct {
		key string
		v   int
	}{{"metrics.max_names_per_server", h.Metrics.MaxNamesPerServer}, {"metrics.max_names", h.Metrics.MaxNames}} {
		if f.v < 0 || (f.v == 0 && k.hostAt(f.key) != nil) {
			attr := strings.TrimPrefix(f.key, "metrics.")
			k.errorf(k.hostAt(f.key), "Invalid "+attr,
				"%s in the host block's metrics block is %d; it must be 1 or more (remove it for the default).", attr, f.v)
		}
	}
	for _, f := range []struct {
		key      string
		v, upper int
	}{{"console.max_streams", h.Console.MaxStreams, 0}, {"console.recent_calls", h.Console.RecentCalls, MaxConsoleRecentCalls}} {
		if f.v < 0 || (f.v == 0 && k.hostAt(f.key) != nil) || (f.upper > 0 && f.v > f.upper) {
			attr := strings.TrimPrefix(f.key, "console.")
			bound := "1 or more"
			if f.upper > 0 {
				bound = fmt.Sprintf("1 to %d", f.upper)
			}
			k.errorf(k.hostAt(f.key), "Invalid "+attr,
				"%s in the host block's console block is %d; it must be %s (remove it for the default).", attr, f.v, bound)
		}
	}
	if !k.unset("replica", h.Replica) {
		if err := checkReplica(h.Replica); err != "" {
			k.errorf(k.hostAt("replica"), "Invalid replica",
				"replica in the host block is %q: %s. Use a short name without spaces, such as the pod or allocation name (env(\"HOSTNAME\") on Kubernetes, env(\"NOMAD_ALLOC_NAME\") on Nomad), or remove it to use the hostname.", h.Replica, err)
		}
	}
	if h.MaxInflightBytes < 0 || (h.MaxInflightBytes == 0 && k.hostAt("max_inflight_bytes") != nil) ||
		(h.MaxInflightBytes > 0 && h.MaxInflightBytes < minMessageSize) {
		k.errorf(k.hostAt("max_inflight_bytes"), "Invalid max_inflight_bytes",
			"max_inflight_bytes in the host block is %d bytes; it must be at least %s, such as the default %q (the upstream response bytes held at once across all calls).", h.MaxInflightBytes, FormatSize(minMessageSize), FormatSize(DefaultMaxInflightBytes))
	}
	if h.Drain < 0 {
		k.errorf(k.hostAt("drain"), "Invalid drain",
			"drain in the host block is %s; it must be zero (stop at once on SIGTERM) or more, such as \"5s\". Set it a little longer than your load balancer takes to see /readyz fail.", h.Drain)
	}
	// Downstream request bounds: zero in a Config built in Go means the
	// default; in a file it was written.
	if h.BodyTimeout < 0 || (h.BodyTimeout == 0 && k.hostAt("body_timeout") != nil) {
		k.errorf(k.hostAt("body_timeout"), "Invalid body_timeout",
			"body_timeout in the host block is %s; it must be positive, such as the default \"30s\" (a request body slower than this is refused with 408).", h.BodyTimeout)
	}
	if h.MaxBodyBytesInflight < 0 || (h.MaxBodyBytesInflight == 0 && k.hostAt("max_body_bytes_inflight") != nil) {
		k.errorf(k.hostAt("max_body_bytes_inflight"), "Invalid max_body_bytes_inflight",
			"max_body_bytes_inflight in the host block is %d bytes; it must be positive, such as the default \"64MiB\".", h.MaxBodyBytesInflight)
	}
	if h.MaxInflight < 0 || (h.MaxInflight == 0 && k.hostAt("max_inflight") != nil) {
		k.errorf(k.hostAt("max_inflight"), "Invalid max_inflight",
			"max_inflight in the host block is %d; it must be 1 or more, such as the default %d.", h.MaxInflight, DefaultMaxInflight)
	}
	if h.MaxInflightPerSession < 0 || (h.MaxInflightPerSession == 0 && k.hostAt("max_inflight_per_session") != nil) {
		k.errorf(k.hostAt("max_inflight_per_session"), "Invalid max_inflight_per_session",
			"max_inflight_per_session in the host block is %d; it must be 1 or more, such as the default %d.", h.MaxInflightPerSession, DefaultMaxInflightPerSession)
	}
	if h.WriteTimeout < 0 || (h.WriteTimeout == 0 && k.hostAt("write_timeout") != nil) {
		k.errorf(k.hostAt("write_timeout"), "Invalid write_timeout",
			"write_timeout in the host block is %s; it must be positive, such as the default \"30s\" (a client that does not read its answer for this long loses it).", h.WriteTimeout)
	}
	if h.Audit != nil && h.Audit.Path == "" && k.hostAt("audit") == nil {
		k.errorf(nil, "Empty audit path",
			"Host.Audit is set but its Path is empty; set the file to append audit lines to, or leave Audit nil.")
	}
	// The oidc block (docs/auth.md); a file's missing values were
	// reported where it was decoded.
	if o := h.OIDC; o != nil && (o.Issuer == "" || o.Audience == "") && k.hostAt("auth.oidc") == nil {
		k.errorf(nil, "Incomplete oidc settings",
			"Host.OIDC is set without its Issuer or Audience; set both (the OpenID provider's issuer URL and the resource URL tokens must name), or leave OIDC nil.")
	}
	if h.Listen == "" {
		return
	}
	loopback, err := listenIsLoopback(h.Listen)
	if err != nil {
		k.errorf(k.hostAt("listen"), "Invalid listen address",
			"listen in the host block is %q: %s. Write host:port, such as \"127.0.0.1:8811\".", h.Listen, err)
		return
	}
	if !loopback && h.BearerToken == "" && h.OIDC == nil {
		k.errorf(k.hostAt("listen"), "Non-loopback listen address without a bearer token",
			"listen in the host block is %q, which accepts connections from other machines, and anyone who reaches it could call every tool of every server. Add auth { bearer_token = env(\"MCPVISOR_TOKEN\") } to the host block so that clients must send \"Authorization: Bearer <token>\", or listen on a loopback address such as \"127.0.0.1:8811\".", h.Listen)
	}
}

// maxReplicaLen bounds a replica name: it is a label on every metric
// series and a field of every log and audit line.
const maxReplicaLen = 128

// checkReplica says what is wrong with a replica name, or "".
func checkReplica(r string) string {
	switch {
	case r == "":
		return "it is empty"
	case len(r) > maxReplicaLen:
		return fmt.Sprintf("it is %d bytes long, more than %d", len(r), maxReplicaLen)
	case strings.IndexFunc(r, func(c rune) bool { return unicode.IsSpace(c) || unicode.IsControl(c) || c == utf8.RuneError }) >= 0:
		return "it contains a space, a control character or invalid UTF-8"
	}
	return ""
}

// nameChars are the characters an exposed tool name may contain.
const nameChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-"

// listenIsLoopback reports whether a host:port address only accepts local
// connections. An empty host listens on every interface; a host name other
// than localhost may resolve to anything, so both count as non-loopback.
func listenIsLoopback(listen string) (bool, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		if ae, ok := err.(*net.AddrError); ok {
			return false, fmt.Errorf("%s", ae.Err)
		}
		return false, err
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return false, fmt.Errorf("the port %q is not a number from 0 to 65535", port)
	}
	if host == "localhost" {
		return true, nil
	}
	if addr, err := netip.ParseAddr(host); err == nil {
		return addr.IsLoopback(), nil
	}
	return false, nil
}

func (k *checker) server(s *Server) {
	name := fmt.Sprintf("server %q", s.Name)

	var set []string
	if s.Command != "" {
		set = append(set, "command")
	}
	if s.URL != "" {
		set = append(set, "url")
	}
	if s.Plugin != nil {
		set = append(set, "plugin")
	}
	switch len(set) {
	case 0:
		k.errorf(k.at(s, ""), "Server has no transport",
			"%s sets none of command, url or a plugin block, so mcpvisor does not know how to reach it. Set command (a stdio subprocess), url (an HTTP endpoint) or a plugin block.", name)
	case 1:
		k.transport(s, name)
	default:
		k.errorf(k.at(s, set[1]), "Conflicting transports",
			"%s sets %s. A server is either a subprocess (command), an HTTP endpoint (url) or a plugin (plugin block); keep exactly one, and declare a second server block for the other.", name, strings.Join(set, " and "))
	}

	if s.URL != "" {
		if err := checkURL(s.URL); err != nil {
			k.errorf(k.at(s, "url"), "Invalid url",
				"url in %s is %q: %s. Write an absolute http or https URL, such as \"https://mcp.example.com/mcp\".", name, s.URL, err)
		}
	}
	for _, key := range sortedKeys(s.Env) {
		if key == "" || strings.ContainsAny(key, "=\x00") {
			k.errorf(k.at(s, "env"), "Invalid environment variable name",
				"env in %s has the name %q; a variable name must not be empty or contain '=' or NUL.", name, key)
		}
	}
	for _, key := range sortedKeys(s.Headers) {
		if !validHeaderName(key) {
			k.errorf(k.at(s, "headers"), "Invalid header name",
				"headers in %s has the name %q, which is not a valid HTTP header name (letters, digits and !#$%%&'*+-.^_`|~ only).", name, key)
		}
		// A line break in a value, often a token file read without
		// trimspace(), would make every request fail.
		if strings.ContainsAny(s.Headers[key], "\r\n\x00") {
			k.errorf(k.at(s, "headers"), "Invalid header value",
				"The %q header in %s contains a line break or NUL. If the value comes from file(), wrap it in trimspace(): trimspace(file(\"token.txt\")).", key, name)
		}
	}

	if s.OAuth != nil {
		k.oauth(s, s.OAuth, name)
	}

	k.positive(s, "timeout", name, s.Timeout)
	k.positive(s, "connect_timeout", name, s.ConnectTimeout)
	if s.MaxMessageSize < 0 || (s.MaxMessageSize == 0 && k.written(s, "max_message_size")) ||
		(s.MaxMessageSize > 0 && (s.MaxMessageSize < minMessageSize || s.MaxMessageSize > maxMessageSize)) {
		k.errorf(k.at(s, "max_message_size"), "Invalid max_message_size",
			"max_message_size in %s is %d bytes; it must be between %s and %s, such as the default %q.", name, s.MaxMessageSize, FormatSize(minMessageSize), FormatSize(maxMessageSize), FormatSize(DefaultMaxMessageSize))
	}

	// Zero in a Config built in Go means the default; in a file it was
	// written.
	written := false
	if k.src != nil {
		_, written = k.src.servers[s]["max_pending_requests"]
	}
	if s.MaxPendingRequests < 0 || (s.MaxPendingRequests == 0 && written) {
		k.errorf(k.at(s, "max_pending_requests"), "Invalid max_pending_requests",
			"max_pending_requests in %s is %d; it must be 1 or more, such as the default %d.", name, s.MaxPendingRequests, DefaultMaxPendingRequests)
	}

	if s.ProtocolVersion != "" && !slices.Contains(ProtocolVersions(), s.ProtocolVersion) {
		k.errorf(k.at(s, "protocol_version"), "Unsupported protocol version",
			"protocol_version in %s is %q; use one of %s, or remove it to use the newest.", name, s.ProtocolVersion, quoteList(ProtocolVersions()))
	}

	k.globs(s, "tools.include", name, s.Tools.Include)
	k.globs(s, "tools.exclude", name, s.Tools.Exclude)
	k.discovery(s.Discovery, k.at(s, "discovery.mode"), k.at(s, "discovery.pin"), name)

	if s.Reconnect.MaxRetries < 0 {
		k.errorf(k.at(s, "reconnect.max_retries"), "Invalid max_retries",
			"max_retries in %s is %d; it must be 0 or more (0 parks the server after its first failed connect).", name, s.Reconnect.MaxRetries)
	}
	k.positive(s, "reconnect.max_backoff", name, s.Reconnect.MaxBackoff)
	k.positive(s, "reconnect.parked_retry", name, s.Reconnect.ParkedRetry)
	k.positive(s, "reconnect.healthy_after", name, s.Reconnect.HealthyAfter)
	if s.Reconnect.UnresponsiveAfter < 1 {
		k.errorf(k.at(s, "reconnect.unresponsive_after"), "Invalid unresponsive_after",
			"unresponsive_after in %s is %d; it must be 1 or more (the consecutive call timeouts with no answer that replace the server; default %d).", name, s.Reconnect.UnresponsiveAfter, DefaultUnresponsiveAfter)
	}

	if s.Breaker.Threshold < 1 {
		k.errorf(k.at(s, "breaker.threshold"), "Invalid threshold",
			"threshold in %s is %d; it must be 1 or more (the number of consecutive failures that opens the breaker).%s", name, s.Breaker.Threshold, k.defaultsHint())
	}
	k.positive(s, "breaker.cooldown", name, s.Breaker.Cooldown)
	k.health(s, name)

	for _, f := range []struct {
		key string
		v   int
	}{
		{"catalog.max_tools", s.Catalog.MaxTools}, {"catalog.max_resources", s.Catalog.MaxResources},
		{"catalog.max_prompts", s.Catalog.MaxPrompts}, {"catalog.max_bytes", s.Catalog.MaxBytes},
		{"catalog.max_pages", s.Catalog.MaxPages},
	} {
		// Zero in a Config built in Go means the default; in a file it
		// was written.
		written := k.src != nil && k.src.servers[s] != nil
		if written {
			_, written = k.src.servers[s][f.key]
		}
		if f.v < 0 || (f.v == 0 && written) {
			attr := strings.TrimPrefix(f.key, "catalog.")
			k.errorf(k.at(s, f.key), "Invalid "+attr,
				"%s in %s is %d; it must be 1 or more (remove it for the default).", attr, name, f.v)
		}
	}

	if p := s.Plugin; p != nil {
		k.plugin(s, p, name)
	}
	k.containment(s, name)
}

// transport checks that a server's Transport matches the one attribute
// that selects it.
func (k *checker) transport(s *Server, name string) {
	switch {
	case s.URL != "":
		if s.Transport != TransportStreamable && s.Transport != TransportSSE {
			k.errorf(k.at(s, "transport"), "Invalid transport",
				"transport in %s is %q; a url server uses \"streamable-http\" (the default) or \"sse\" for the legacy HTTP+SSE transport.%s", name, s.Transport, k.defaultsHint())
		}
	case s.Command != "":
		// "" is accepted: the transport package runs it as stdio.
		if s.Transport != TransportStdio && s.Transport != "" {
			k.errorf(k.at(s, "command"), "Invalid transport",
				"%s sets command, so its transport must be %q, not %q.", name, TransportStdio, s.Transport)
		}
	case s.Plugin != nil:
		if s.Transport != TransportPlugin {
			k.errorf(k.at(s, "plugin"), "Invalid transport",
				"%s has a plugin block, so its transport must be %q, not %q.%s", name, TransportPlugin, s.Transport, k.defaultsHint())
		}
	}
}

func (k *checker) plugin(s *Server, p *Plugin, name string) {
	if p.Name == "" {
		k.errorf(k.at(s, "plugin.name"), "Empty plugin name",
			"The plugin block in %s has an empty label; name the transport, such as plugin \"unix\" { … }.", name)
	}
	if p.Command == "" {
		k.errorf(k.at(s, "plugin"), "Missing plugin command",
			"The plugin %q block in %s needs command, the path of the plugin binary.", p.Name, name)
	}
	if p.SHA256 != "" && !isHexSHA256(p.SHA256) {
		k.errorf(k.at(s, "plugin.sha256"), "Invalid sha256",
			"sha256 of the plugin %q in %s is %q; it must be 64 hexadecimal digits, as printed by `sha256sum %s`.", p.Name, name, p.SHA256, p.Command)
	}
	if len(p.Config) > 0 && !json.Valid(p.Config) {
		k.errorf(k.at(s, "plugin.config"), "Invalid plugin config",
			"The config of the plugin %q in %s is not valid JSON.", p.Name, name)
	}
}

func (k *checker) oauth(s *Server, o *OAuth, name string) {
	if s.URL == "" {
		k.errorf(k.at(s, "oauth"), "OAuth without url",
			"The oauth block in %s authorizes requests to an HTTP upstream, but the server has no url. Remove the oauth block, or give the server a url.", name)
		return
	}
	for _, key := range sortedKeys(s.Headers) {
		if strings.EqualFold(key, "Authorization") {
			k.errorf(k.at(s, "headers"), "Authorization header with oauth",
				"%s sets an Authorization header and an oauth block; the oauth block supplies the Authorization header from its access token. Remove the header.", name)
		}
	}
	grant := o.Grant
	if grant == "" {
		grant = GrantAuthorizationCode
	}
	if grant != GrantAuthorizationCode && grant != GrantClientCredentials && grant != GrantCrossAppAccess {
		k.errorf(k.at(s, "oauth.grant"), "Invalid grant",
			"grant in the oauth block of %s is %q; use \"authorization_code\" (tokens from `mcpvisor login %s`), \"client_credentials\" (machine to machine, with client_id and client_secret or private_key) or \"cross_app_access\" (an enterprise identity provider's ID token).", name, o.Grant, s.Name)
		return
	}
	if o.ClientSecret != "" && o.ClientID == "" {
		k.errorf(k.at(s, "oauth.client_secret"), "Client secret without client id",
			"The oauth block of %s sets client_secret but no client_id. A secret belongs to a client registered ahead of time: set client_id too, or remove client_secret to register a client dynamically at login.", name)
	}
	if grant == GrantClientCredentials || grant == GrantCrossAppAccess {
		if o.ClientID == "" || (o.ClientSecret == "" && o.PrivateKey == "") {
			k.errorf(k.at(s, "oauth"), "Missing client credentials",
				"The %s grant in %s authenticates as a registered confidential client, so the oauth block needs client_id and client_secret (such as client_secret = env(\"LINEAR_CLIENT_SECRET\")) or private_key (such as private_key = file(\"client-key.pem\")).", grant, name)
		}
		if o.ClientMetadataURL != "" {
			k.errorf(k.at(s, "oauth.client_metadata_url"), "Client metadata URL with "+grant,
				"client_metadata_url in %s applies to the authorization_code grant only; the %s grant uses client_id and client_secret or private_key. Remove it.", name, grant)
		}
	}
	k.oauthExtensions(s, o, name, grant)
	if o.ClientMetadataURL != "" {
		u, err := url.Parse(o.ClientMetadataURL)
		if err != nil || u.Scheme != "https" || u.Host == "" || strings.Trim(u.Path, "/") == "" {
			k.errorf(k.at(s, "oauth.client_metadata_url"), "Invalid client_metadata_url",
				"client_metadata_url in %s is %q; a Client ID Metadata Document is identified by an https URL with a path, such as \"https://example.com/mcpvisor/client.json\".", name, o.ClientMetadataURL)
		}
	}
	for _, sc := range o.Scopes {
		if sc == "" || strings.ContainsAny(sc, " \t\r\n\"\\") {
			k.errorf(k.at(s, "oauth.scopes"), "Invalid scope",
				"scopes in the oauth block of %s has %q; a scope is a non-empty word without spaces, quotes or backslashes, such as \"read\".", name, sc)
		}
	}
	if o.RedirectPort < 0 || o.RedirectPort > 65535 {
		k.errorf(k.at(s, "oauth.redirect_port"), "Invalid redirect_port",
			"redirect_port in the oauth block of %s is %d; use a port from 1 to 65535, or 0 (the default) for a free one.", name, o.RedirectPort)
	}
}

// oauthExtensions checks private_key, issuer and the cross_app_access
// attributes of an oauth block (docs/oauth.md).
func (k *checker) oauthExtensions(s *Server, o *OAuth, name, grant string) {
	if o.PrivateKey != "" {
		if grant == GrantAuthorizationCode {
			k.errorf(k.at(s, "oauth.private_key"), "private_key with authorization_code",
				"private_key in %s authenticates the client_credentials and cross_app_access grants; with the authorization_code grant use client_secret, or remove it.", name)
		}
		if o.ClientSecret != "" {
			k.errorf(k.at(s, "oauth.private_key"), "private_key and client_secret",
				"The oauth block of %s sets both private_key and client_secret; a client authenticates with one. Remove one of them.", name)
		}
		if err := CheckPrivateKey(o.PrivateKey); err != nil {
			k.errorf(k.at(s, "oauth.private_key"), "Invalid private_key",
				"private_key in the oauth block of %s: %v. Use a PEM-encoded EC (P-256, P-384, P-521), RSA or Ed25519 private key, such as private_key = file(\"client-key.pem\").", name, err)
		}
	}
	if o.Issuer != "" && !httpURL(o.Issuer) {
		k.errorf(k.at(s, "oauth.issuer"), "Invalid issuer",
			"issuer in the oauth block of %s is %q; it is the authorization server's issuer identifier, an http(s) URL such as \"https://auth.example.com\".", name, o.Issuer)
	}
	xaa := map[string]string{"id_token": o.IDToken, "idp_token_endpoint": o.IdPTokenEndpoint, "idp_client_id": o.IdPClientID, "idp_client_secret": o.IdPClientSecret}
	if grant != GrantCrossAppAccess {
		for _, key := range sortedKeys(xaa) {
			if xaa[key] != "" {
				k.errorf(k.at(s, "oauth."+key), key+" without cross_app_access",
					"%s in the oauth block of %s applies to grant = \"cross_app_access\" only. Set that grant, or remove it.", key, name)
			}
		}
		return
	}
	if o.IDToken == "" || o.IdPTokenEndpoint == "" || o.IdPClientID == "" {
		k.errorf(k.at(s, "oauth"), "Incomplete cross_app_access",
			"The cross_app_access grant in %s exchanges an ID token at the identity provider, so the oauth block needs id_token (such as id_token = file(\"id-token.jwt\")), idp_token_endpoint and idp_client_id.", name)
	}
	if o.IdPTokenEndpoint != "" && !httpURL(o.IdPTokenEndpoint) {
		k.errorf(k.at(s, "oauth.idp_token_endpoint"), "Invalid idp_token_endpoint",
			"idp_token_endpoint in the oauth block of %s is %q; use the identity provider's token endpoint, an http(s) URL.", name, o.IdPTokenEndpoint)
	}
}

// httpURL reports whether v is an absolute http or https URL with a host.
func httpURL(v string) bool {
	u, err := url.Parse(v)
	return err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != ""
}

// positive reports a duration that is zero or negative.
func (k *checker) positive(s *Server, key, name string, d time.Duration) {
	if d > 0 {
		return
	}
	attr := key[strings.LastIndexByte(key, '.')+1:]
	k.errorf(k.at(s, key), "Invalid "+attr,
		"%s in %s is %s; it must be greater than zero, such as \"30s\".%s", attr, name, d, k.defaultsHint())
}

// health checks a server's health block: a ping due every interval, each
// bounded by a timeout shorter than the interval (else pings would
// overlap, and a ping still waiting could never be told from the next).
func (k *checker) health(s *Server, name string) {
	h := s.Health
	block := k.written(s, "health")
	if !block && h == (Health{}) {
		return
	}
	switch {
	case h.Interval == 0 && !k.written(s, "health.interval"):
		k.errorf(k.at(s, "health"), "Missing health interval",
			"The health block in %s has no interval; set it to how often a ping is due, such as interval = \"30s\" (with timeout = \"5s\"), or remove the block.", name)
		return
	case h.Interval < MinHealthInterval:
		k.errorf(k.at(s, "health.interval"), "Invalid health interval",
			"interval in the health block of %s is %s; it must be at least %s, such as \"30s\".", name, h.Interval, MinHealthInterval)
		return
	}
	switch {
	case h.Timeout <= 0:
		k.errorf(k.at(s, "health.timeout"), "Invalid health timeout",
			"timeout in the health block of %s is %s; it must be greater than zero and shorter than its interval (%s), such as %q, or removed (default %s, at most half the interval).", name, h.Timeout, h.Interval, (h.Interval / 4).String(), DefaultHealthTimeout)
	case h.Timeout >= h.Interval:
		k.errorf(k.at(s, "health.timeout"), "Health timeout not shorter than its interval",
			"timeout in the health block of %s is %s, not shorter than its interval (%s): a ping must end before the next is due. Lower timeout (such as %q) or raise interval.", name, h.Timeout, h.Interval, (h.Interval / 4).String())
	}
}

// The bounds of a size setting: below minMessageSize an ordinary
// initialize or tools/list answer would not fit; above maxMessageSize one
// message alone could take a large part of a host's memory.
const (
	minMessageSize int64 = 64 << 10
	maxMessageSize int64 = 1 << 30
)

// messageFitsInflight reports a server whose largest message could never
// fit in the host's budget for bytes in flight: its every large result
// would be refused as busy.
func (k *checker) messageFitsInflight(s *Server, inflight int64) {
	if inflight <= 0 {
		inflight = DefaultMaxInflightBytes
	}
	if s.MaxMessageSize > inflight {
		k.errorf(k.at(s, "max_message_size"), "max_message_size over max_inflight_bytes",
			"max_message_size in server %q is %s, more than max_inflight_bytes of the host block (%s): a message that large could never be held. Lower max_message_size or raise max_inflight_bytes.", s.Name, FormatSize(s.MaxMessageSize), FormatSize(inflight))
	}
}

// globs reports patterns path.Match would reject.
func (k *checker) globs(s *Server, key, name string, patterns []string) {
	attr := key[strings.LastIndexByte(key, '.')+1:]
	for _, p := range patterns {
		if _, err := path.Match(p, ""); err != nil {
			k.errorf(k.at(s, key), "Invalid glob",
				"%s in the tools block of %s has the pattern %q, which is malformed (%s). Use * and ? wildcards and [a-z] classes, such as \"read_*\".", attr, name, p, err)
		}
	}
}

// discovery checks a discovery block of where (the host block or a server).
func (k *checker) discovery(d Discovery, modeAt, pinAt *hcl.Range, where string) {
	if d.Mode != "" && d.Mode != DiscoveryList && d.Mode != DiscoverySearch {
		k.errorf(modeAt, "Invalid discovery mode",
			"mode in the discovery block of %s is %q; use \"search\" (tools/list shows mcpvisor__search_tools, mcpvisor__call_tool and the pinned tools) or \"list\" (every tool, the default). See docs/discovery.md.", where, d.Mode)
	}
	for _, p := range d.Pin {
		if _, err := path.Match(p, ""); err != nil {
			k.errorf(pinAt, "Invalid glob",
				"pin in the discovery block of %s has the pattern %q, which is malformed (%s). Use * and ? wildcards and [a-z] classes, such as \"github__*\".", where, p, err)
		}
	}
}

func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		if ue, ok := err.(*url.Error); ok {
			return ue.Err
		}
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		if u.Scheme == "" {
			return fmt.Errorf("it has no scheme")
		}
		return fmt.Errorf("the scheme %q is not http or https", u.Scheme)
	}
	if u.Host == "" {
		return fmt.Errorf("it has no host")
	}
	return nil
}

func isHexSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", r) {
			return false
		}
	}
	return true
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r >= 0x80 || !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r)) {
			return false
		}
	}
	return true
}

func quoteList(vs []string) string {
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, ", ")
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
