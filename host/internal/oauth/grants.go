package oauth

/*
Design note: the grants the host runs itself, and an explicit issuer.

Besides the authorization-code login, an oauth block can have the host get
its tokens without a user (docs/oauth.md):

  - client_credentials, the client authenticating with client_secret or,
    with private_key, with a signed JWT assertion (private_key_jwt, RFC 7523
    §2.2): iss and sub are the client id, aud the authorization server's
    issuer, a fresh jti and a short exp for every token request.
  - cross_app_access (enterprise-managed authorization): the configured ID
    token is exchanged at the identity provider's token endpoint for an
    Identity Assertion JWT Authorization Grant (RFC 8693, the go-sdk's
    oauthex.ExchangeToken) whose audience is the server's authorization
    server and whose resource is the server; that grant is then presented
    to the authorization server as a JWT bearer grant (RFC 7523 §2.1).

Both are form POSTs made by golang.org/x/oauth2; this file only adds the
parameters.

An explicit issuer: RFC 8414 §3.3 has a client refuse authorization server
metadata whose issuer differs from the URL it was fetched for, the
protection against mix-up attacks, and the go-sdk's discovery (used by
Login's auth.AuthorizationCodeHandler and by Discover) enforces it. Some
servers publish metadata at the root's well-known URL naming another issuer
(<root>/oauth). When the config author names that issuer in the block, the
HTTP client the block's discovery uses (and only it) presents such metadata
to the go-sdk with the issuer it expects: metadata naming any other issuer
is refused as before. Where the server names itself matters, the block's
issuer is used: a client assertion's aud, the ID-JAG's audience, and an
authorization response's iss (RFC 9207) naming it is taken for the issuer
the go-sdk was shown (login.go).
*/

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

const (
	// clientAssertionType is RFC 7523 §2.2's client_assertion_type.
	clientAssertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
	// grantTypeJWTBearer is RFC 7523 §2.1's grant type.
	grantTypeJWTBearer = "urn:ietf:params:oauth:grant-type:jwt-bearer"
	// assertionLifetime is how long a client assertion is valid: it is
	// used once, at once.
	assertionLifetime = 2 * time.Minute
	// maxMetadataBody bounds the authorization server metadata the issuer
	// transport reads (the go-sdk reads at most as much).
	maxMetadataBody = 1 << 20
)

// ClientAssertion returns a client assertion JWT (RFC 7523 §2.2) for
// clientID, signed with key, for the authorization server with the given
// issuer. algs are the server's token_endpoint_auth_signing_alg_values_supported
// (may be empty).
func ClientAssertion(key crypto.Signer, clientID, audience string, algs []string) (string, error) {
	method, err := signingMethod(key, algs)
	if err != nil {
		return "", err
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", err
	}
	now := time.Now()
	claims := jwt.RegisteredClaims{
		Issuer:    clientID,
		Subject:   clientID,
		Audience:  jwt.ClaimStrings{audience},
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(assertionLifetime)),
		ID:        hex.EncodeToString(id[:]),
	}
	return jwt.NewWithClaims(method, claims).SignedString(key)
}

// signingMethod picks the JWS algorithm for key: the one its type and size
// imply, or for RSA PS256 where the server lists only that.
func signingMethod(key crypto.Signer, algs []string) (jwt.SigningMethod, error) {
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		switch k.Curve.Params().BitSize {
		case 256:
			return jwt.SigningMethodES256, nil
		case 384:
			return jwt.SigningMethodES384, nil
		case 521:
			return jwt.SigningMethodES512, nil
		}
		return nil, fmt.Errorf("unsupported EC curve %s", k.Curve.Params().Name)
	case *rsa.PrivateKey:
		if len(algs) > 0 && !slices.Contains(algs, "RS256") && slices.Contains(algs, "PS256") {
			return jwt.SigningMethodPS256, nil
		}
		return jwt.SigningMethodRS256, nil
	case ed25519.PrivateKey:
		return jwt.SigningMethodEdDSA, nil
	}
	return nil, fmt.Errorf("unsupported key type %T", key)
}

// clientAuth adds the block's client authentication to a token request: a
// fresh client assertion with private_key, else the secret (conf's, sent as
// the server's metadata prefers). It returns the extra form parameters.
func (s *Source) clientAuth(conf *oauth2.Config, d *Discovery) (url.Values, error) {
	o := s.cfg.Server.OAuth
	conf.ClientID = o.ClientID
	if o.PrivateKey == "" {
		conf.ClientSecret = o.ClientSecret
		conf.Endpoint.AuthStyle = authStyle(d.Auth.TokenEndpointAuthMethodsSupported)
		return url.Values{}, nil
	}
	key, err := config.ParsePrivateKey(o.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("server %q: private_key in its oauth block: %v", s.cfg.Server.Name, err)
	}
	assertion, err := ClientAssertion(key, o.ClientID, s.issuerOf(d), d.Auth.TokenEndpointAuthSigningAlgValuesSupported)
	if err != nil {
		return nil, fmt.Errorf("server %q: signing a client assertion with private_key: %v", s.cfg.Server.Name, err)
	}
	// client_id in the body, no secret: the assertion authenticates.
	conf.ClientSecret = ""
	conf.Endpoint.AuthStyle = oauth2.AuthStyleInParams
	return url.Values{"client_assertion_type": {clientAssertionType}, "client_assertion": {assertion}}, nil
}

// issuerOf is the authorization server's issuer as it names itself: the
// block's issuer where the metadata naming it was presented to the go-sdk
// under another (withIssuer).
func (s *Source) issuerOf(d *Discovery) string {
	if it, ok := s.cfg.HTTPClient.Transport.(*issuerTransport); ok && it.presented() == d.Auth.Issuer {
		return s.cfg.Server.OAuth.Issuer
	}
	return d.Auth.Issuer
}

// grantToken runs the block's non-interactive grant against the discovered
// authorization server.
func (s *Source) grantToken(ctx context.Context, d *Discovery, scopes []string) (*oauth2.Token, error) {
	o := s.cfg.Server.OAuth
	conf := &oauth2.Config{Endpoint: oauth2.Endpoint{TokenURL: d.Auth.TokenEndpoint}}
	params, err := s.clientAuth(conf, d)
	if err != nil {
		return nil, err
	}
	if d.Resource != "" {
		params.Set("resource", d.Resource)
	}
	hctx := context.WithValue(ctx, oauth2.HTTPClient, s.cfg.HTTPClient)
	if o.Grant != config.GrantCrossAppAccess {
		cc := &clientcredentials.Config{
			ClientID:       conf.ClientID,
			ClientSecret:   conf.ClientSecret,
			TokenURL:       conf.Endpoint.TokenURL,
			AuthStyle:      conf.Endpoint.AuthStyle,
			Scopes:         scopes,
			EndpointParams: params,
		}
		return cc.Token(hctx)
	}
	jag, err := s.exchangeIDToken(ctx, d, scopes)
	if err != nil {
		return nil, err
	}
	params.Set("grant_type", grantTypeJWTBearer)
	params.Set("assertion", jag)
	if len(scopes) > 0 {
		params.Set("scope", strings.Join(scopes, " "))
	}
	opts := make([]oauth2.AuthCodeOption, 0, len(params))
	for k, v := range params {
		opts = append(opts, oauth2.SetAuthURLParam(k, v[0]))
	}
	// Exchange sends grant_type=authorization_code and an empty code; the
	// parameters above override the first and RFC 6749 §3.2 has servers
	// ignore the second. It is x/oauth2's entry point for a token request
	// of another grant type (the go-sdk's enterprise handler uses it too).
	return conf.Exchange(hctx, "", opts...)
}

// exchangeIDToken exchanges the block's ID token at the identity provider
// for an ID-JAG naming the server's authorization server and resource.
func (s *Source) exchangeIDToken(ctx context.Context, d *Discovery, scopes []string) (string, error) {
	o := s.cfg.Server.OAuth
	creds := &oauthex.ClientCredentials{ClientID: o.IdPClientID}
	if o.IdPClientSecret != "" {
		creds.ClientSecretAuth = &oauthex.ClientSecretAuth{ClientSecret: o.IdPClientSecret}
	}
	resource := d.Resource
	if resource == "" {
		resource = s.cfg.Server.URL
	}
	tok, err := oauthex.ExchangeToken(ctx, o.IdPTokenEndpoint, &oauthex.TokenExchangeRequest{
		RequestedTokenType: oauthex.TokenTypeIDJAG,
		Audience:           s.issuerOf(d),
		Resource:           resource,
		Scope:              scopes,
		SubjectToken:       strings.TrimSpace(o.IDToken),
		SubjectTokenType:   oauthex.TokenTypeIDToken,
	}, creds, s.cfg.HTTPClient)
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) {
			return "", &idpError{server: s.cfg.Server.Name, endpoint: o.IdPTokenEndpoint, re: re}
		}
		return "", fmt.Errorf("exchanging the ID token at %s: %s", o.IdPTokenEndpoint, describeError(err))
	}
	if typ, _ := tok.Extra("issued_token_type").(string); typ != oauthex.TokenTypeIDJAG {
		return "", fmt.Errorf("the identity provider at %s issued a %q, not an ID-JAG", o.IdPTokenEndpoint, typ)
	}
	return tok.AccessToken, nil
}

// idpError is the identity provider refusing the token exchange.
type idpError struct {
	server, endpoint string
	re               *oauth2.RetrieveError
}

func (e *idpError) Error() string {
	return fmt.Sprintf("%v: the identity provider at %s refused to exchange the ID token of server %q (%s); "+
		"replace id_token in its oauth block with a fresh one and check idp_client_id",
		recovery.ErrUnauthorized, e.endpoint, e.server, describeTokenError(e.re))
}

func (e *idpError) Unwrap() error { return recovery.ErrUnauthorized }

// withIssuer returns a client like hc that accepts authorization server
// metadata naming issuer wherever it is fetched from (see the design note
// above).
func withIssuer(hc *http.Client, issuer string) *http.Client {
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c := *hc
	c.Transport = &issuerTransport{base: base, issuer: issuer}
	return &c
}

type issuerTransport struct {
	base   http.RoundTripper
	issuer string

	mu    sync.Mutex
	shown string // the issuer the go-sdk was shown instead of issuer
}

// presented returns the issuer metadata naming t.issuer was presented
// with, "" before any was.
func (t *issuerTransport) presented() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.shown
}

func (t *issuerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	expected, ok := metadataIssuer(req.URL)
	if !ok {
		return resp, nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxMetadataBody+1))
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	if len(b) > maxMetadataBody {
		return resp, nil // the go-sdk refuses it
	}
	var m map[string]json.RawMessage
	var iss string
	if json.Unmarshal(b, &m) != nil || json.Unmarshal(m["issuer"], &iss) != nil ||
		strings.TrimSuffix(iss, "/") != strings.TrimSuffix(t.issuer, "/") || iss == expected {
		return resp, nil
	}
	m["issuer"], _ = json.Marshal(expected)
	t.mu.Lock()
	t.shown = expected
	t.mu.Unlock()
	nb, err := json.Marshal(m)
	if err != nil {
		return resp, nil
	}
	resp.Body = io.NopCloser(bytes.NewReader(nb))
	resp.ContentLength = int64(len(nb))
	resp.Header = resp.Header.Clone()
	resp.Header.Set("Content-Length", strconv.Itoa(len(nb)))
	return resp, nil
}

// metadataIssuer returns the issuer whose metadata u is the well-known URL
// of (RFC 8414 §3.1 and OpenID Connect Discovery, the forms the go-sdk
// tries), and whether u is one.
func metadataIssuer(u *url.URL) (string, bool) {
	root := url.URL{Scheme: u.Scheme, Host: u.Host}
	p := u.EscapedPath()
	for _, wk := range []string{"/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"} {
		switch {
		case p == wk:
			return root.String(), true
		case strings.HasPrefix(p, wk+"/"):
			return root.String() + strings.TrimPrefix(p, wk), true
		}
	}
	if rest, ok := strings.CutSuffix(p, "/.well-known/openid-configuration"); ok {
		return root.String() + rest, true
	}
	return "", false
}
