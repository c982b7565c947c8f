package config_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// TestParsePolicies: the policy block decodes whole — subjects,
// globs, deny, the per-subject rate and a labelled per-tool rate — and
// host.stdio_subject with it.
func TestParsePolicies(t *testing.T) {
	cfg, err := config.Parse([]byte(`
host {
  stdio_subject = "alice"
}
policy "analysts" {
  subjects  = ["group:analysts", "email:alice@example.com"]
  tools     = ["github__search_*", "notes__*"]
  resources = ["notes://*"]
  prompts   = ["notes__summary"]
  deny      = ["*__delete_*"]
  rate {
    calls_per_minute = 120
  }
  rate "github__search_*" {
    calls_per_minute = 10
    burst            = 2
  }
}
policy "ops" {
  subjects = ["token", "local"]
  tools    = ["*"]
}
`), "policies.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host.StdioSubject != "alice" {
		t.Errorf("stdio_subject %q; want alice", cfg.Host.StdioSubject)
	}
	if len(cfg.Policies) != 2 {
		t.Fatalf("%d policies; want 2", len(cfg.Policies))
	}
	p := *cfg.Policies[0]
	want := config.Policy{
		Name:      "analysts",
		Subjects:  []string{"group:analysts", "email:alice@example.com"},
		Tools:     []string{"github__search_*", "notes__*"},
		Resources: []string{"notes://*"},
		Prompts:   []string{"notes__summary"},
		Deny:      []string{"*__delete_*"},
		Rate:      &config.Rate{CallsPerMinute: 120},
		ToolRates: []*config.Rate{{Match: "github__search_*", CallsPerMinute: 10, Burst: 2}},
	}
	p.DeclRange = want.DeclRange
	if !reflect.DeepEqual(p, want) {
		t.Errorf("policy %+v\nwant %+v", p, want)
	}
	if got := p.Rate.BurstOrDefault(); got != 120 {
		t.Errorf("burst of an unset burst %d; want calls_per_minute", got)
	}
	if cfg.Policies[1].Name != "ops" || cfg.Policies[1].Rate != nil {
		t.Errorf("second policy %+v", cfg.Policies[1])
	}
}

// TestValidatePoliciesInGo: a Config built in Go gets the same checks,
// with the policy named in the text.
func TestValidatePoliciesInGo(t *testing.T) {
	cfg := &config.Config{Policies: []*config.Policy{{
		Name: "p", Subjects: []string{"group:"}, Tools: []string{"[x"},
		ToolRates: []*config.Rate{{Match: "a__*", CallsPerMinute: -1}},
	}}}
	err := cfg.Validate()
	if err == nil {
		t.Fatal("Validate accepted a policy with a bad subject, glob and rate")
	}
	for _, want := range []string{`subjects in policy "p": "group:" names no group`, `tools in policy "p": "[x" is not a valid glob`, `calls_per_minute in a rate block of policy "p" is -1`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// TestParseSubject: every selector kind, and the suggestions for the
// usual slips.
func TestParseSubject(t *testing.T) {
	for _, tc := range []struct{ in, kind, value, err string }{
		{"*", "*", "", ""},
		{"token", "token", "", ""},
		{"local", "local", "", ""},
		{"anonymous", "anonymous", "", ""},
		{"sub:248289761001", "sub", "248289761001", ""},
		{"email:alice@example.com", "email", "alice@example.com", ""},
		{"group:a:b", "group", "a:b", ""},
		{"client:cli", "client", "cli", ""},
		{"tokn", "", "", `did you mean "token"?`},
		{"user:alice", "", "", `unknown kind "user"`},
		{"grp:x", "", "", `did you mean "group:x"?`},
		{"", "", "", "is not a subject"},
	} {
		kind, value, err := config.ParseSubject(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseSubject(%q) error %v; want one with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || kind != tc.kind || value != tc.value {
			t.Errorf("ParseSubject(%q) = %q, %q, %v; want %q, %q", tc.in, kind, value, err, tc.kind, tc.value)
		}
	}
}

// TestParsePolicyOperator: operator = true decodes; it defaults to false;
// a value that is not a bool is refused where it is written.
func TestParsePolicyOperator(t *testing.T) {
	cfg, err := config.Parse([]byte(`
policy "oncall" {
  subjects = ["group:oncall"]
  operator = true
}
policy "analysts" {
  subjects = ["group:analysts"]
  tools    = ["*"]
}
`), "operator.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Policies[0].Operator || cfg.Policies[1].Operator {
		t.Errorf("operator: %v, %v; want true, false", cfg.Policies[0].Operator, cfg.Policies[1].Operator)
	}
	_, err = config.Parse([]byte(`
policy "oncall" {
  subjects = ["group:oncall"]
  operator = "yes please"
}
`), "operator.hcl")
	if err == nil || !strings.Contains(err.Error(), "operator.hcl line 4") || !strings.Contains(err.Error(), "operator") {
		t.Errorf("operator = \"yes please\": %v; want an error at line 4 naming operator", err)
	}
}
