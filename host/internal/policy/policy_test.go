package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/identity"
)

var testPolicies = []*config.Policy{
	{
		Name:      "analysts",
		Subjects:  []string{"group:analysts", "email:alice@example.com"},
		Tools:     []string{"github__search_*", "notes__*"},
		Resources: []string{"notes://*"},
		Prompts:   []string{"notes__summary"},
		Deny:      []string{"*__delete_*"},
	},
	{
		Name:     "ops",
		Subjects: []string{"group:ops", "token"},
		Tools:    []string{"*"},
	},
	{
		Name:     "everyone",
		Subjects: []string{"*"},
		Tools:    []string{"echo__echo"},
	},
	{
		Name:     "me",
		Subjects: []string{"local", "sub:svc-1", "client:ci"},
		Tools:    []string{"notes__read"},
		Deny:     []string{"notes__purge"},
	},
	{
		Name:     "open",
		Subjects: []string{"anonymous"},
		Tools:    []string{"public__*"},
	},
}

// TestDecide is the decision table: who matches which policy, deny over
// allow across policies, the default deny, and the rule each names.
func TestDecide(t *testing.T) {
	e := New(testPolicies, "alice", nil)
	analyst := &identity.Subject{Via: identity.ViaOIDC, ID: "u1", Groups: []string{"analysts"}}
	verified := true
	alice := &identity.Subject{Via: identity.ViaOIDC, ID: "u2", Email: "Alice@Example.com", EmailVerified: &verified}
	both := &identity.Subject{Via: identity.ViaOIDC, ID: "u3", Groups: []string{"analysts", "ops"}}
	nobody := &identity.Subject{Via: identity.ViaOIDC, ID: "u4"}
	svc := &identity.Subject{Via: identity.ViaOIDC, ID: "svc-1"}
	ci := &identity.Subject{Via: identity.ViaOIDC, ID: "x", Client: "ci"}
	shared := &identity.Subject{Via: identity.ViaToken}
	local := e.Local()
	for _, tc := range []struct {
		who   *identity.Subject
		kind  Kind
		name  string
		allow bool
		rule  string
	}{
		{analyst, Tool, "github__search_code", true, `policy "analysts" tools "github__search_*"`},
		{analyst, Tool, "github__create_issue", false, `no policy allows tool "github__create_issue" to subject "u1" (default deny; the policies that apply to it: "analysts", "everyone")`},
		{analyst, Tool, "notes__delete_note", false, `policy "analysts" deny "*__delete_*"`},
		{analyst, Tool, "echo__echo", true, `policy "everyone" tools "echo__echo"`},
		{alice, Tool, "notes__read", true, `policy "analysts" tools "notes__*"`}, // email ignores case
		{both, Tool, "github__create_issue", true, `policy "ops" tools "*"`},
		// A deny of one policy wins over another's allow.
		{both, Tool, "github__delete_repo", false, `policy "analysts" deny "*__delete_*"`},
		{nobody, Tool, "echo__echo", true, `policy "everyone" tools "echo__echo"`},
		{nobody, Tool, "notes__read", false, "default deny"},
		{svc, Tool, "notes__read", true, `policy "me" tools "notes__read"`},
		{ci, Tool, "notes__purge", false, `policy "me" deny "notes__purge"`},
		{shared, Tool, "github__delete_repo", true, `policy "ops" tools "*"`},
		{local, Tool, "notes__read", true, `policy "me" tools "notes__read"`},
		{local, Tool, "github__search_code", false, "default deny"},
		// sub: of a local user matches its name too.
		{nil, Tool, "public__x", true, `policy "open" tools "public__*"`},
		{nil, Tool, "echo__echo", false, `no policy allows tool "echo__echo" to an anonymous caller (default deny; the policies that apply to it: "open")`},
		// Kinds are apart: a tools glob allows no prompt.
		{analyst, Prompt, "notes__summary", true, `policy "analysts" prompts "notes__summary"`},
		{analyst, Prompt, "notes__other", false, "default deny"},
		{analyst, Resource, "notes://a/b/c", true, `policy "analysts" resources "notes://*"`},
		{analyst, Resource, "file:///etc/passwd", false, "default deny"},
		{shared, Resource, "notes://a", false, "default deny"},
	} {
		d := e.Decide(tc.who, tc.kind, tc.name)
		if d.Allowed != tc.allow || !strings.Contains(d.Rule, tc.rule) {
			t.Errorf("Decide(%s, %s %q) = %v by %q; want %v by %q", Describe(tc.who), tc.kind, tc.name, d.Allowed, d.Rule, tc.allow, tc.rule)
		}
	}
	// sub:NAME names the local user too.
	e2 := New([]*config.Policy{{Name: "me", Subjects: []string{"sub:alice"}, Tools: []string{"*"}}}, "alice", nil)
	if d := e2.Decide(e2.Local(), Tool, "x"); !d.Allowed {
		t.Errorf("sub:alice does not match the local user alice: %q", d.Rule)
	}
	if d := e2.Decide(shared, Tool, "x"); d.Allowed {
		t.Errorf("sub:alice matches the shared token's caller")
	}
}

// TestNoPolicies: without policies everything is allowed and nothing is
// limited (today's behaviour).
func TestNoPolicies(t *testing.T) {
	e := New(nil, "", nil)
	if e != nil {
		t.Fatal("New without policies is not nil")
	}
	if d := e.Decide(nil, Tool, "x"); !d.Allowed {
		t.Error("a nil engine denies")
	}
	if l := e.Admit(nil, Tool, "x", time.Now()); l != nil {
		t.Error("a nil engine limits")
	}
	if !e.Visible(nil, Tool)("x") {
		t.Error("a nil engine hides")
	}
}

// TestAdmit: the per-subject rate counts every call of a subject, a
// labelled rate every call to a name it matches; a refused call takes no token
// from the others; the wait is what the bucket says.
func TestAdmit(t *testing.T) {
	ps := []*config.Policy{{
		Name: "p", Subjects: []string{"*"}, Tools: []string{"*"},
		Rate:      &config.Rate{CallsPerMinute: 60, Burst: 3},
		ToolRates: []*config.Rate{{Match: "search__*", CallsPerMinute: 6, Burst: 1}},
	}}
	e := New(ps, "me", nil)
	a := &identity.Subject{Via: identity.ViaOIDC, ID: "a"}
	b := &identity.Subject{Via: identity.ViaOIDC, ID: "b"}
	now := time.Unix(1000, 0)
	if l := e.Admit(a, Tool, "search__x", now); l != nil {
		t.Fatalf("first call limited: %+v", l)
	}
	// search__x's bucket (burst 1) is empty: 10 s until the next token.
	l := e.Admit(a, Tool, "search__x", now)
	if l == nil || l.Rule != `policy "p" rate "search__*"` || l.RetryAfter != 10*time.Second || l.CallsPerMinute != 6 {
		t.Fatalf("second search call: %+v; want the search rate, retry in 10s", l)
	}
	// Another name under the same label shares its bucket: the rate is
	// the subject's over every name the glob matches.
	if l := e.Admit(a, Tool, "search__y", now); l == nil || l.Rule != `policy "p" rate "search__*"` {
		t.Fatalf("search__y after search__x: %+v; want the search rate's one bucket, empty", l)
	}
	// The refused calls took nothing from the per-subject bucket (3 - 1
	// used).
	for i, name := range []string{"other", "other2"} {
		if l := e.Admit(a, Tool, name, now); l != nil {
			t.Fatalf("call %d (%s) limited: %+v", i, name, l)
		}
	}
	l = e.Admit(a, Tool, "other", now)
	if l == nil || l.Rule != `policy "p" rate` || l.RetryAfter != time.Second {
		t.Fatalf("fourth call of a: %+v; want the per-subject rate, retry in 1s", l)
	}
	// Another subject has buckets of its own.
	if l := e.Admit(b, Tool, "other", now); l != nil {
		t.Fatalf("b limited by a's calls: %+v", l)
	}
	// After the wait the call goes through.
	if l := e.Admit(a, Tool, "other", now.Add(time.Second)); l != nil {
		t.Fatalf("a after waiting: %+v", l)
	}
}

// TestLimitersBounded: the buckets of callers are an LRU with a cap: a
// flood of subjects does not grow it, and the most recent survive.
func TestLimitersBounded(t *testing.T) {
	lim := NewLimiters(100)
	e := New([]*config.Policy{{Name: "p", Subjects: []string{"*"}, Tools: []string{"*"}, Rate: &config.Rate{CallsPerMinute: 1}}}, "me", lim)
	now := time.Unix(1000, 0)
	keep := &identity.Subject{Via: identity.ViaOIDC, ID: "keep"}
	e.Admit(keep, Tool, "x", now)
	for i := range 1000 {
		e.Admit(&identity.Subject{Via: identity.ViaOIDC, ID: "s" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)}, Tool, "x", now)
		if i%10 == 0 {
			e.Admit(keep, Tool, "x", now) // used recently: stays
		}
	}
	if n := lim.Len(); n != 100 {
		t.Errorf("%d buckets after 1001 subjects; want the cap, 100", n)
	}
	if l := e.Admit(keep, Tool, "x", now); l == nil {
		t.Error("the bucket of a subject in constant use was evicted")
	}
}

// TestSame: a reload with the same policies keeps them; any change
// (a glob, the stdio subject) does not.
func TestSame(t *testing.T) {
	a := New(testPolicies, "alice", nil)
	b := New(testPolicies, "alice", nil)
	if !a.Same(b) {
		t.Error("the same policies differ")
	}
	if a.Same(New(testPolicies, "bob", nil)) {
		t.Error("another stdio subject is the same")
	}
	changed := *testPolicies[0]
	changed.Deny = nil
	if a.Same(New(append([]*config.Policy{&changed}, testPolicies[1:]...), "alice", nil)) {
		t.Error("a policy without its deny is the same")
	}
	if a.Same(nil) || !(*Engine)(nil).Same(nil) {
		t.Error("nil engines compare wrong")
	}
}

// TestOperator is the operator decision table: an OIDC subject is an
// operator only through a policy with operator = true that applies to
// it, also when other policies apply and when another policy denies it
// tools; with no policies no OIDC subject is; the shared token, the
// local user and an anonymous caller (a host without auth) always are.
func TestOperator(t *testing.T) {
	ps := append([]*config.Policy{{
		Name:     "oncall",
		Subjects: []string{"group:oncall", "sub:bob"},
		Operator: true,
	}}, testPolicies...)
	e := New(ps, "alice", nil)
	oncall := &identity.Subject{Via: identity.ViaOIDC, ID: "u1", Groups: []string{"analysts", "oncall"}}
	bob := &identity.Subject{Via: identity.ViaOIDC, ID: "bob"}
	analyst := &identity.Subject{Via: identity.ViaOIDC, ID: "u2", Groups: []string{"analysts"}}
	nobody := &identity.Subject{Via: identity.ViaOIDC, ID: "u4"}
	// A subject named like the local user or the token is still an OIDC
	// subject.
	namedLocal := &identity.Subject{Via: identity.ViaOIDC, ID: "alice", Groups: []string{"token"}}
	for _, tc := range []struct {
		who    *identity.Subject
		allow  bool
		policy string
		rule   string
	}{
		{oncall, true, "oncall", `policy "oncall" operator = true`},
		{bob, true, "oncall", `policy "oncall" operator = true`},
		{analyst, false, "", `no policy that applies to subject "u2" has operator = true (the policies that apply to it: "analysts", "everyone")`},
		{nobody, false, "", `no policy that applies to subject "u4" has operator = true (the policies that apply to it: "everyone")`},
		{namedLocal, false, "", `no policy that applies to subject "alice" has operator = true`},
		{&identity.Subject{Via: identity.ViaToken}, true, "", "the shared token is the operator's credential"},
		{e.Local(), true, "", "the local user is an operator"},
		{nil, true, "", "a host without auth admits every caller"},
	} {
		d := e.Operator(tc.who)
		if d.Allowed != tc.allow || d.Policy != tc.policy || !strings.Contains(d.Rule, tc.rule) {
			t.Errorf("Operator(%+v) = %+v; want allowed %v, policy %q, rule containing %q", tc.who, d, tc.allow, tc.policy, tc.rule)
		}
	}
	// Without policies no OIDC subject is an operator; the others still are.
	var none *Engine
	if d := none.Operator(oncall); d.Allowed || !strings.Contains(d.Rule, `no policy applies to subject "u1", so it is not an operator`) {
		t.Errorf("Operator without policies = %+v; want denied", d)
	}
	if d := none.Operator(&identity.Subject{Via: identity.ViaToken}); !d.Allowed {
		t.Errorf("the shared token without policies: %+v; want allowed", d)
	}
	// operator = true on a policy is part of what a reload compares.
	flipped := *ps[0]
	flipped.Operator = false
	if e.Same(New(append([]*config.Policy{&flipped}, ps[1:]...), "alice", nil)) {
		t.Error("a policy that lost operator = true is the same")
	}
}

// TestDescribeNamesWhatTheSubjectHas: a subject known only by a claim
// other than its id (`policy check group:analysts …`) is named by that
// claim, not as subject "".
func TestDescribeNamesWhatTheSubjectHas(t *testing.T) {
	for _, tc := range []struct {
		s    *identity.Subject
		want string
	}{
		{&identity.Subject{Via: identity.ViaOIDC, ID: "u1", Groups: []string{"g"}}, `subject "u1"`},
		{&identity.Subject{Via: identity.ViaOIDC, Email: "a@example.com"}, `the subject with email "a@example.com"`},
		{&identity.Subject{Via: identity.ViaOIDC, Groups: []string{"analysts"}}, `a subject in group "analysts"`},
		{&identity.Subject{Via: identity.ViaOIDC, Client: "svc"}, `a subject of client "svc"`},
		{&identity.Subject{Via: identity.ViaOIDC}, "a subject without claims"},
	} {
		if got := Describe(tc.s); got != tc.want {
			t.Errorf("Describe(%+v) = %q, want %q", tc.s, got, tc.want)
		}
	}
}
