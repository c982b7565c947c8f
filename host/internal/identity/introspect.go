package identity

/*
Introspection (RFC 7662) checks the bearer tokens that are not JWTs (an
opaque token, the default of ZITADEL and others): mcpvisor asks the
provider's introspection endpoint, authenticated as its own client
(client_secret_basic), whether the token is active and whose it is.

Answers are cached by the token's SHA-256 (never the token itself), for
at most introspectionTTL and never past the token's exp, in an LRU of at
most introspectionCacheSize entries; a refused token is remembered for
introspectionNegativeTTL, so a client repeating a bad token does not
become a request to the provider each time. Requests to the endpoint
are bounded apart from the key fetches (introspectionRate,
introspectionBurst): a flood of made-up tokens gets 401s from mcpvisor
and at most that rate of requests at the provider.
*/

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

const (
	// introspectionTTL bounds how long an active answer is trusted: a
	// token revoked at the provider is refused after at most this long.
	introspectionTTL = time.Minute
	// introspectionNegativeTTL is how long an inactive answer is kept.
	introspectionNegativeTTL = 10 * time.Second
	// introspectionCacheSize bounds the cached answers.
	introspectionCacheSize = 10000
	// introspectionRate and introspectionBurst bound the requests to the
	// introspection endpoint (per second, and at once).
	introspectionRate  = 50
	introspectionBurst = 100
)

// introspection is the RFC 7662 answer, the members mcpvisor reads;
// claims holds them all, for the subject and groups claims.
type introspection struct {
	Active    bool   `json:"active"`
	Exp       int64  `json:"exp"`
	Nbf       int64  `json:"nbf"`
	Iss       string `json:"iss"`
	TokenType string `json:"token_type"`
}

// cachedAnswer is one cached introspection: a subject, or why not.
type cachedAnswer struct {
	key     [32]byte
	subject *Subject
	err     error
	until   time.Time
}

// introspector asks one provider's introspection endpoint.
type introspector struct {
	endpoint, clientID, clientSecret string
	client                           *http.Client

	mu    sync.Mutex // guards cache and lru
	cache map[[32]byte]*list.Element
	lru   list.List // of *cachedAnswer, front: used most recently
}

func newIntrospector(endpoint, clientID, clientSecret string, client *http.Client) *introspector {
	return &introspector{endpoint: endpoint, clientID: clientID, clientSecret: clientSecret, client: client,
		cache: map[[32]byte]*list.Element{}}
}

// lookup returns the cached answer of key, if one is still good at now.
func (in *introspector) lookup(key [32]byte, now time.Time) (*cachedAnswer, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	el, ok := in.cache[key]
	if !ok {
		return nil, false
	}
	a := el.Value.(*cachedAnswer)
	if !now.Before(a.until) {
		in.lru.Remove(el)
		delete(in.cache, key)
		return nil, false
	}
	in.lru.MoveToFront(el)
	return a, true
}

func (in *introspector) store(a *cachedAnswer) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if el, ok := in.cache[a.key]; ok {
		in.lru.Remove(el)
	}
	for len(in.cache) >= introspectionCacheSize {
		old := in.lru.Back()
		in.lru.Remove(old)
		delete(in.cache, old.Value.(*cachedAnswer).key)
	}
	in.cache[a.key] = in.lru.PushFront(a)
}

// introspect checks raw at the endpoint (or the cache) and returns its
// claims: the answer's members, exactly as the provider sent them.
func (o *OIDC) introspect(ctx context.Context, raw string) (*Subject, error) {
	in := o.introspector
	key := sha256.Sum256([]byte(raw))
	now := time.Now()
	if a, ok := in.lookup(key, now); ok {
		return a.subject, a.err
	}
	claims, err := in.ask(ctx, raw)
	if err != nil {
		return nil, err // the provider could not answer: nothing to cache
	}
	var ans introspection
	b, _ := json.Marshal(claims)
	if err := json.Unmarshal(b, &ans); err != nil {
		return nil, fmt.Errorf("%w: the introspection endpoint's answer is not an RFC 7662 response: %v", ErrInvalidToken, err)
	}
	s, verr := o.checkIntrospection(ans, claims, now)
	a := &cachedAnswer{key: key, subject: s, err: verr, until: now.Add(introspectionNegativeTTL)}
	if verr == nil {
		a.until = now.Add(introspectionTTL)
		if exp := time.Unix(ans.Exp, 0).Add(o.skew()); exp.Before(a.until) {
			a.until = exp
		}
	}
	in.store(a)
	return s, verr
}

// checkIntrospection turns an answer into a subject, or says why the
// token is refused: inactive, expired (exp is required: an answer
// without one would be trusted forever), another issuer's.
func (o *OIDC) checkIntrospection(ans introspection, claims map[string]any, now time.Time) (*Subject, error) {
	skew := o.skew()
	switch {
	case !ans.Active:
		return nil, fmt.Errorf("%w: the provider's introspection endpoint says it is not active (expired, revoked, or not a token it issued)", ErrInvalidToken)
	case ans.Exp == 0:
		return nil, fmt.Errorf("%w: the introspection answer has no exp; mcpvisor does not accept a token without an expiry", ErrInvalidToken)
	case now.After(time.Unix(ans.Exp, 0).Add(skew)):
		return nil, fmt.Errorf("%w: it expired at %s", ErrInvalidToken, time.Unix(ans.Exp, 0).UTC().Format(time.RFC3339))
	case ans.Nbf != 0 && now.Add(skew).Before(time.Unix(ans.Nbf, 0)):
		return nil, fmt.Errorf("%w: it is not valid before %s", ErrInvalidToken, time.Unix(ans.Nbf, 0).UTC().Format(time.RFC3339))
	case ans.Iss != "" && strings.TrimSuffix(ans.Iss, "/") != strings.TrimSuffix(o.cfg.Issuer, "/"):
		return nil, fmt.Errorf("%w: the introspection answer names issuer %q, not %q", ErrInvalidToken, ans.Iss, o.cfg.Issuer)
	}
	if aud, present := claims["aud"]; present && !stringsClaimContains(aud, o.cfg.Audience) {
		return nil, fmt.Errorf("%w: expected audience %q got %q", ErrInvalidToken, o.cfg.Audience, stringsClaim(aud))
	}
	return o.subject(claims)
}

// ask POSTs raw to the introspection endpoint (RFC 7662 §2.1) and returns
// its JSON answer. Its errors wrap ErrProviderUnavailable: the token is
// neither accepted nor refused.
func (in *introspector) ask(ctx context.Context, raw string) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(ctx, providerTimeout)
	defer cancel()
	form := url.Values{"token": {raw}, "token_type_hint": {"access_token"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, in.endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, fmt.Errorf("%w: introspection_url %s: %v", ErrProviderUnavailable, in.endpoint, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	// RFC 6749 §2.3.1: the credentials are form-encoded before basic auth.
	req.SetBasicAuth(url.QueryEscape(in.clientID), url.QueryEscape(in.clientSecret))
	resp, err := in.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: introspection at %s failed: %v", ErrProviderUnavailable, in.endpoint, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%w: reading the introspection answer of %s: %v", ErrProviderUnavailable, in.endpoint, err)
	}
	if resp.StatusCode != http.StatusOK {
		hint := ""
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			hint = " (check client_id and client_secret in the oidc block)"
		}
		return nil, fmt.Errorf("%w: the introspection endpoint %s answered %s%s", ErrProviderUnavailable, in.endpoint, resp.Status, hint)
	}
	var claims map[string]any
	if err := json.Unmarshal(body, &claims); err != nil {
		return nil, fmt.Errorf("%w: the introspection endpoint %s answered something that is not a JSON object: %v", ErrProviderUnavailable, in.endpoint, err)
	}
	return claims, nil
}

// stringsClaimContains reports whether a claim that is a string or a list
// of strings holds want.
func stringsClaimContains(v any, want string) bool {
	switch v := v.(type) {
	case string:
		return v == want
	case []any:
		for _, e := range v {
			if s, ok := e.(string); ok && s == want {
				return true
			}
		}
	}
	return false
}
