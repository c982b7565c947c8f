package identity

/*
OIDC verifies the JWT access tokens of one OpenID provider: signature
against the provider's published keys (go-oidc's remote key set, which
fetches the keys again when a token names a key id it has not seen, so
a key rotation at the provider needs no restart), issuer, audience and
expiry. Discovery happens on the first token, not at startup, so a host
comes up while its provider is down; a failed discovery is tried again
at most every discoveryRetry.

Everything fetched from the provider is bounded: each response to
maxProviderResponse bytes, each request to providerTimeout, and the
fetches a stream of tokens with made-up key ids can cause to
keyFetchBurst at once and one per keyFetchInterval after that
(docs/security.md, "Downstream identity").
*/

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
	"golang.org/x/time/rate"

	"github.com/mcpvisor/mcpvisor/host/config"
)

const (
	// providerTimeout bounds one request to the provider (discovery or
	// keys).
	providerTimeout = 10 * time.Second
	// maxProviderResponse bounds a discovery document or key set.
	maxProviderResponse = 1 << 20
	// discoveryRetry is how long a failed discovery is remembered before
	// a new token tries again; tokens in between get ErrProviderUnavailable.
	discoveryRetry = 10 * time.Second
	// keyFetchInterval and keyFetchBurst bound the provider fetches that
	// tokens can cause: go-oidc fetches the key set again for every token
	// whose signature its cached keys do not verify (an unknown key id,
	// or a forged signature), so without a bound each such request of
	// an unauthenticated client would become a request to the provider.
	// One a second is nothing to a provider, and a token signed with a
	// newly rotated key waits at most that long.
	keyFetchInterval = time.Second
	keyFetchBurst    = 10
)

// Errors of OIDC.Verify. The ingress turns them into the answers of
// RFC 6750: 401 invalid_token, 403 insufficient_scope, and 503 when the
// provider cannot be reached to verify anything.
var (
	ErrInvalidToken        = errors.New("invalid token")
	ErrInsufficientScope   = errors.New("insufficient scope")
	ErrProviderUnavailable = errors.New("the OpenID provider cannot be reached")
)

// OIDC verifies access tokens of one OpenID provider. Build it with
// NewOIDC; it is safe for concurrent use.
type OIDC struct {
	cfg    config.OIDC
	client *http.Client
	// introspector checks opaque tokens; nil without introspection_url.
	introspector *introspector

	mu          sync.Mutex            // guards the fields below
	verifier    *oidc.IDTokenVerifier // nil until discovery succeeded
	triedAt     time.Time             // last failed discovery
	discoverErr error                 // its error
}

// NewOIDC returns a verifier for the host's `auth { oidc { … } }` block.
// Nothing is fetched until the first token.
func NewOIDC(cfg config.OIDC) *OIDC {
	// A Config built in Go may leave the claim names empty.
	cfg.SubjectClaim = cmp.Or(cfg.SubjectClaim, config.DefaultOIDCSubjectClaim)
	cfg.GroupsClaim = cmp.Or(cfg.GroupsClaim, config.DefaultOIDCGroupsClaim)
	o := &OIDC{cfg: cfg, client: &http.Client{
		Timeout: providerTimeout,
		Transport: &providerTransport{
			next:    http.DefaultTransport,
			limiter: rate.NewLimiter(rate.Every(keyFetchInterval), keyFetchBurst),
			burst:   keyFetchBurst, per: keyFetchInterval * keyFetchBurst,
		},
	}}
	if cfg.IntrospectionURL != "" {
		o.introspector = newIntrospector(cfg.IntrospectionURL, cfg.ClientID, cfg.ClientSecret, &http.Client{
			Timeout: providerTimeout,
			Transport: &providerTransport{
				next:    http.DefaultTransport,
				limiter: rate.NewLimiter(introspectionRate, introspectionBurst),
				burst:   introspectionBurst, per: time.Second * introspectionBurst / introspectionRate,
			},
		})
	}
	return o
}

// skew is how far a token's times may be off this host's clock.
func (o *OIDC) skew() time.Duration {
	if o.cfg.ClockSkew > 0 {
		return o.cfg.ClockSkew
	}
	return config.DefaultOIDCClockSkew
}

// Issuer is the provider's issuer URL.
func (o *OIDC) Issuer() string { return o.cfg.Issuer }

// Audience is the audience tokens must name.
func (o *OIDC) Audience() string { return o.cfg.Audience }

// Scopes are the scopes every token must be granted.
func (o *OIDC) Scopes() []string { return o.cfg.Scopes }

// ScopesSupported are the scopes the protected resource metadata
// advertises: scopes_supported, else the required ones.
func (o *OIDC) ScopesSupported() []string {
	if len(o.cfg.ScopesSupported) > 0 {
		return o.cfg.ScopesSupported
	}
	return o.cfg.Scopes
}

// tokenVerifier returns the go-oidc verifier, discovering the provider
// on first use.
func (o *OIDC) tokenVerifier(ctx context.Context) (*oidc.IDTokenVerifier, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.verifier != nil {
		return o.verifier, nil
	}
	if o.discoverErr != nil && time.Since(o.triedAt) < discoveryRetry {
		return nil, o.discoverErr
	}
	// The provider keeps this client for its key fetches, which outlive
	// the request that caused discovery.
	ctx = oidc.ClientContext(context.WithoutCancel(ctx), o.client)
	p, err := oidc.NewProvider(ctx, o.cfg.Issuer)
	if err != nil {
		o.triedAt = time.Now()
		o.discoverErr = fmt.Errorf("%w: discovery at %s/.well-known/openid-configuration failed: %v",
			ErrProviderUnavailable, strings.TrimSuffix(o.cfg.Issuer, "/"), err)
		return nil, o.discoverErr
	}
	// An access token is verified like an ID token, with the resource as
	// the audience (RFC 9068): ClientID is the aud go-oidc checks.
	// The times are checked in Verify, with clock_skew: go-oidc's own
	// check allows nbf a fixed five minutes and exp none.
	o.verifier = p.Verifier(&oidc.Config{ClientID: o.cfg.Audience, SkipExpiryCheck: true})
	o.discoverErr = nil
	return o.verifier, nil
}

// jwsAlgorithms are the signature algorithms a JWT's header is read
// with (to tell a JWT from an opaque token, and read its typ); go-oidc
// checks the one the token uses against the provider's.
var jwsAlgorithms = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA}

// Verify checks raw and returns its subject: a JWT against the provider's
// keys, an opaque token at its introspection endpoint (with
// introspection_url). The error wraps ErrInvalidToken,
// ErrInsufficientScope or ErrProviderUnavailable, and says why without
// quoting the token.
func (o *OIDC) Verify(ctx context.Context, raw string) (*Subject, error) {
	jws, jwsErr := jose.ParseSignedCompact(raw, jwsAlgorithms)
	if jwsErr != nil && o.introspector != nil {
		s, err := o.introspect(ctx, raw)
		if err != nil {
			return nil, err
		}
		return o.checkScopes(s)
	}
	v, err := o.tokenVerifier(ctx)
	if err != nil {
		return nil, err
	}
	tok, err := v.Verify(ctx, raw)
	if err != nil {
		if jwsErr != nil {
			return nil, fmt.Errorf("%w: it is not a JWT (an opaque token? set introspection_url in the oidc block to check those): %s", ErrInvalidToken, strings.TrimPrefix(err.Error(), "oidc: "))
		}
		return nil, fmt.Errorf("%w: %s", ErrInvalidToken, strings.TrimPrefix(err.Error(), "oidc: "))
	}
	if o.cfg.RequireTypAtJWT {
		// RFC 9068 §4: an access token says so in its header, so an ID
		// token or another JWT of the issuer is not taken for one.
		typ, _ := jws.Signatures[0].Protected.ExtraHeaders[jose.HeaderType].(string)
		if t := strings.ToLower(typ); t != "at+jwt" && t != "application/at+jwt" {
			return nil, fmt.Errorf("%w: its header typ is %q, not \"at+jwt\" (RFC 9068; require_typ_at_jwt is set)", ErrInvalidToken, typ)
		}
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return nil, fmt.Errorf("%w: its claims are not a JSON object: %v", ErrInvalidToken, err)
	}
	if err := o.checkTimes(tok.Expiry, claims); err != nil {
		return nil, err
	}
	// A token for several audiences names the party it was issued to
	// (OpenID Connect Core §3.1.3.7): without azp nothing verified says
	// which client holds it.
	if len(tok.Audience) > 1 {
		if azp, _ := claims["azp"].(string); azp == "" {
			return nil, fmt.Errorf("%w: it names %d audiences and no azp (authorized party); mcpvisor accepts a token for several audiences only when azp names its client", ErrInvalidToken, len(tok.Audience))
		}
	}
	s, err := o.subject(claims)
	if err != nil {
		return nil, err
	}
	return o.checkScopes(s)
}

// checkTimes checks exp, nbf and iat against this host's clock, each
// allowed clock_skew.
func (o *OIDC) checkTimes(exp time.Time, claims map[string]any) error {
	now, skew := time.Now(), o.skew()
	if exp.IsZero() {
		return fmt.Errorf("%w: it has no exp; mcpvisor does not accept a token without an expiry", ErrInvalidToken)
	}
	if now.After(exp.Add(skew)) {
		return fmt.Errorf("%w: it expired at %s", ErrInvalidToken, exp.UTC().Format(time.RFC3339))
	}
	if nbf, ok := claims["nbf"].(float64); ok && now.Add(skew).Before(time.Unix(int64(nbf), 0)) {
		return fmt.Errorf("%w: it is not valid before %s (clock_skew %s)", ErrInvalidToken, time.Unix(int64(nbf), 0).UTC().Format(time.RFC3339), skew)
	}
	if iat, ok := claims["iat"].(float64); ok && now.Add(skew).Before(time.Unix(int64(iat), 0)) {
		return fmt.Errorf("%w: it was issued in the future, at %s (clock_skew %s)", ErrInvalidToken, time.Unix(int64(iat), 0).UTC().Format(time.RFC3339), skew)
	}
	return nil
}

// subject reads the subject of a token's claims (a JWT's, or an
// introspection answer's).
func (o *OIDC) subject(claims map[string]any) (*Subject, error) {
	s := &Subject{Via: ViaOIDC}
	s.ID, _ = claims[o.cfg.SubjectClaim].(string)
	if s.ID == "" {
		return nil, fmt.Errorf("%w: it has no %q claim (subject_claim) naming its subject", ErrInvalidToken, o.cfg.SubjectClaim)
	}
	s.Email, _ = claims["email"].(string)
	if s.Email != "" {
		// A boolean, or (some providers) the string "true".
		verified := false
		switch v := claims["email_verified"].(type) {
		case bool:
			verified = v
		case string:
			verified = strings.EqualFold(v, "true")
		}
		s.EmailVerified = &verified
		s.EmailTrusted = o.cfg.TrustUnverifiedEmail
	}
	s.Groups = stringsClaim(claims[o.cfg.GroupsClaim])
	if c, ok := claims["azp"].(string); ok {
		s.Client = c
	} else {
		s.Client, _ = claims["client_id"].(string)
	}
	s.Scopes = stringsClaim(claims["scope"])
	if s.Scopes == nil {
		s.Scopes = stringsClaim(claims["scp"])
	}
	return s, nil
}

// checkScopes refuses s when it lacks a required scope.
func (o *OIDC) checkScopes(s *Subject) (*Subject, error) {
	for _, want := range o.cfg.Scopes {
		if !slices.Contains(s.Scopes, want) {
			return s, fmt.Errorf("%w: the token is not granted scope %q", ErrInsufficientScope, want)
		}
	}
	return s, nil
}

// stringsClaim reads a claim that is a list of strings or one string
// of space-separated values (how RFC 8693 writes scope).
func stringsClaim(v any) []string {
	switch v := v.(type) {
	case string:
		return strings.Fields(v)
	case []any:
		var out []string
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// providerTransport bounds what the provider's answers and the tokens'
// key ids can cost: a fetch beyond the rate fails at once, and a body
// beyond maxProviderResponse fails to read.
type providerTransport struct {
	next    http.RoundTripper
	limiter *rate.Limiter
	burst   int           // the limiter's burst, for the error
	per     time.Duration // the time the limiter takes to refill it
}

func (t *providerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.limiter.Allow() {
		return nil, fmt.Errorf("not fetching %s: more than %d fetches in %s (tokens with unknown keys, forged signatures or made-up opaque tokens?); retry in a moment",
			req.URL.Redacted(), t.burst, t.per)
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &limitedBody{r: io.LimitReader(resp.Body, maxProviderResponse+1), c: resp.Body}
	return resp, nil
}

// limitedBody fails a read past maxProviderResponse.
type limitedBody struct {
	r io.Reader
	c io.Closer
	n int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n += int64(n)
	if b.n > maxProviderResponse {
		return n, fmt.Errorf("the provider's answer is over %d bytes", maxProviderResponse)
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.c.Close() }
