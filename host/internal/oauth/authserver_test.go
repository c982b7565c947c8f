package oauth_test

import (
	"cmp"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// protectedServer is an OAuth-protected MCP server and its authorization
// server in one httptest server: the MCP endpoint at /mcp behind the
// go-sdk's RequireBearerToken middleware, RFC 9728 metadata, and a small
// authorization server (RFC 8414 metadata, dynamic registration, an
// authorization endpoint that approves at once, PKCE-checking token
// endpoint with rotating refresh tokens and the client-credentials grant).
type protectedServer struct {
	t        *testing.T
	srv      *httptest.Server
	lifetime time.Duration // of access tokens

	mu              sync.Mutex
	clients         map[string]string    // client id → secret ("" for public)
	codes           map[string]codeGrant // authorization code → grant
	access          map[string]time.Time // access token → expiry
	refresh         map[string]bool      // refresh token → valid
	issued          []string             // every token issued, for leak checks
	counts          map[string]int       // grant type → tokens issued
	resource        map[string]int       // resource parameter values seen at /token
	resourceByGrant map[string]int       // token requests with a resource, by grant type

	// Misbehaviours a login must report once and clearly.
	refuseTokens bool // the MCP endpoint refuses every token
	refuseCodes  bool // the token endpoint answers 400 to every authorization code
	htmlRegister bool // registration answers with an HTML error page

	// issuer, when set, is the issuer the metadata names instead of the
	// server's own URL (the 2025-03-26 layout some servers keep).
	issuer string
	// jwtClients are the clients that authenticate with private_key_jwt:
	// client id → public key. jtis are the assertion ids seen (a replay
	// is refused), assertions the claims of every accepted assertion.
	jwtClients map[string]crypto.PublicKey
	jtis       map[string]bool
	assertions []jwt.RegisteredClaims
	// idpKey verifies the ID-JAGs of the jwt-bearer grant; idpIssuer is
	// their issuer.
	idpKey    crypto.PublicKey
	idpIssuer string
	// refusals are why client authentication or a grant was refused.
	refusals []string
}

type codeGrant struct {
	clientID, challenge, redirect, resource string
}

func newProtectedServer(t *testing.T, lifetime time.Duration) *protectedServer {
	p := &protectedServer{
		t: t, lifetime: lifetime,
		clients: map[string]string{"cc-client": "cc-secret"},
		codes:   map[string]codeGrant{}, access: map[string]time.Time{}, refresh: map[string]bool{},
		counts: map[string]int{}, resource: map[string]int{}, resourceByGrant: map[string]int{},
		jwtClients: map[string]crypto.PublicKey{}, jtis: map[string]bool{},
	}
	mux := http.NewServeMux()
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	base := p.srv.URL

	server := mcp.NewServer(&mcp.Implementation{Name: "protected", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "echo", Description: "echoes text"},
		func(ctx context.Context, req *mcp.CallToolRequest, in struct {
			Text string `json:"text"`
		}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
		})
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	// Sessions whose client lost its tokens cannot be deleted by it; a real
	// server would time them out.
	t.Cleanup(func() {
		for ss := range server.Sessions() {
			ss.Close()
		}
	})
	mux.Handle("/mcp", auth.RequireBearerToken(p.verify, &auth.RequireBearerTokenOptions{
		ResourceMetadataURL: base + "/.well-known/oauth-protected-resource/mcp",
	})(handler))
	mux.Handle("/.well-known/oauth-protected-resource/mcp", auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource:             base + "/mcp",
		AuthorizationServers: []string{base},
		ScopesSupported:      []string{"tools"},
	}))
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		issuer := cmp.Or(p.issuer, base)
		p.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{
			"issuer":                                           issuer,
			"authorization_endpoint":                           base + "/authorize",
			"token_endpoint":                                   base + "/token",
			"registration_endpoint":                            base + "/register",
			"response_types_supported":                         []string{"code"},
			"grant_types_supported":                            []string{"authorization_code", "refresh_token", "client_credentials", grantJWTBearer},
			"code_challenge_methods_supported":                 []string{"S256"},
			"token_endpoint_auth_methods_supported":            []string{"none", "client_secret_post", "private_key_jwt"},
			"token_endpoint_auth_signing_alg_values_supported": []string{"ES256", "RS256", "EdDSA"},
			"authorization_response_iss_parameter_supported":   true,
			"scopes_supported":                                 []string{"tools", "offline_access"},
		})
	})
	mux.HandleFunc("/register", p.register)
	mux.HandleFunc("/authorize", p.authorize)
	mux.HandleFunc("/token", p.token)
	return p
}

// URL is the MCP endpoint.
func (p *protectedServer) URL() string { return p.srv.URL + "/mcp" }

func (p *protectedServer) verify(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	exp, ok := p.access[token]
	if !ok || time.Now().After(exp) || p.refuseTokens {
		return nil, auth.ErrInvalidToken
	}
	return &auth.TokenInfo{Scopes: []string{"tools"}, Expiration: exp}, nil
}

func (p *protectedServer) register(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	html := p.htmlRegister
	p.mu.Unlock()
	if html {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprint(w, registerErrorPage)
		return
	}
	var meta oauthex.ClientRegistrationMetadata
	if err := json.NewDecoder(r.Body).Decode(&meta); err != nil || len(meta.RedirectURIs) == 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_client_metadata"})
		return
	}
	id := "dyn-" + rand.Text()
	p.mu.Lock()
	p.clients[id] = ""
	p.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]any{
		"client_id": id, "redirect_uris": meta.RedirectURIs, "token_endpoint_auth_method": "none",
	})
}

// authorize approves at once and redirects back with a code, like a
// browser session that is already logged in and has consented.
func (p *protectedServer) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p.mu.Lock()
	_, known := p.clients[q.Get("client_id")]
	p.mu.Unlock()
	redirect, err := url.Parse(q.Get("redirect_uri"))
	switch {
	case !known:
		http.Error(w, "unknown client", http.StatusBadRequest)
		return
	case err != nil || redirect.Hostname() != "127.0.0.1":
		http.Error(w, "redirect_uri must be a loopback URL", http.StatusBadRequest)
		return
	case q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "":
		http.Error(w, "PKCE S256 required", http.StatusBadRequest)
		return
	case q.Get("resource") != p.URL():
		http.Error(w, "resource must be the MCP endpoint", http.StatusBadRequest)
		return
	}
	code := rand.Text()
	p.mu.Lock()
	p.codes[code] = codeGrant{q.Get("client_id"), q.Get("code_challenge"), q.Get("redirect_uri"), q.Get("resource")}
	p.mu.Unlock()
	rq := redirect.Query()
	rq.Set("code", code)
	rq.Set("state", q.Get("state"))
	p.mu.Lock()
	rq.Set("iss", cmp.Or(p.issuer, p.srv.URL)) // RFC 9207
	p.mu.Unlock()
	redirect.RawQuery = rq.Encode()
	http.Redirect(w, r, redirect.String(), http.StatusFound)
}

func (p *protectedServer) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_request"})
		return
	}
	f := r.PostForm
	clientID, secret, hasBasic := r.BasicAuth()
	if !hasBasic {
		clientID, secret = f.Get("client_id"), f.Get("client_secret")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if f.Has("client_assertion") {
		if err := p.verifyClientAssertion(clientID, f); err != nil {
			p.refusals = append(p.refusals, err.Error())
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_client"})
			return
		}
	} else if want, known := p.clients[clientID]; !known || want != secret {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_client"})
		return
	}
	grant := f.Get("grant_type")
	if res := f.Get("resource"); res != "" {
		p.resource[res]++
	}
	withRefresh := true
	switch grant {
	case "authorization_code":
		if p.refuseCodes {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant"})
			return
		}
		g, ok := p.codes[f.Get("code")]
		delete(p.codes, f.Get("code"))
		sum := sha256.Sum256([]byte(f.Get("code_verifier")))
		if !ok || g.clientID != clientID || g.redirect != f.Get("redirect_uri") ||
			base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant"})
			return
		}
	case "refresh_token":
		rt := f.Get("refresh_token")
		if !p.refresh[rt] {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant"})
			return
		}
		delete(p.refresh, rt) // rotation: a refresh token works once
	case "client_credentials":
		withRefresh = false
	case grantJWTBearer:
		if err := p.verifyIDJAG(clientID, f.Get("assertion")); err != nil {
			p.refusals = append(p.refusals, err.Error())
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant"})
			return
		}
		withRefresh = false
	default:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "unsupported_grant_type"})
		return
	}
	p.counts[grant]++
	if f.Get("resource") != "" {
		p.resourceByGrant[grant]++
	}
	access := "at-" + rand.Text()
	p.access[access] = time.Now().Add(p.lifetime)
	p.issued = append(p.issued, access)
	body := map[string]any{"access_token": access, "token_type": "Bearer", "expires_in": p.lifetime.Seconds()}
	if withRefresh {
		rt := "rt-" + rand.Text()
		p.refresh[rt] = true
		p.issued = append(p.issued, rt)
		body["refresh_token"] = rt
	}
	writeJSON(w, http.StatusOK, body)
}

// grantJWTBearer is RFC 7523's grant type.
const grantJWTBearer = "urn:ietf:params:oauth:grant-type:jwt-bearer"

// verifyClientAssertion checks a private_key_jwt client assertion (RFC 7523
// §3): signed by the client's key, iss and sub the client, aud this
// authorization server's issuer, an expiry, and a jti not seen before.
func (p *protectedServer) verifyClientAssertion(clientID string, f url.Values) error {
	if f.Get("client_assertion_type") != "urn:ietf:params:oauth:client-assertion-type:jwt-bearer" {
		return fmt.Errorf("client_assertion_type is %q", f.Get("client_assertion_type"))
	}
	key, ok := p.jwtClients[clientID]
	if !ok {
		return fmt.Errorf("client %q has no registered key", clientID)
	}
	var claims jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(f.Get("client_assertion"), &claims, func(*jwt.Token) (any, error) { return key, nil },
		jwt.WithValidMethods([]string{"ES256", "RS256", "EdDSA"}), jwt.WithAudience(cmp.Or(p.issuer, p.srv.URL)),
		jwt.WithIssuer(clientID), jwt.WithSubject(clientID), jwt.WithExpirationRequired(), jwt.WithIssuedAt())
	if err != nil {
		return fmt.Errorf("client assertion: %v", err)
	}
	if claims.ID == "" || p.jtis[claims.ID] {
		return fmt.Errorf("client assertion jti %q is missing or replayed", claims.ID)
	}
	p.jtis[claims.ID] = true
	p.assertions = append(p.assertions, claims)
	return nil
}

// verifyIDJAG checks an ID-JAG presented as a JWT bearer grant: signed by
// the identity provider, typ oauth-id-jag+jwt, aud this authorization
// server, for this resource and the authenticated client.
func (p *protectedServer) verifyIDJAG(clientID, assertion string) error {
	claims := jwt.MapClaims{}
	tok, err := jwt.ParseWithClaims(assertion, claims, func(*jwt.Token) (any, error) { return p.idpKey, nil },
		jwt.WithValidMethods([]string{"ES256"}), jwt.WithAudience(p.srv.URL), jwt.WithIssuer(p.idpIssuer),
		jwt.WithExpirationRequired())
	if err != nil {
		return fmt.Errorf("ID-JAG: %v", err)
	}
	if tok.Header["typ"] != "oauth-id-jag+jwt" {
		return fmt.Errorf("ID-JAG typ is %v", tok.Header["typ"])
	}
	if claims["resource"] != p.URL() || claims["client_id"] != clientID {
		return fmt.Errorf("ID-JAG for resource %v and client %v, not %s and %s", claims["resource"], claims["client_id"], p.URL(), clientID)
	}
	return nil
}

// registerErrorPage is what a proxy in front of an authorization server
// answers a registration with when the server is down.
const registerErrorPage = `<!DOCTYPE html>
<html><head><title>502 Bad Gateway</title><style>body{font-family:sans-serif}</style></head>
<body><h1>Bad Gateway</h1><p>The proxy server received an invalid response from an upstream server.</p>
<script>window.trackError && trackError("registration")</script></body></html>
`

// revokeAccess makes every access token invalid; refresh tokens still work.
func (p *protectedServer) revokeAccess() {
	p.mu.Lock()
	clear(p.access)
	p.mu.Unlock()
}

// revokeAll makes every token invalid: only a new login helps.
func (p *protectedServer) revokeAll() {
	p.mu.Lock()
	clear(p.access)
	clear(p.refresh)
	p.mu.Unlock()
}

func (p *protectedServer) count(grant string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[grant]
}

func (p *protectedServer) tokens() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.issued...)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// resourceFor counts the token requests of grant type grant that carried
// a resource.
func (p *protectedServer) resourceFor(grant string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resourceByGrant[grant]
}

// resourceSeen counts token requests that carried resource.
func (p *protectedServer) resourceSeen(resource string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resource[resource]
}
