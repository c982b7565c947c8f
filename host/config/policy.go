package config

// Policies: the top-level `policy "name" { … }` blocks (docs/auth.md,
// docs/design.md §19). This file holds their Go form, their decoding and
// their checks, and the subject syntax the policy engine
// (host/internal/policy) and `mcpvisor policy check` share.

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Policy is one `policy "name" { … }` block: which callers (Subjects) may
// use which exposed tools, resources and prompts, and how often. Once a
// configuration has a policy, everything no policy allows is denied;
// without one, every caller may use everything.
type Policy struct {
	// Name is the block label, unique among the policies. Errors, the
	// audit log and the metrics name the policy by it.
	Name string
	// Subjects are the callers the policy applies to, each in the syntax
	// ParseSubject reads ("group:analysts", "email:alice@example.com",
	// "sub:…", "client:…", "token", "local", "anonymous", "*").
	Subjects []string
	// Tools and Prompts are globs (path.Match syntax) over exposed names
	// ("github__search_*"); Resources are globs over resource URIs and URI
	// templates, where * also matches "/". A caller may use what a glob
	// of a policy that applies to it matches.
	Tools, Resources, Prompts []string
	// Deny are globs over exposed tool and prompt names and resource URIs.
	// A name a deny of any policy that applies to the caller matches is
	// refused, whatever another policy allows.
	Deny []string
	// Rate bounds the calls of each subject under this policy (the
	// unlabelled rate block); nil means no bound.
	Rate *Rate
	// ToolRates bound the calls of each subject to each tool, prompt or
	// resource their glob matches (rate "glob" { … } blocks).
	ToolRates []*Rate
	// Operator lets the policy's subjects use the operator endpoints:
	// POST /control/revive, /control/restart and /control/reload, and the
	// web console /ui. An OIDC subject may use them only when a policy
	// that applies to it sets Operator; the shared token's caller, the
	// local user and the callers of a host without auth always may
	// (docs/auth.md, "The operator endpoints").
	Operator bool
	// DeclRange is where the block is in the file (zero when built in Go).
	DeclRange hcl.Range
}

// Rate is a `rate { … }` or `rate "glob" { … }` block inside a policy: a
// token bucket of Burst calls that refills at CallsPerMinute.
type Rate struct {
	// Match is the label: a glob over exposed tool and prompt names and
	// resource URIs ("" for the unlabelled per-subject rate).
	Match string
	// CallsPerMinute is the sustained rate; it must be positive.
	CallsPerMinute int
	// Burst is how many calls may come at once; zero means
	// CallsPerMinute (a minute's worth).
	Burst int
}

// BurstOrDefault is Burst, or CallsPerMinute when Burst is zero.
func (r *Rate) BurstOrDefault() int {
	if r.Burst > 0 {
		return r.Burst
	}
	return r.CallsPerMinute
}

// The kinds of subject selector ParseSubject returns.
const (
	// SubjectAny ("*") is every caller that identified itself: an OIDC
	// subject, the shared token or the local user.
	SubjectAny = "*"
	// SubjectToken ("token") is whoever holds the shared token.
	SubjectToken = "token"
	// SubjectLocal ("local") is the local user: `mcpvisor run --stdio` and
	// an embedding program (host.stdio_subject names it).
	SubjectLocal = "local"
	// SubjectAnonymous ("anonymous") is an HTTP caller of a host without
	// an auth block.
	SubjectAnonymous = "anonymous"
	// SubjectID ("sub:ID") matches the subject claim, or the local user's
	// name.
	SubjectID = "sub"
	// SubjectEmail ("email:ADDRESS") matches the email claim, ignoring case.
	SubjectEmail = "email"
	// SubjectGroup ("group:NAME") matches one of the groups claim.
	SubjectGroup = "group"
	// SubjectClient ("client:ID") matches the OAuth client the token was
	// issued to (azp or client_id).
	SubjectClient = "client"
)

var subjectWords = []string{SubjectAny, SubjectToken, SubjectLocal, SubjectAnonymous}
var subjectPrefixes = []string{SubjectID, SubjectEmail, SubjectGroup, SubjectClient}

// ParseSubject reads a subject selector: one of "*", "token", "local",
// "anonymous", or KIND:VALUE with KIND one of sub, email, group, client
// and a non-empty VALUE (taken as is: no globs). kind is the selector's
// kind constant; value is "" for the bare words.
func ParseSubject(s string) (kind, value string, err error) {
	if slices.Contains(subjectWords, s) {
		return s, "", nil
	}
	k, v, found := strings.Cut(s, ":")
	if !found {
		hint := ""
		if c := closest(s, subjectWords); c != "" {
			hint = fmt.Sprintf(" (did you mean %q?)", c)
		} else if s != "" {
			hint = fmt.Sprintf(" (for a subject claim, write \"sub:%s\")", s)
		}
		return "", "", fmt.Errorf("%q is not a subject%s; write sub:ID, email:ADDRESS, group:NAME, client:ID, token, local, anonymous or *", s, hint)
	}
	if !slices.Contains(subjectPrefixes, k) {
		hint := ""
		if c := closest(k, subjectPrefixes); c != "" {
			hint = fmt.Sprintf(" (did you mean \"%s:%s\"?)", c, v)
		}
		return "", "", fmt.Errorf("%q has the unknown kind %q%s; the kinds are sub, email, group and client", s, k, hint)
	}
	if v == "" {
		return "", "", fmt.Errorf("%q names no %s; write %s:VALUE", s, k, k)
	}
	return k, v, nil
}

// CheckGlob reports whether a policy glob is well formed (path.Match
// syntax; for resources * also matches "/", which does not change what is
// well formed).
func CheckGlob(p string) error {
	if p == "" {
		return fmt.Errorf("the glob is empty")
	}
	if _, err := path.Match(strings.ReplaceAll(p, "/", "\x00"), ""); err != nil {
		return fmt.Errorf("%q is not a valid glob (path.Match syntax: *, ?, [a-z], \\ to escape)", p)
	}
	return nil
}

// policySchema is one `policy "name" { … }` block.
type policySchema struct {
	Name      string    `hcl:"name,label"`
	NameRange hcl.Range `hcl:"name,label_range"`

	Subjects  hcl.Expression `hcl:"subjects,optional"`
	Tools     hcl.Expression `hcl:"tools,optional"`
	Resources hcl.Expression `hcl:"resources,optional"`
	Prompts   hcl.Expression `hcl:"prompts,optional"`
	Deny      hcl.Expression `hcl:"deny,optional"`
	Operator  hcl.Expression `hcl:"operator,optional"`

	Rate      []*rateSchema         `hcl:"rate,block"`
	ToolRates []*labelledRateSchema `hcl:"rate ,block"` // rate "glob" { … }: see labelRates

	DefRange hcl.Range `hcl:",def_range"`
}

// rateSchema is an unlabelled `rate { … }` block inside a policy.
type rateSchema struct {
	CallsPerMinute hcl.Expression `hcl:"calls_per_minute,optional"`
	Burst          hcl.Expression `hcl:"burst,optional"`

	DefRange hcl.Range `hcl:",def_range"`
}

// labelledRateSchema is a `rate "glob" { … }` block inside a policy.
type labelledRateSchema struct {
	Match      string    `hcl:"match,label"`
	MatchRange hcl.Range `hcl:"match,label_range"`

	CallsPerMinute hcl.Expression `hcl:"calls_per_minute,optional"`
	Burst          hcl.Expression `hcl:"burst,optional"`

	DefRange hcl.Range `hcl:",def_range"`
}

// labelledRate is the block type a labelled rate block is decoded as. HCL
// schemas fix the number of labels of a block type, and a policy's rate
// block has none or one; labelRates gives the labelled ones this type,
// which no file can spell (it ends in a space).
const labelledRate = "rate "

// labelRates renames every policy's labelled rate blocks in the syntax
// tree of a file to labelledRate before the schema decodes it.
func labelRates(body hcl.Body) {
	root, ok := body.(*hclsyntax.Body)
	if !ok {
		return
	}
	for _, b := range root.Blocks {
		if b.Type != "policy" || b.Body == nil {
			continue
		}
		for _, r := range b.Body.Blocks {
			if r.Type == "rate" && len(r.Labels) > 0 {
				r.Type = labelledRate
			}
		}
	}
}

// policy decodes one policy block.
func (d *decoder) policy(rp *policySchema) *Policy {
	p := &Policy{Name: rp.Name, DeclRange: rp.DefRange}
	r := map[string]hcl.Range{"name": rp.NameRange}
	d.src.policies[p] = r
	list := func(expr hcl.Expression, name string) []string {
		v, ok := d.strList(expr, name)
		if ok {
			r[name] = expr.Range()
		}
		return v
	}
	p.Subjects = list(rp.Subjects, "subjects")
	p.Tools = list(rp.Tools, "tools")
	p.Resources = list(rp.Resources, "resources")
	p.Prompts = list(rp.Prompts, "prompts")
	p.Deny = list(rp.Deny, "deny")
	if v, ok := d.boolean(rp.Operator, "operator"); ok {
		p.Operator = v
		r["operator"] = rp.Operator.Range()
	}
	if !d.quiet && exprIsNull(rp.Subjects) {
		d.errorf(rp.DefRange.Ptr(), "Missing required argument",
			fmt.Sprintf("policy %q needs subjects, the callers it applies to. For example: subjects = [\"group:analysts\", \"email:alice@example.com\"].", rp.Name))
	}
	rate := func(cpm, burst hcl.Expression, def hcl.Range, key string) *Rate {
		rt := &Rate{}
		if v, ok := d.integer(cpm, "calls_per_minute"); ok {
			rt.CallsPerMinute = v
			r[key+".calls_per_minute"] = cpm.Range()
		} else if !d.quiet && exprIsNull(cpm) {
			d.errorf(def.Ptr(), "Missing required argument",
				fmt.Sprintf("A rate block in policy %q needs calls_per_minute. For example: rate { calls_per_minute = 120 }.", rp.Name))
		}
		if v, ok := d.integer(burst, "burst"); ok {
			rt.Burst = v
			r[key+".burst"] = burst.Range()
		}
		r[key] = def
		return rt
	}
	for i, rr := range rp.Rate {
		if i > 0 {
			d.errorf(rr.DefRange.Ptr(), "Duplicate rate block",
				fmt.Sprintf("policy %q already has an unlabelled rate block (its per-subject rate); merge the two, or give this one a label to limit some tools: rate \"github__search_*\" { … }.", rp.Name))
			continue
		}
		p.Rate = rate(rr.CallsPerMinute, rr.Burst, rr.DefRange, "rate")
	}
	for i, rr := range rp.ToolRates {
		rt := rate(rr.CallsPerMinute, rr.Burst, rr.DefRange, fmt.Sprintf("rate.%d", i))
		rt.Match = rr.Match
		r[fmt.Sprintf("rate.%d.match", i)] = rr.MatchRange
		p.ToolRates = append(p.ToolRates, rt)
	}
	return p
}

// policies checks the policy blocks: unique names, subjects and globs in
// their syntax, positive rates.
func (k *checker) policies(ps []*Policy) {
	seen := map[string]bool{}
	for i, p := range ps {
		if p == nil {
			k.errorf(nil, "Missing policy", "Policies[%d] is nil.", i)
			continue
		}
		where := fmt.Sprintf("policy %q", p.Name)
		if p.Name == "" {
			k.errorf(k.policyAt(p, "name"), "Empty policy name",
				"A policy block's label is its name, which denials, the audit log and the metrics show; it must not be empty. Write policy \"analysts\" { … }.")
		}
		if seen[p.Name] {
			k.errorf(k.policyAt(p, "name"), "Duplicate policy",
				"There is more than one policy named %q. Give each policy block a different name, or merge them.", p.Name)
		}
		seen[p.Name] = true
		if len(p.Subjects) == 0 && k.policyAt(p, "subjects") != nil {
			k.errorf(k.policyAt(p, "subjects"), "No subjects",
				"subjects in %s is empty, so the policy applies to nobody. Name its callers, such as subjects = [\"group:analysts\"], or remove the policy.", where)
		}
		for _, s := range p.Subjects {
			if _, _, err := ParseSubject(s); err != nil {
				k.errorf(k.policyAt(p, "subjects"), "Invalid subject", "subjects in %s: %s.", where, err)
			}
		}
		for _, list := range []struct {
			key   string
			globs []string
		}{{"tools", p.Tools}, {"resources", p.Resources}, {"prompts", p.Prompts}, {"deny", p.Deny}} {
			for _, g := range list.globs {
				if err := CheckGlob(g); err != nil {
					k.errorf(k.policyAt(p, list.key), "Invalid glob", "%s in %s: %s.", list.key, where, err)
				}
			}
		}
		// The source keys of the rate blocks: "rate" for the unlabelled
		// one, "rate.N" for the Nth labelled one (decoder.policy).
		keys := map[*Rate]string{}
		rates := []*Rate{}
		if p.Rate != nil {
			keys[p.Rate], rates = "rate", append(rates, p.Rate)
		}
		for i, rt := range p.ToolRates {
			if rt == nil {
				k.errorf(k.policyAt(p, "name"), "Missing rate", "%s has a nil rate block (ToolRates[%d]).", where, i)
				continue
			}
			keys[rt], rates = fmt.Sprintf("rate.%d", i), append(rates, rt)
			if err := CheckGlob(rt.Match); err != nil {
				k.errorf(k.policyAt(p, keys[rt]+".match"), "Invalid glob", "The label of a rate block in %s: %s.", where, err)
			}
		}
		for _, rt := range rates {
			key := keys[rt]
			if rt.CallsPerMinute <= 0 {
				k.errorf(k.policyAt(p, key+".calls_per_minute"), "Invalid rate",
					"calls_per_minute in a rate block of %s is %d; it must be at least 1. Remove the rate block for no limit.", where, rt.CallsPerMinute)
			}
			if rt.Burst < 0 {
				k.errorf(k.policyAt(p, key+".burst"), "Invalid burst",
					"burst in a rate block of %s is %d; it must be at least 1, or unset for calls_per_minute.", where, rt.Burst)
			}
		}
	}
}

// policyAt is the source range of a policy's attribute, or nil when the
// policy was built in Go.
func (k *checker) policyAt(p *Policy, key string) *hcl.Range {
	if k.src == nil {
		return nil
	}
	if r, ok := k.src.policies[p][key]; ok {
		return &r
	}
	if key != "name" {
		if r, ok := k.src.policies[p]["name"]; ok {
			return &r
		}
	}
	return nil
}
