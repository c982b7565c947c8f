//go:build unix

package hardening_test

// What mcpvisor takes for an access token (docs/auth.md, "What mcpvisor
// checks in a token"), against the real OpenID provider: opaque tokens
// checked at its introspection endpoint (RFC 7662) and cached; typ
// at+jwt when required (RFC 9068 §4); azp when a token names several
// audiences; clock_skew for nbf; scopes_supported advertised without
// being required.

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// sign makes a JWT of claims signed with the provider's current key,
// with typ in its header: a token the provider's key set verifies.
func (p *testProvider) sign(t *testing.T, typ string, claims map[string]any) string {
	t.Helper()
	p.mu.Lock()
	k := p.keys[0]
	p.mu.Unlock()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: k.key, KeyID: k.id}},
		(&jose.SignerOptions{}).WithType(jose.ContentType(typ)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(claims)
	jws, err := signer.Sign(b)
	if err != nil {
		t.Fatal(err)
	}
	s, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// claimsFor are the claims of an ordinary access token of p for sub,
// valid for a minute from now.
func (p *testProvider) claimsFor(sub string) map[string]any {
	now := time.Now()
	return map[string]any{"iss": p.issuer, "sub": sub, "aud": []string{p.audience}, "iat": now.Unix(),
		"nbf": now.Unix(), "exp": now.Add(time.Minute).Unix(), "client_id": sub}
}

// TestOpaqueTokensIntrospected: with introspection_url, the provider's
// opaque tokens open sessions and call tools; the answer is cached (a
// second session with the same token asks the provider nothing); a
// made-up opaque token and an expired JWT get 401.
func TestOpaqueTokensIntrospected(t *testing.T) {
	p := startProvider(t, "")
	oidcExtra := "      introspection_url = " + hclString(p.issuer+"/oauth/introspect") + "\n" +
		"      client_id = " + hclString(introspectClient) + "\n      client_secret = " + hclString(opSecret) + "\n"
	mv := startMcpvisorWith(t, oidcHost(p.issuer, "", oidcExtra), echoBlock())
	p.audience = "http://" + mv.addr + "/mcp"

	opaque := p.token(t, clientOpaque)
	if strings.Count(opaque, ".") == 2 {
		t.Fatalf("the provider issued a JWT to %s; want an opaque token", clientOpaque)
	}
	cs, err := connectWithToken(t, mv, opaque)
	if err != nil {
		t.Fatalf("connecting with an opaque token: %v", err)
	}
	callEcho(t, cs, "opaque")
	asked := p.introspections.Load()
	if asked == 0 {
		t.Fatal("the provider's introspection endpoint was never asked")
	}
	cs2, err := connectWithToken(t, mv, opaque)
	if err != nil {
		t.Fatalf("a second session with the same opaque token: %v", err)
	}
	callEcho(t, cs2, "again")
	if n := p.introspections.Load(); n != asked {
		t.Errorf("the introspection endpoint was asked %d times more for a token it answered: no cache", n-asked)
	}
	if resp, body := mcpPost(t, mv, "Bearer made-up-opaque-token"); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "not active") {
		t.Errorf("a made-up opaque token: %d %s; want 401 saying it is not active", resp.StatusCode, body)
	}
	if resp, body := mcpPost(t, mv, "Bearer "+p.token(t, clientExpired)); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "expired") {
		t.Errorf("an expired JWT: %d %s; want 401", resp.StatusCode, body)
	}
	// JWTs still work beside introspection.
	if _, err := connectWithToken(t, mv, p.token(t, clientGood)); err != nil {
		t.Errorf("a JWT beside introspection: %v", err)
	}
}

// TestTokenShape: require_typ_at_jwt refuses a JWT typed "JWT" (the
// provider's default) and takes one typed "at+jwt"; a token for several
// audiences without azp is refused, one with azp taken; clock_skew bounds
// how early nbf may be (go-oidc alone allows five minutes);
// scopes_supported is advertised without being required.
func TestTokenShape(t *testing.T) {
	p := startProvider(t, "")
	oidcExtra := "      require_typ_at_jwt = true\n      clock_skew = \"10s\"\n      scopes_supported = [\"mcp:tools\", \"mcp:admin\"]\n"
	mv := startMcpvisorWith(t, oidcHost(p.issuer, "", oidcExtra), echoBlock())
	p.audience = "http://" + mv.addr + "/mcp"

	if resp, body := mcpPost(t, mv, "Bearer "+p.token(t, clientGood)); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "at+jwt") {
		t.Errorf("a JWT typed JWT with require_typ_at_jwt: %d %s; want 401 naming at+jwt", resp.StatusCode, body)
	}
	atJWT := p.sign(t, "at+jwt", p.claimsFor("user-typed"))
	cs, err := connectWithToken(t, mv, atJWT)
	if err != nil {
		t.Fatalf("a JWT typed at+jwt: %v", err)
	}
	callEcho(t, cs, "typed")

	multi := p.claimsFor("user-multi")
	multi["aud"] = []string{p.audience, otherAudience}
	if resp, body := mcpPost(t, mv, "Bearer "+p.sign(t, "at+jwt", multi)); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "azp") {
		t.Errorf("a token for two audiences without azp: %d %s; want 401 naming azp", resp.StatusCode, body)
	}
	multi["azp"] = "svc-multi"
	if resp, body := mcpPost(t, mv, "Bearer "+p.sign(t, "at+jwt", multi)); resp.StatusCode != http.StatusOK {
		t.Errorf("a token for two audiences with azp: %d %s; want 200", resp.StatusCode, body)
	}

	early := p.claimsFor("user-early")
	early["nbf"] = time.Now().Add(2 * time.Minute).Unix()
	if resp, body := mcpPost(t, mv, "Bearer "+p.sign(t, "at+jwt", early)); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "not valid before") {
		t.Errorf("a token valid only in 2 minutes, clock_skew 10s: %d %s; want 401", resp.StatusCode, body)
	}
	late := p.claimsFor("user-late")
	late["exp"] = time.Now().Add(-5 * time.Second).Unix()
	if resp, body := mcpPost(t, mv, "Bearer "+p.sign(t, "at+jwt", late)); resp.StatusCode != http.StatusOK {
		t.Errorf("a token expired 5s ago, clock_skew 10s: %d %s; want 200", resp.StatusCode, body)
	}

	resp, err := newHTTPClient(t, healthzTimeout).Get("http://" + mv.addr + "/.well-known/oauth-protected-resource/mcp")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var md struct {
		ScopesSupported []string `json:"scopes_supported"`
	}
	json.NewDecoder(resp.Body).Decode(&md)
	if strings.Join(md.ScopesSupported, " ") != "mcp:tools mcp:admin" {
		t.Errorf("scopes_supported %v; want the configured ones", md.ScopesSupported)
	}
}
