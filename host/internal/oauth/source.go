// Package oauth authorizes mcpvisor's requests to HTTP upstreams with OAuth
// 2.1 access tokens, per the MCP authorization spec (docs/design.md §14).
//
// The protocol work is the go-sdk's auth and oauthex packages and
// golang.org/x/oauth2: discovery, client registration, PKCE and the code
// exchange run in auth.AuthorizationCodeHandler (Login); refreshes and the
// client-credentials grant are x/oauth2's. This package adds what a
// long-running supervisor needs on top: a token store shared by the host and
// `mcpvisor login`, refreshing before expiry, and a typed "needs login"
// outcome when a refresh is refused.
package oauth

/*
Design note: who refreshes, and when.

A Source hands out the access token for every request (the transport's
round tripper asks it). The token is refreshed before it expires — a
quarter of its lifetime ahead, at most refreshMarginMax — so calls do not
pay for expiry; keepalive pings keep that going on an idle server. One mutex
serialises refreshes, so N concurrent requests cause one.

A 403 with error="insufficient_scope" is step-up authorization: the token
is fine but this operation needs more scopes, and only the user can grant
them. StepUp writes the challenged scopes into the stored record, where the
next `mcpvisor login` finds them and asks for them together with those
already granted; the request fails with an error wrapping
recovery.ErrInsufficientScope (the call alone fails, the server stays
ready), and Token re-reads the store on every request until that login has
stored new tokens.

A 401 despite that (the server revoked the token, clocks disagree) marks the
token refused; the request fails with recovery.ErrUnauthorized and the
supervisor's existing auth path reconnects and retries once, and that
reconnect asks for a token again, which refreshes.

Before refreshing, and again before giving up, the Source re-reads the
store: another process (`mcpvisor login`, a one-shot `mcpvisor call`, a
second host) may have stored newer tokens, and a rotating refresh token that
process used is no good to us any more. A refresh the authorization server
refuses (invalid_grant and friends) wraps recovery.ErrNeedsLogin; the
supervisor then withdraws the server's tools and polls HasNewLogin until
`mcpvisor login` stores fresh tokens.
*/

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/oauth2"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

const (
	// refreshMarginMax caps how long before expiry a token is refreshed.
	// Smaller lifetimes refresh a quarter of their lifetime ahead, so a
	// two-second token is still used for one and a half seconds.
	refreshMarginMax = 60 * time.Second

	// unknownLifetimeMargin is the margin for a token whose issue time is
	// unknown (a record written by hand or by an older version).
	unknownLifetimeMargin = 10 * time.Second
)

// SourceConfig configures a Source.
type SourceConfig struct {
	// Server is the server block; its OAuth field must be set.
	Server *config.Server
	// Store holds the server's tokens.
	Store *Store
	// HTTPClient reaches the authorization server and, for discovery, the
	// upstream. It must not be the client that asks this Source for tokens.
	HTTPClient *http.Client
	// Logger receives refresh events, never tokens.
	Logger hclog.Logger
}

// A Source supplies access tokens for one server's requests.
type Source struct {
	cfg    SourceConfig
	key    Key
	logger hclog.Logger

	mu      sync.Mutex
	rec     *Record // the tokens in use; nil before the first Token
	refused string  // an access token the upstream answered 401 to
	// steppingUp is the access token an upstream answered 403
	// insufficient_scope to, until the store holds another one.
	steppingUp string
	// loginFailed is the access token held when a refresh was refused:
	// HasNewLogin waits for the store to hold a different one.
	loginFailed *string

	// client_credentials and cross_app_access: what Discover found.
	disc *Discovery
}

// NewSource returns a Source for srv, which must have an oauth block.
func NewSource(cfg SourceConfig) *Source {
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = http.DefaultClient
	}
	if cfg.Server.OAuth.Issuer != "" {
		cfg.HTTPClient = withIssuer(cfg.HTTPClient, cfg.Server.OAuth.Issuer) // grants.go
	}
	return &Source{cfg: cfg, key: KeyFor(cfg.Server), logger: logger.Named("oauth")}
}

// KeyFor is the store key of a server block's tokens.
func KeyFor(srv *config.Server) Key {
	k := Key{Server: srv.Name, URL: srv.URL}
	if srv.OAuth != nil {
		k.ClientID = srv.OAuth.ClientID
		if k.ClientID == "" {
			k.ClientID = srv.OAuth.ClientMetadataURL
		}
	}
	return k
}

// Token returns the access token to send, refreshing it when it is about to
// expire or was refused. An error wrapping recovery.ErrNeedsLogin means only
// `mcpvisor login` can help.
func (s *Source) Token(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.steppingUp != "" {
		if rec, err := s.newerStored(); err == nil && rec != nil {
			s.logger.Debug("using the tokens of a new login after a step-up")
			s.rec, s.steppingUp = rec, ""
		}
	}
	if s.rec != nil && s.usable(s.rec) {
		return s.rec.Token.AccessToken, nil
	}
	if !s.cfg.Server.OAuth.Interactive() {
		return s.clientCredentials(ctx)
	}
	if rec, err := s.newerStored(); err != nil {
		return "", err
	} else if rec != nil {
		s.rec = rec
		if s.usable(rec) {
			s.logger.Debug("using tokens from the store")
			return rec.Token.AccessToken, nil
		}
	}
	if s.rec == nil {
		return "", s.needsLogin("no tokens are stored for it")
	}
	if s.rec.Token.RefreshToken == "" {
		return "", s.needsLogin("its access token expired and the authorization server issued no refresh token")
	}
	tok, err := s.refresh(ctx)
	if err != nil {
		// Someone else may have refreshed (and rotated the refresh token)
		// or logged in meanwhile.
		if rec, lerr := s.newerStored(); lerr == nil && rec != nil && s.usable(rec) {
			s.rec = rec
			return rec.Token.AccessToken, nil
		}
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.Response != nil && re.Response.StatusCode >= 400 && re.Response.StatusCode < 500 {
			return "", s.needsLogin("the authorization server refused to refresh its tokens (" + describeTokenError(re) + ")")
		}
		return "", fmt.Errorf("refreshing the access token at %s: %s", s.rec.TokenURL, describeError(err))
	}
	rec := *s.rec
	rec.Token, rec.ObtainedAt = tok, time.Now()
	s.rec = &rec
	if err := s.cfg.Store.Save(s.key, &rec); err != nil {
		// The new tokens still work in this process; the next process to
		// start refreshes again.
		s.logger.Warn("refreshed tokens could not be stored", "error", err)
	}
	s.logger.Debug("access token refreshed", "expires_in", time.Until(tok.Expiry).Round(time.Millisecond))
	return tok.AccessToken, nil
}

// Refused records that the upstream answered 401 to token: the next Token
// refreshes instead of sending it again.
func (s *Source) Refused(token string) {
	s.mu.Lock()
	s.refused = token
	s.mu.Unlock()
}

// StepUp records that the upstream answered a request made with token with
// 403 insufficient_scope, asking for scopes: the stored record keeps them,
// with those already granted, for the next login to request. It returns the
// error the request fails with, which wraps recovery.ErrInsufficientScope.
func (s *Source) StepUp(token string, scopes []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rec != nil && s.rec.Token != nil && s.rec.Token.AccessToken == token {
		rec := *s.rec
		rec.StepUpScopes = unionScopes(rec.Scopes, rec.StepUpScopes, scopes)
		s.rec = &rec
		// Only over the record the token came from: a login may have
		// stored newer tokens meanwhile.
		if stored, err := s.cfg.Store.Load(s.key); err == nil && stored != nil && stored.Token.AccessToken == token {
			if err := s.cfg.Store.Save(s.key, &rec); err != nil {
				s.logger.Warn("the scopes a step-up needs could not be stored", "error", err)
			}
		}
	}
	s.steppingUp = token
	held := token
	s.loginFailed = &held
	asked := "a scope it did not name"
	if len(scopes) > 0 {
		asked = fmt.Sprintf("scope %q", strings.Join(scopes, " "))
	}
	return fmt.Errorf("%w: the server asks for %s; run `mcpvisor login %s` to grant it",
		recovery.ErrInsufficientScope, asked, s.cfg.Server.Name)
}

// unionScopes returns the scopes of all lists, each once, in first-seen
// order.
func unionScopes(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		for _, sc := range l {
			if !slices.Contains(out, sc) {
				out = append(out, sc)
			}
		}
	}
	return out
}

// HasNewLogin reports whether the store holds tokens newer than those a
// refresh failed with (or any tokens, when there were none): the
// supervisor of a server that needs a login polls it.
func (s *Source) HasNewLogin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := s.cfg.Store.Load(s.key)
	if err != nil || rec == nil {
		return false
	}
	return s.loginFailed == nil || rec.Token.AccessToken != *s.loginFailed
}

// needsLogin records the failure and returns an error wrapping
// recovery.ErrNeedsLogin.
func (s *Source) needsLogin(why string) error {
	held := ""
	if s.rec != nil && s.rec.Token != nil {
		held = s.rec.Token.AccessToken
	}
	s.loginFailed = &held
	return fmt.Errorf("%w: %s; run `mcpvisor login %s`", recovery.ErrNeedsLogin, why, s.cfg.Server.Name)
}

// newerStored returns the stored record when it differs from the one in
// use. A corrupt store file needs a new login.
func (s *Source) newerStored() (*Record, error) {
	rec, err := s.cfg.Store.Load(s.key)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", recovery.ErrNeedsLogin, err)
	}
	if rec == nil || (s.rec != nil && rec.Token.AccessToken == s.rec.Token.AccessToken) {
		return nil, nil
	}
	return rec, nil
}

// usable reports whether rec's access token can be sent now: not refused
// and not within the refresh margin of its expiry.
func (s *Source) usable(rec *Record) bool {
	t := rec.Token
	if t == nil || t.AccessToken == "" || t.AccessToken == s.refused {
		return false
	}
	if t.Expiry.IsZero() {
		return true
	}
	margin := unknownLifetimeMargin
	if !rec.ObtainedAt.IsZero() && t.Expiry.After(rec.ObtainedAt) {
		margin = min(t.Expiry.Sub(rec.ObtainedAt)/4, refreshMarginMax)
	}
	return time.Until(t.Expiry) > margin
}

// refresh exchanges the refresh token with x/oauth2.
func (s *Source) refresh(ctx context.Context) (*oauth2.Token, error) {
	rec := s.rec
	secret := rec.ClientSecret
	if secret == "" {
		secret = s.cfg.Server.OAuth.ClientSecret
	}
	conf := &oauth2.Config{
		ClientID:     rec.ClientID,
		ClientSecret: secret,
		Endpoint:     oauth2.Endpoint{TokenURL: rec.TokenURL, AuthStyle: rec.AuthStyle},
		Scopes:       rec.Scopes,
	}
	hc := s.cfg.HTTPClient
	if rec.Resource != "" {
		// x/oauth2 sends a refresh with no parameters of ours; RFC 8707
		// and the MCP authorization spec want the resource on every
		// token request.
		hc = withTokenParam(hc, rec.TokenURL, "resource", rec.Resource)
	}
	ctx = context.WithValue(ctx, oauth2.HTTPClient, hc)
	// An empty access token makes the token source refresh at once.
	return conf.TokenSource(ctx, &oauth2.Token{RefreshToken: rec.Token.RefreshToken}).Token()
}

// withTokenParam returns a client like hc whose form POSTs to tokenURL
// carry key=value (unless they name key already).
func withTokenParam(hc *http.Client, tokenURL, key, value string) *http.Client {
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c := *hc
	c.Transport = &tokenParamTransport{base: base, tokenURL: tokenURL, key: key, value: value}
	return &c
}

type tokenParamTransport struct {
	base                 http.RoundTripper
	tokenURL, key, value string
}

// maxTokenRequestBody bounds the form read back from a token request (our
// own, a few hundred bytes).
const maxTokenRequestBody = 64 << 10

func (t *tokenParamTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || req.URL.String() != t.tokenURL || req.Body == nil ||
		!strings.HasPrefix(req.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		return t.base.RoundTrip(req)
	}
	b, err := io.ReadAll(io.LimitReader(req.Body, maxTokenRequestBody+1))
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	if len(b) > maxTokenRequestBody {
		return nil, fmt.Errorf("token request body over %d bytes", maxTokenRequestBody)
	}
	form, err := url.ParseQuery(string(b))
	if err != nil {
		return nil, fmt.Errorf("token request body: %w", err)
	}
	if !form.Has(t.key) {
		form.Set(t.key, t.value)
	}
	body := form.Encode()
	req = req.Clone(req.Context())
	req.Body = io.NopCloser(strings.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(body)), nil }
	req.ContentLength = int64(len(body))
	return t.base.RoundTrip(req)
}

// clientCredentials gets a token with the block's non-interactive grant
// (client_credentials or cross_app_access, grants.go), discovering the
// authorization server the first time.
func (s *Source) clientCredentials(ctx context.Context) (string, error) {
	o := s.cfg.Server.OAuth
	if s.disc == nil {
		d, err := Discover(ctx, s.cfg.HTTPClient, s.cfg.Server)
		if err != nil {
			return "", err
		}
		s.disc = d
	}
	d := s.disc
	scopes := d.Scopes
	if len(scopes) == 0 {
		scopes = o.Scopes
	}
	tok, err := s.grantToken(ctx, d, scopes)
	if err != nil {
		// The endpoint may have moved: discover again next time.
		s.disc = nil
		var re *oauth2.RetrieveError
		var ie *idpError
		switch {
		case errors.As(err, &ie):
			return "", err
		case errors.As(err, &re):
			what := "client_id and client_secret"
			if o.PrivateKey != "" {
				what = "client_id and private_key (and that the server knows its public key)"
			}
			return "", fmt.Errorf("%w: the authorization server refused the %s grant of server %q (%s); check %s in its oauth block",
				recovery.ErrUnauthorized, o.Grant, s.cfg.Server.Name, describeTokenError(re), what)
		}
		return "", fmt.Errorf("getting an access token with the %s grant: %s", o.Grant, describeError(err))
	}
	s.rec = &Record{ClientID: o.ClientID, TokenURL: d.Auth.TokenEndpoint, Token: tok, ObtainedAt: time.Now()}
	s.logger.Debug("access token obtained", "grant", o.Grant, "expires_in", time.Until(tok.Expiry).Round(time.Millisecond))
	return tok.AccessToken, nil
}

// describeTokenError says what a token endpoint answered without quoting
// its body, which may echo credentials.
func describeTokenError(re *oauth2.RetrieveError) string {
	var status string
	if re.Response != nil {
		status = re.Response.Status
	}
	switch {
	case re.ErrorCode != "" && status != "":
		return fmt.Sprintf("%s, HTTP %s", re.ErrorCode, status)
	case re.ErrorCode != "":
		return re.ErrorCode
	case status != "":
		return "HTTP " + status
	}
	return "no reason given"
}

// describeError is err's text with credentials redacted; token endpoint
// errors are described without their body.
func describeError(err error) string {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		return describeTokenError(re)
	}
	return recovery.Redact(err.Error())
}
