package gateway

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// statelessProtocolVersion is the first MCP protocol version without
// sessions (SEP-2575). Requests that declare it or a later one in the
// Mcp-Protocol-Version header are served statelessly; older clients get the
// session-based transport.
const statelessProtocolVersion = "2026-07-28"

// HTTPHandler returns the handler for streamable HTTP at /mcp. Every request
// passes the Origin check (403), then the bearer token check (401) when a
// token is configured. The go-sdk handler behind them rejects a non-loopback
// Host header on a loopback listener (DNS rebinding) and answers an unknown
// session id with 404. Clients speaking 2026-07-28 or later are served
// statelessly, older ones with sessions; their tools/call requests take the
// fast path when they can (fasthttp.go).
func (g *Gateway) HTTPHandler() http.Handler {
	g.httpOnce.Do(func() {
		getServer := func(*http.Request) *mcp.Server { return g.server }
		logger := newSlogLogger(g.logger.Named("http"))
		stateful := mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{Logger: logger})
		stateless := mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{Logger: logger, Stateless: true})
		byVersion := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if v := r.Header.Get("Mcp-Protocol-Version"); v >= statelessProtocolVersion {
				stateless.ServeHTTP(w, r)
				return
			}
			if r.Method == http.MethodDelete {
				// The session ends now, not when the fast path's cache
				// hears of it.
				g.hf.sessions.Delete(r.Header.Get("Mcp-Session-Id"))
			}
			if g.rawBackend != nil && g.serveFast(w, r) {
				return
			}
			stateful.ServeHTTP(w, r)
		})
		mux := http.NewServeMux()
		mux.Handle("/mcp", g.checkOrigin(g.checkBearer(byVersion)))
		g.httpHandler = mux
	})
	return g.httpHandler
}

// checkOrigin refuses browser requests from origins other than loopback
// and the configured ones, so a web page cannot drive the gateway.
func (g *Gateway) checkOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if !g.originAllowed(origin) {
			g.logger.Warn("http request refused: origin not allowed", "origin", origin, "remote", r.RemoteAddr)
			http.Error(w, "Forbidden: origin not allowed", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// originAllowed reports whether a request with this Origin header (empty:
// none) may use the gateway.
func (g *Gateway) originAllowed(origin string) bool {
	g.checksOnce.Do(g.initChecks)
	return origin == "" || loopbackOrigin(origin) || g.allowedOrigins[normaliseOrigin(origin)]
}

// checkBearer requires the configured bearer token.
func (g *Gateway) checkBearer(next http.Handler) http.Handler {
	if g.opts.BearerToken == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.bearerAllowed(r.Header.Get("Authorization")) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mcpvisor"`)
			http.Error(w, "Unauthorized: a valid bearer token is required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bearerAllowed reports whether a request with this Authorization header
// may use the gateway: always without a configured token. The comparison
// is of fixed-length digests in constant time, so neither the token's
// content nor its length leaks through timing.
func (g *Gateway) bearerAllowed(authorization string) bool {
	if g.opts.BearerToken == "" {
		return true
	}
	g.checksOnce.Do(g.initChecks)
	got, ok := bearerToken(authorization)
	sum := sha256.Sum256([]byte(got))
	return ok && subtle.ConstantTimeCompare(sum[:], g.wantToken[:]) == 1
}

func (g *Gateway) initChecks() {
	g.allowedOrigins = make(map[string]bool, len(g.opts.AllowedOrigins))
	for _, o := range g.opts.AllowedOrigins {
		g.allowedOrigins[normaliseOrigin(o)] = true
	}
	g.wantToken = sha256.Sum256([]byte(g.opts.BearerToken))
}

// frontFast reports whether the front (h1.go) should offer req to the fast
// path: a POST to /mcp on a session, from an allowed origin with the
// token, on a version with sessions. serveFast makes the remaining checks.
func (g *Gateway) frontFast(req *frontRequest) bool {
	return g.rawBackend != nil && req.method == http.MethodPost && req.target == "/mcp" &&
		req.hosts == 1 && req.get("Mcp-Session-Id") != "" &&
		req.get("Mcp-Protocol-Version") < statelessProtocolVersion &&
		g.originAllowed(req.get("Origin")) && g.bearerAllowed(req.get("Authorization"))
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

// loopbackOrigin reports whether origin is http(s) on localhost, 127.0.0.1
// (any loopback IP) or [::1], on any port.
func loopbackOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func normaliseOrigin(o string) string {
	return strings.ToLower(strings.TrimRight(strings.TrimSpace(o), "/"))
}
