// Package policy decides what each downstream caller may use: the policy
// blocks of the configuration (docs/auth.md, docs/design.md §19) compiled
// into an Engine that answers, for a subject and an exposed tool, prompt
// or resource, allowed or not and which rule decided, and that keeps the
// rate limits of the policies' rate blocks.
//
// The rules read like Vault's and Consul's ACLs: no policy means no
// restriction; once there is a policy, a caller may use only what a policy
// that applies to it allows (tools, prompts, resources globs), and a deny
// glob of any policy that applies to it wins over every allow.
package policy

import (
	"fmt"
	"os"
	"os/user"
	"path"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/mtibben/confusables"
	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/identity"
)

// Kind is what a name names: an exposed tool, an exposed prompt, or a
// resource URI (or URI template).
type Kind int

// The kinds of names a policy allows.
const (
	Tool Kind = iota
	Prompt
	Resource
)

func (k Kind) String() string {
	switch k {
	case Prompt:
		return "prompt"
	case Resource:
		return "resource"
	}
	return "tool"
}

// attribute is the policy attribute that allows names of kind k.
func (k Kind) attribute() string { return k.String() + "s" }

// Decision is the answer for one subject and one name.
type Decision struct {
	// Allowed is the answer.
	Allowed bool
	// Policy names the policy whose rule decided; "" when no policy
	// allows the name (the default deny) or there are no policies.
	Policy string
	// Rule is the rule that decided, as the configuration spells it:
	// `policy "analysts" deny "*__delete_*"`, `policy "analysts" tools
	// "github__*"`, or a sentence for the default deny.
	Rule string
}

// Engine is a compiled set of policies. A nil *Engine allows everything:
// it is what a configuration without policies compiles to. An Engine is
// safe for concurrent use.
type Engine struct {
	policies []*config.Policy
	local    *identity.Subject
	limits   *Limiters
	globs    map[string]string // every glob of the policies, folded (foldGlob)
}

// New compiles the policies of a configuration. stdioSubject names the
// local user ("" for the user mcpvisor runs as); limiters keeps the rate
// limits' buckets and may be shared by the engines of successive reloads,
// so a reload does not hand every caller a fresh burst; nil makes one.
// With no policies New returns nil.
func New(policies []*config.Policy, stdioSubject string, limiters *Limiters) *Engine {
	if len(policies) == 0 {
		return nil
	}
	if limiters == nil {
		limiters = NewLimiters(0)
	}
	e := &Engine{policies: slices.Clone(policies), local: LocalSubject(stdioSubject), limits: limiters, globs: map[string]string{}}
	for _, p := range policies {
		for _, g := range slices.Concat(p.Tools, p.Prompts, p.Resources, p.Deny) {
			e.globs[g] = foldGlob(g)
		}
		for _, rt := range p.ToolRates {
			e.globs[rt.Match] = foldGlob(rt.Match)
		}
	}
	return e
}

// LocalSubject is the caller of stdio and library calls: the local user,
// named stdioSubject or, when that is empty, after the account mcpvisor
// runs as.
func LocalSubject(stdioSubject string) *identity.Subject {
	name := stdioSubject
	if name == "" {
		if u, err := user.Current(); err == nil && u.Username != "" {
			name = u.Username
		} else {
			name = cmpOr(os.Getenv("USER"), os.Getenv("USERNAME"), "local")
		}
	}
	return &identity.Subject{Via: identity.ViaLocal, ID: name}
}

func cmpOr(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// Local is the subject of stdio and library calls (nil for a nil Engine).
func (e *Engine) Local() *identity.Subject {
	if e == nil {
		return nil
	}
	return e.local
}

// Describe names a subject the way errors and `mcpvisor policy check`
// show it: its kind and id, never a credential.
func Describe(s *identity.Subject) string {
	switch {
	case s == nil:
		return "an anonymous caller"
	case s.Via == identity.ViaToken:
		return "the shared token's caller"
	case s.Via == identity.ViaLocal:
		return fmt.Sprintf("the local user %q", s.ID)
	case s.ID != "":
		return fmt.Sprintf("subject %q", s.ID)
	case s.Email != "":
		return fmt.Sprintf("the subject with email %q", s.Email)
	case len(s.Groups) > 0:
		return fmt.Sprintf("a subject in group %q", strings.Join(s.Groups, ", "))
	case s.Client != "":
		return fmt.Sprintf("a subject of client %q", s.Client)
	default:
		return "a subject without claims"
	}
}

// Applies reports whether the subject selector sel (config.ParseSubject
// syntax) matches s. A nil s is an anonymous caller (an HTTP endpoint
// without auth).
func Applies(sel string, s *identity.Subject) bool {
	kind, value, err := config.ParseSubject(sel)
	if err != nil {
		return false
	}
	if s == nil {
		return kind == config.SubjectAnonymous
	}
	switch kind {
	case config.SubjectAny:
		return true
	case config.SubjectToken:
		return s.Via == identity.ViaToken
	case config.SubjectLocal:
		return s.Via == identity.ViaLocal
	case config.SubjectID:
		return s.Via != identity.ViaToken && s.ID == value
	case config.SubjectEmail:
		// Only an address the provider verified (or one its issuer is
		// trusted for, trust_unverified_email): anyone can put any
		// address in an account of most providers.
		return s.Email != "" && s.EmailMatchable() && strings.EqualFold(s.Email, value)
	case config.SubjectGroup:
		return slices.Contains(s.Groups, value)
	case config.SubjectClient:
		return s.Client != "" && s.Client == value
	}
	return false
}

// Match reports whether the policy glob g matches name. For resources,
// * and ? also match "/" (a URI is not a file path); for tools and prompts
// it is path.Match. A malformed glob matches nothing (the configuration's
// validation refuses one).
func Match(kind Kind, g, name string) bool {
	if kind == Resource {
		g, name = strings.ReplaceAll(g, "/", "\x00"), strings.ReplaceAll(name, "/", "\x00")
	}
	ok, err := path.Match(g, name)
	return err == nil && ok
}

// Fold is what a name and a policy glob are compared as: Unicode NFKC
// (compatibility forms: fullwidth letters, ligatures), case folded, then
// the UTS #39 skeleton (confusables: a Cyrillic "е" is a Latin "e", "ℓ"
// an "l"), case folded again. Two names a person reading them cannot tell
// apart fold alike, so an upstream cannot slip a deny by naming its tool
// "Delete" or "dеlete".
func Fold(name string) string {
	s := norm.NFKC.String(name)
	s = foldCase.String(s)
	s = confusables.Skeleton(s)
	return foldCase.String(s)
}

var foldCase = cases.Fold()

// globMeta are the characters of a path.Match pattern that foldGlob keeps
// as they are: folding never maps to or from them (only literal text).
const globMeta = `*?[]\-^!`

// foldGlob folds the literal text of the glob g, keeping its pattern
// characters, so that Match(kind, foldGlob(g), Fold(name)) compares g and
// name as Fold does.
func foldGlob(g string) string {
	var b, lit strings.Builder
	flush := func() {
		b.WriteString(Fold(lit.String()))
		lit.Reset()
	}
	for _, r := range g {
		if strings.ContainsRune(globMeta, r) {
			flush()
			b.WriteRune(r)
			continue
		}
		lit.WriteRune(r)
	}
	flush()
	return b.String()
}

// matchFolded reports whether the folded glob fg (foldGlob) matches any
// of names (folded with Fold).
func matchFolded(kind Kind, fg string, names []string) bool {
	for _, n := range names {
		if Match(kind, fg, n) {
			return true
		}
	}
	return false
}

// foldAll folds the exposed name and its aliases once for a decision.
func foldAll(name string, aliases []string) []string {
	out := make([]string, 0, 1+len(aliases))
	out = append(out, Fold(name))
	for _, a := range aliases {
		if f := Fold(a); !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// applying returns the policies that apply to s.
func (e *Engine) applying(s *identity.Subject) []*config.Policy {
	var out []*config.Policy
	for _, p := range e.policies {
		for _, sel := range p.Subjects {
			if Applies(sel, s) {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// Decide answers whether s may use the name of kind: denied when a deny
// glob of a policy that applies to s matches it; else allowed when a
// tools, prompts or resources glob of such a policy does; else denied
// (no policy allows it). aliases are the other names of the same thing a
// glob may have been written for: for an exposed tool or prompt, the
// upstream's own name with the server's prefix, before and after the
// registry made it a valid name (registry.Registry.Aliases). A glob
// matches when it matches the name or an alias, compared as Fold does.
func (e *Engine) Decide(s *identity.Subject, kind Kind, name string, aliases ...string) Decision {
	if e == nil {
		return Decision{Allowed: true}
	}
	return e.decide(e.applying(s), s, kind, name, foldAll(name, aliases))
}

// Visible returns what s may see of kind, for filtering a list: the
// policies that apply to s are found once, not once per name.
func (e *Engine) Visible(s *identity.Subject, kind Kind) func(name string, aliases ...string) bool {
	if e == nil {
		return func(string, ...string) bool { return true }
	}
	ps := e.applying(s)
	return func(name string, aliases ...string) bool {
		return e.decide(ps, s, kind, name, foldAll(name, aliases)).Allowed
	}
}

// match reports whether the policies' glob g matches any of the folded
// names.
func (e *Engine) match(kind Kind, g string, folded []string) bool {
	fg, ok := e.globs[g]
	if !ok {
		fg = foldGlob(g)
	}
	return matchFolded(kind, fg, folded)
}

func (e *Engine) decide(ps []*config.Policy, s *identity.Subject, kind Kind, name string, folded []string) Decision {
	for _, p := range ps {
		for _, g := range p.Deny {
			if e.match(kind, g, folded) {
				return Decision{Policy: p.Name, Rule: fmt.Sprintf("policy %q deny %q", p.Name, g)}
			}
		}
	}
	for _, p := range ps {
		for _, g := range allows(p, kind) {
			if e.match(kind, g, folded) {
				return Decision{Allowed: true, Policy: p.Name, Rule: fmt.Sprintf("policy %q %s %q", p.Name, kind.attribute(), g)}
			}
		}
	}
	if len(ps) == 0 {
		return Decision{Rule: fmt.Sprintf("no policy applies to %s (default deny)", Describe(s))}
	}
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = fmt.Sprintf("%q", p.Name)
	}
	return Decision{Rule: fmt.Sprintf("no policy allows %s %q to %s (default deny; the policies that apply to it: %s)", kind, name, Describe(s), strings.Join(names, ", "))}
}

func allows(p *config.Policy, kind Kind) []string {
	switch kind {
	case Prompt:
		return p.Prompts
	case Resource:
		return p.Resources
	}
	return p.Tools
}

// Limited is a call refused by a rate limit.
type Limited struct {
	// Policy and Rule name the rate block: `policy "analysts" rate` or
	// `policy "analysts" rate "github__search_*"`.
	Policy, Rule string
	// CallsPerMinute is the block's rate.
	CallsPerMinute int
	// RetryAfter is how long until the call would be admitted.
	RetryAfter time.Duration
}

// Admit takes one call of s to the name of kind from the rate limits of
// the policies that apply to s: each policy's rate block and each rate
// "glob" block that matches the name (or an alias, as Decide matches),
// one bucket per subject and block: a labelled block counts the calls to
// every name it matches together. The call is admitted only if every one
// of them has room; then it takes a token from each. Otherwise no token
// is taken and the Limited with the longest wait says when to retry.
func (e *Engine) Admit(s *identity.Subject, kind Kind, name string, now time.Time, aliases ...string) *Limited {
	if e == nil {
		return nil
	}
	var keys []bucketKey
	var rates []*config.Rate
	var who []*config.Policy
	var folded []string
	for _, p := range e.applying(s) {
		if p.Rate != nil {
			keys = append(keys, bucketKey{policy: p.Name, rate: *p.Rate})
			rates, who = append(rates, p.Rate), append(who, p)
		}
		for _, rt := range p.ToolRates {
			if folded == nil {
				folded = foldAll(name, aliases)
			}
			if e.match(kind, rt.Match, folded) {
				keys = append(keys, bucketKey{policy: p.Name, rate: *rt})
				rates, who = append(rates, rt), append(who, p)
			}
		}
	}
	if len(keys) == 0 {
		return nil
	}
	i, wait := e.limits.take(subjectKey(s), keys, now)
	if i < 0 {
		return nil
	}
	rule := fmt.Sprintf("policy %q rate", who[i].Name)
	if rates[i].Match != "" {
		rule = fmt.Sprintf("policy %q rate %q", who[i].Name, rates[i].Match)
	}
	return &Limited{Policy: who[i].Name, Rule: rule, CallsPerMinute: rates[i].CallsPerMinute, RetryAfter: wait}
}

// Explain describes, for `mcpvisor policy check`, which policies apply to
// s and the rate limits a call of the name would count against.
func (e *Engine) Explain(s *identity.Subject, kind Kind, name string, aliases ...string) (applying []string, limits []string) {
	if e == nil {
		return nil, nil
	}
	folded := foldAll(name, aliases)
	for _, p := range e.applying(s) {
		applying = append(applying, p.Name)
		if p.Rate != nil {
			limits = append(limits, fmt.Sprintf("policy %q rate: %d calls a minute per subject (burst %d)", p.Name, p.Rate.CallsPerMinute, p.Rate.BurstOrDefault()))
		}
		for _, rt := range p.ToolRates {
			if e.match(kind, rt.Match, folded) {
				limits = append(limits, fmt.Sprintf("policy %q rate %q: %d calls a minute per subject, over every %s it matches (burst %d)", p.Name, rt.Match, rt.CallsPerMinute, kind, rt.BurstOrDefault()))
			}
		}
	}
	return applying, limits
}

// subjectKey is whose buckets a rate limit counts: one set per OIDC
// subject, per local user, one for the shared token and one for anonymous
// callers.
func subjectKey(s *identity.Subject) string { return s.Caller() }

// Same reports whether e and o hold the same policies and local subject
// (what each caller may see is the same under both).
func (e *Engine) Same(o *Engine) bool {
	if e == nil || o == nil {
		return e == o
	}
	if e.local.ID != o.local.ID {
		return false
	}
	if len(e.policies) != len(o.policies) {
		return false
	}
	for i := range e.policies {
		a, b := *e.policies[i], *o.policies[i]
		a.DeclRange, b.DeclRange = hcl.Range{}, hcl.Range{}
		if !reflect.DeepEqual(a, b) {
			return false
		}
	}
	return true
}

// Operator answers whether s may use the operator endpoints (POST
// /control/revive, /control/restart, /control/reload and the web console
// /ui; docs/auth.md, "The operator endpoints"):
//
//   - the shared token's caller may: the token is the operator's secret,
//     as it was before policies had a say;
//   - the local user may (stdio, library calls, the control socket);
//   - an anonymous caller may: only a host without auth has one, and
//     there every caller that reaches the listener is admitted;
//   - an OIDC subject may only when a policy that applies to it has
//     operator = true, whether or not other policies exist; with no
//     policies at all, no OIDC subject is an operator.
//
// A nil Engine (no policies) answers too.
func (e *Engine) Operator(s *identity.Subject) Decision {
	switch {
	case s == nil:
		return Decision{Allowed: true, Rule: "a host without auth admits every caller to the operator endpoints"}
	case s.Via == identity.ViaToken:
		return Decision{Allowed: true, Rule: "the shared token is the operator's credential"}
	case s.Via == identity.ViaLocal:
		return Decision{Allowed: true, Rule: "the local user is an operator"}
	}
	var ps []*config.Policy
	if e != nil {
		ps = e.applying(s)
	}
	for _, p := range ps {
		if p.Operator {
			return Decision{Allowed: true, Policy: p.Name, Rule: fmt.Sprintf("policy %q operator = true", p.Name)}
		}
	}
	if len(ps) == 0 {
		return Decision{Rule: fmt.Sprintf("no policy applies to %s, so it is not an operator", Describe(s))}
	}
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = fmt.Sprintf("%q", p.Name)
	}
	return Decision{Rule: fmt.Sprintf("no policy that applies to %s has operator = true (the policies that apply to it: %s)", Describe(s), strings.Join(names, ", "))}
}
