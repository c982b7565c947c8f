package oauth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/hashicorp/go-hclog"

	"github.com/mcpvisor/mcpvisor/host"
	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// ecKeyPEM returns a new P-256 key and its PKCS #8 PEM.
func ecKeyPEM(t *testing.T) (*ecdsa.PrivateKey, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return key, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}

// loadConfig writes src (with files) to a directory and loads it, so that
// file("…") reads from there as in a user's config.
func loadConfig(t *testing.T, src string, files map[string]string) *config.Config {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "mcpvisor.hcl")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startHost starts a host for cfg and waits until its servers settle.
func startHost(t *testing.T, cfg *config.Config, logs *syncBuffer) *host.Host {
	t.Helper()
	h, err := host.New(cfg, host.WithTokenStore(t.TempDir()),
		host.WithLogger(hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Trace})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.Close(cctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	return h
}

// callFor calls tool repeatedly for d; every call must succeed.
func callFor(t *testing.T, h *host.Host, tool string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for i := 0; time.Now().Before(deadline); i++ {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := h.CallTool(cctx, tool, map[string]any{"text": "hi"})
		cancel()
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func status(h *host.Host, name string) host.ServerStatus {
	for _, st := range h.Status() {
		if st.Name == name {
			return st
		}
	}
	return host.ServerStatus{}
}

// TestPrivateKeyJWT: a client_credentials client that authenticates with
// private_key_jwt gets tokens with a fresh signed assertion each time: the
// authorization server verifies it with the client's public key and checks
// iss, sub, aud, exp and jti (a replay is refused). A client whose key the
// server does not know is refused with a message naming private_key.
func TestPrivateKeyJWT(t *testing.T) {
	ps := newProtectedServer(t, 2*time.Second)
	key, keyPEM := ecKeyPEM(t)
	_, otherPEM := ecKeyPEM(t)
	ps.mu.Lock()
	ps.jwtClients["jwt-client"] = key.Public()
	ps.mu.Unlock()
	cfg := loadConfig(t, fmt.Sprintf(`
server "m2m" {
  url = %q
  oauth {
    grant       = "client_credentials"
    client_id   = "jwt-client"
    private_key = file("client-key.pem")
  }
}
server "wrongkey" {
  url = %q
  oauth {
    grant       = "client_credentials"
    client_id   = "jwt-client"
    private_key = file("other-key.pem")
  }
}`, ps.URL(), ps.URL()), map[string]string{"client-key.pem": keyPEM, "other-key.pem": otherPEM})
	logs := &syncBuffer{}
	h := startHost(t, cfg, logs)
	if st := status(h, "m2m"); st.State != "ready" {
		t.Fatalf("m2m is %s: %s", st.State, st.LastError)
	}
	callFor(t, h, "m2m__echo", 5*time.Second)

	ps.mu.Lock()
	assertions := append([]jwt.RegisteredClaims(nil), ps.assertions...)
	refusals := append([]string(nil), ps.refusals...)
	ps.mu.Unlock()
	if len(assertions) < 2 {
		t.Errorf("%d accepted client assertions in 5 s of 2-second tokens, want at least 2", len(assertions))
	}
	for _, c := range assertions {
		if c.Issuer != "jwt-client" || c.Subject != "jwt-client" || len(c.Audience) != 1 || c.Audience[0] != ps.srv.URL ||
			c.ExpiresAt == nil || c.IssuedAt == nil || c.ID == "" || c.ExpiresAt.Sub(c.IssuedAt.Time) > 5*time.Minute {
			t.Errorf("client assertion claims %+v: want iss and sub jwt-client, aud %s, a short exp, iat and jti", c, ps.srv.URL)
		}
	}
	if ps.resourceSeen(ps.URL()) == 0 {
		t.Errorf("no token request carried the resource indicator")
	}

	st := status(h, "wrongkey")
	if st.State == "ready" || !strings.Contains(st.LastError, `refused the client_credentials grant of server "wrongkey"`) ||
		!strings.Contains(st.LastError, "private_key") {
		t.Errorf("wrongkey is %s: %q; want it not ready, its error naming the server and private_key", st.State, st.LastError)
	}
	if len(refusals) == 0 || !strings.Contains(strings.Join(refusals, "\n"), "signature is invalid") {
		t.Errorf("the authorization server's refusals %q name no invalid signature", refusals)
	}
	for _, secret := range append(ps.tokens(), strings.TrimSpace(keyPEM)) {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("secret %.12s… appears in the logs", secret)
		}
	}
}

// TestIssuerMismatchStrictByDefault: authorization server metadata at the
// root's well-known URL naming issuer <root>/oauth is refused (RFC 8414
// §3.3) unless the oauth block names that issuer; with it, login (whose
// authorization response names that issuer in iss) and the
// client_credentials grant both work, and a client assertion's aud is that
// issuer.
func TestIssuerMismatchStrictByDefault(t *testing.T) {
	ps := newProtectedServer(t, time.Minute)
	key, keyPEM := ecKeyPEM(t)
	ps.mu.Lock()
	ps.issuer = ps.srv.URL + "/oauth"
	ps.jwtClients["jwt-client"] = key.Public()
	ps.mu.Unlock()
	cfg := loadConfig(t, fmt.Sprintf(`
server "strict" {
  url = %[1]q
  oauth {}
}
server "explicit" {
  url = %[1]q
  oauth { issuer = %[2]q }
}
server "strict-m2m" {
  url = %[1]q
  oauth {
    grant         = "client_credentials"
    client_id     = "cc-client"
    client_secret = "cc-secret"
  }
}
server "explicit-m2m" {
  url = %[1]q
  oauth {
    grant         = "client_credentials"
    client_id     = "cc-client"
    client_secret = "cc-secret"
    issuer        = %[2]q
  }
}
server "explicit-jwt" {
  url = %[1]q
  oauth {
    grant       = "client_credentials"
    client_id   = "jwt-client"
    private_key = file("client-key.pem")
    issuer      = %[2]q
  }
}`, ps.URL(), ps.srv.URL+"/oauth"), map[string]string{"client-key.pem": keyPEM})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tokens := t.TempDir()
	opts := host.LoginOptions{Open: testutil.Browser, TokenStore: tokens}
	_, err := host.Login(ctx, cfg, "strict", opts)
	if err == nil || !strings.Contains(err.Error(), "does not match issuer") {
		t.Errorf("Login(strict) = %v; want the foreign issuer refused", err)
	}
	if _, err := host.Login(ctx, cfg, "explicit", opts); err != nil {
		t.Errorf("Login(explicit) = %v; want the named issuer accepted", err)
	}

	h, err := host.New(cfg, host.WithTokenStore(tokens), host.WithLogger(hclog.NewNullLogger()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.Close(cctx)
	})
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	for name, ready := range map[string]bool{"explicit": true, "explicit-m2m": true, "explicit-jwt": true, "strict-m2m": false} {
		st := status(h, name)
		if (st.State == "ready") != ready {
			t.Errorf("server %s is %s (%s); want ready %v", name, st.State, st.LastError, ready)
		}
	}
	if st := status(h, "strict-m2m"); !strings.Contains(st.LastError, "does not match issuer") {
		t.Errorf("strict-m2m's error %q does not say the issuer does not match", st.LastError)
	}
	callFor(t, h, "explicit__echo", 200*time.Millisecond)
	callFor(t, h, "explicit-m2m__echo", 200*time.Millisecond)
	callFor(t, h, "explicit-jwt__echo", 200*time.Millisecond)
}

// identityProvider is an enterprise IdP's token endpoint for RFC 8693
// token exchange: it takes idToken from idp-client and issues ID-JAGs
// signed with its key.
type identityProvider struct {
	srv     *httptest.Server
	key     *ecdsa.PrivateKey
	idToken string

	mu        sync.Mutex
	exchanges int
	refusals  []string
}

func newIdentityProvider(t *testing.T, idToken string) *identityProvider {
	key, _ := ecKeyPEM(t)
	idp := &identityProvider{key: key, idToken: idToken}
	idp.srv = httptest.NewServer(http.HandlerFunc(idp.token))
	t.Cleanup(idp.srv.Close)
	return idp
}

func (idp *identityProvider) token(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/token" || r.ParseForm() != nil {
		http.NotFound(w, r)
		return
	}
	f := r.PostForm
	idp.mu.Lock()
	defer idp.mu.Unlock()
	var wrong []string
	for k, want := range map[string]string{
		"grant_type":           "urn:ietf:params:oauth:grant-type:token-exchange",
		"subject_token_type":   "urn:ietf:params:oauth:token-type:id_token",
		"requested_token_type": "urn:ietf:params:oauth:token-type:id-jag",
		"client_id":            "idp-client",
		"subject_token":        idp.idToken,
	} {
		if f.Get(k) != want {
			wrong = append(wrong, k)
		}
	}
	if f.Get("audience") == "" || f.Get("resource") == "" {
		wrong = append(wrong, "audience or resource")
	}
	if len(wrong) > 0 {
		idp.refusals = append(idp.refusals, strings.Join(wrong, ", "))
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant"})
		return
	}
	idp.exchanges++
	jag := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
		"iss": idp.srv.URL, "sub": "alice@example.com", "aud": f.Get("audience"),
		"resource": f.Get("resource"), "client_id": "xaa-client",
		"iat": time.Now().Unix(), "exp": time.Now().Add(5 * time.Minute).Unix(), "jti": rand.Text(),
	})
	jag.Header["typ"] = "oauth-id-jag+jwt"
	signed, err := jag.SignedString(idp.key)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "server_error"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"access_token": signed, "issued_token_type": "urn:ietf:params:oauth:token-type:id-jag", "token_type": "N_A",
	})
}

// TestCrossAppAccess: the cross_app_access grant exchanges the configured ID
// token at the identity provider for an ID-JAG naming the server's
// authorization server and resource, and presents it there as a JWT bearer
// grant, again whenever the access token runs out. An ID token the IdP
// refuses leaves the server not ready with an error saying what to do.
func TestCrossAppAccess(t *testing.T) {
	ps := newProtectedServer(t, 2*time.Second)
	idp := newIdentityProvider(t, "id-token-of-alice")
	ps.mu.Lock()
	ps.clients["xaa-client"] = "xaa-secret"
	ps.idpKey, ps.idpIssuer = idp.key.Public(), idp.srv.URL
	ps.mu.Unlock()
	cfg := loadConfig(t, fmt.Sprintf(`
server "xaa" {
  url = %[1]q
  oauth {
    grant              = "cross_app_access"
    client_id          = "xaa-client"
    client_secret      = "xaa-secret"
    id_token           = file("id-token.jwt")
    idp_token_endpoint = %[2]q
    idp_client_id      = "idp-client"
  }
}
server "stale" {
  url = %[1]q
  oauth {
    grant              = "cross_app_access"
    client_id          = "xaa-client"
    client_secret      = "xaa-secret"
    id_token           = "an-expired-id-token"
    idp_token_endpoint = %[2]q
    idp_client_id      = "idp-client"
  }
}`, ps.URL(), idp.srv.URL+"/token"), map[string]string{"id-token.jwt": "id-token-of-alice\n"})
	logs := &syncBuffer{}
	h := startHost(t, cfg, logs)
	if st := status(h, "xaa"); st.State != "ready" {
		t.Fatalf("xaa is %s: %s", st.State, st.LastError)
	}
	callFor(t, h, "xaa__echo", 5*time.Second)

	idp.mu.Lock()
	exchanges := idp.exchanges
	idp.mu.Unlock()
	ps.mu.Lock()
	refusals := append([]string(nil), ps.refusals...)
	ps.mu.Unlock()
	if n := ps.count(grantJWTBearer); n < 2 || exchanges < n {
		t.Errorf("%d JWT bearer grants and %d token exchanges in 5 s of 2-second tokens; want at least 2, each with its own exchange (refusals: %q)",
			n, exchanges, refusals)
	}
	st := status(h, "stale")
	if st.State == "ready" || !strings.Contains(st.LastError, `refused to exchange the ID token of server "stale"`) ||
		!strings.Contains(st.LastError, "replace id_token") {
		t.Errorf("stale is %s: %q; want it not ready, its error naming the server and id_token", st.State, st.LastError)
	}
	for _, secret := range append(ps.tokens(), "id-token-of-alice", "an-expired-id-token", "xaa-secret") {
		if strings.Contains(logs.String(), secret) || strings.Contains(st.LastError, secret) {
			t.Errorf("secret %.12s… appears in the logs or status", secret)
		}
	}
}
