package policy

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/identity"
)

// TestDenyFoldsNames: a deny holds whatever case, compatibility form or
// confusable letters the upstream spells the name with, and when only
// the upstream's own name (an alias) matches it.
func TestDenyFoldsNames(t *testing.T) {
	e := New([]*config.Policy{{Name: "p", Subjects: []string{"*"}, Tools: []string{"*"}, Deny: []string{"*__delete*", "weird__del_ete"}}}, "me", nil)
	who := &identity.Subject{Via: identity.ViaOIDC, ID: "u"}
	for _, tc := range []struct {
		name    string
		aliases []string
	}{
		{"weird__Delete", nil},
		{"weird__DELETE_all", nil},
		{"weird__d_lete", []string{"weird__d\u0435lete", "weird__d_lete"}}, // Cyrillic е
		{"weird__ｄｅｌｅｔｅ", nil},                                             // fullwidth
		{"weird__del_ete_6c9d4b77", []string{"weird__del/ete", "weird__del_ete"}},
	} {
		if d := e.Decide(who, Tool, tc.name, tc.aliases...); d.Allowed {
			t.Errorf("Decide(%q, aliases %q) allowed by %q; want a deny", tc.name, tc.aliases, d.Rule)
		}
		if e.Visible(who, Tool)(tc.name, tc.aliases...) {
			t.Errorf("%q is visible despite the deny", tc.name)
		}
	}
	for _, name := range []string{"weird__create", "weird__list"} {
		if d := e.Decide(who, Tool, name); !d.Allowed {
			t.Errorf("Decide(%q) = deny by %q; want allowed", name, d.Rule)
		}
	}
}

// TestUnverifiedEmail: email: matches only a verified address, or one of
// an issuer trusted for unverified ones.
func TestUnverifiedEmail(t *testing.T) {
	e := New([]*config.Policy{{Name: "ops", Subjects: []string{"email:carol@example.com"}, Tools: []string{"*"}, Operator: true}}, "me", nil)
	no, yes := false, true
	for _, tc := range []struct {
		s    *identity.Subject
		want bool
	}{
		{&identity.Subject{Via: identity.ViaOIDC, ID: "c", Email: "Carol@Example.COM", EmailVerified: &no}, false},
		{&identity.Subject{Via: identity.ViaOIDC, ID: "c", Email: "Carol@Example.COM"}, false},
		{&identity.Subject{Via: identity.ViaOIDC, ID: "c", Email: "Carol@Example.COM", EmailVerified: &yes}, true},
		{&identity.Subject{Via: identity.ViaOIDC, ID: "c", Email: "carol@example.com", EmailVerified: &no, EmailTrusted: true}, true},
	} {
		if got := e.Decide(tc.s, Tool, "x").Allowed; got != tc.want {
			t.Errorf("Decide(%+v) = %v; want %v", tc.s, got, tc.want)
		}
		if got := e.Operator(tc.s).Allowed; got != tc.want {
			t.Errorf("Operator(%+v) = %v; want %v", tc.s, got, tc.want)
		}
	}
}

// TestRateGlobOneBucket: a labelled rate counts a subject's calls to every
// name it matches in one bucket, and a subject's flood of names neither
// grows the buckets nor refills another subject's.
func TestRateGlobOneBucket(t *testing.T) {
	lim := NewLimiters(100)
	e := New([]*config.Policy{{Name: "p", Subjects: []string{"*"}, Resources: []string{"*"},
		ToolRates: []*config.Rate{{Match: "notes://*", CallsPerMinute: 1, Burst: 2}}}}, "me", lim)
	a := &identity.Subject{Via: identity.ViaOIDC, ID: "a"}
	b := &identity.Subject{Via: identity.ViaOIDC, ID: "b"}
	now := time.Unix(1000, 0)
	for i := range 2 {
		if l := e.Admit(b, Resource, fmt.Sprintf("notes://b/%d", i), now); l != nil {
			t.Fatalf("b's call %d limited: %+v", i, l)
		}
	}
	if l := e.Admit(b, Resource, "notes://b/other", now); l == nil {
		t.Fatal("b's third URI under notes://* was admitted: the glob has a bucket per URI")
	}
	for i := range 10050 {
		e.Admit(a, Resource, fmt.Sprintf("notes://a/%d", i), now)
	}
	if n := lim.Len(); n != 2 {
		t.Errorf("%d buckets after a's 10,050 URIs; want 2 (one per subject and rule)", n)
	}
	if l := e.Admit(b, Resource, "notes://b/again", now); l == nil {
		t.Error("a's flood of URIs refilled b's bucket")
	}
}
