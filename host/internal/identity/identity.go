// Package identity is who a downstream request comes from: the Subject
// the HTTP ingress established (a JWT of the configured OpenID provider,
// or the shared token), carried in the request's context to whatever
// decides on it — the audit log today, policies later (docs/auth.md).
package identity

import "context"

// The ways a Subject was established.
const (
	// ViaToken: the request carried the host's shared bearer token. Such
	// a subject has no ID: everyone with the token is the same caller.
	ViaToken = "token"
	// ViaOIDC: the request carried a JWT access token of the configured
	// OpenID provider, verified against its keys.
	ViaOIDC = "oidc"
	// ViaLocal: the local user, the caller of stdio (`mcpvisor run
	// --stdio`), library calls and token-less requests over the control
	// socket from mcpvisor's own uid, named by the host block's
	// stdio_subject (or the account mcpvisor runs as) for policies.
	ViaLocal = "local"
)

// Subject is the caller of a downstream request. It never holds the
// credential itself.
type Subject struct {
	// Via is ViaToken, ViaOIDC or ViaLocal.
	Via string `json:"via"`
	// ID is the subject claim (subject_claim, "sub" by default), the
	// local user's name for ViaLocal; "" for ViaToken.
	ID string `json:"id,omitempty"`
	// Email is the token's email claim, when it has one.
	Email string `json:"email,omitempty"`
	// EmailVerified is the token's email_verified claim when it has an
	// email (nil without one): whether the provider checked that the
	// subject owns the address. Policies match email: selectors only
	// when it is true, or when EmailTrusted.
	EmailVerified *bool `json:"email_verified,omitempty"`
	// EmailTrusted says the issuer is trusted for its unverified emails
	// too (the oidc block's trust_unverified_email).
	EmailTrusted bool `json:"-"`
	// Groups are the token's groups claim (groups_claim).
	Groups []string `json:"groups,omitempty"`
	// Client is the OAuth client the token was issued to (its azp or
	// client_id claim), when it names one.
	Client string `json:"client,omitempty"`
	// Scopes are the scopes granted to the token (its scope or scp claim).
	Scopes []string `json:"scopes,omitempty"`
}

// Key is what binds a session to its subject: the go-sdk refuses a
// request on a session opened by another key ("session user mismatch").
// It is Caller: every holder of the shared token is one caller ("token"),
// and a session the shared token opened is refused to an OIDC subject as
// much as the other way round.
func (s *Subject) Key() string { return s.Caller() }

// Caller names the caller a per-caller bound counts (rate limit buckets,
// the sessions of max_sessions_per_subject): "oidc:ID" or "local:NAME";
// "token" for every holder of the shared token, who are one caller; and
// "anonymous" for a nil Subject (an HTTP endpoint without auth).
func (s *Subject) Caller() string {
	switch {
	case s == nil:
		return "anonymous"
	case s.Via == ViaToken:
		return ViaToken
	}
	return s.Via + ":" + s.ID
}

// EmailMatchable reports whether policies may match s by its email: the
// provider verified it, or its issuer is trusted for unverified ones.
func (s *Subject) EmailMatchable() bool {
	return s != nil && s.Email != "" && (s.EmailTrusted || (s.EmailVerified != nil && *s.EmailVerified))
}

type contextKey struct{}

// NewContext returns ctx carrying s.
func NewContext(ctx context.Context, s *Subject) context.Context {
	return context.WithValue(ctx, contextKey{}, s)
}

// FromContext returns the Subject of ctx, or nil (stdio, library calls,
// or an HTTP endpoint without auth).
func FromContext(ctx context.Context) *Subject {
	s, _ := ctx.Value(contextKey{}).(*Subject)
	return s
}

// TokenInfoKey is the key of the Subject in the Extra of the go-sdk's
// auth.TokenInfo, which carries it from the HTTP ingress to the request
// handlers the go-sdk calls.
const TokenInfoKey = "mcpvisor.subject"
