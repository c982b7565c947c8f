package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// TestOIDCTokenSettings: the settings of issue #36 decode; introspection
// without client credentials, both scope names at once and a clock_skew
// out of range are refused, naming what to do.
func TestOIDCTokenSettings(t *testing.T) {
	cfg, err := config.Parse([]byte(`host {
  max_sessions_per_subject = 7
  auth {
    oidc {
      issuer   = "https://idp.example.com"
      audience = "https://mcp.example.com/mcp"
      required_scopes  = ["mcp:tools"]
      scopes_supported = ["mcp:tools", "mcp:admin"]
      trust_unverified_email = true
      require_typ_at_jwt = true
      clock_skew = "30s"
      introspection_url = "https://idp.example.com/oauth/v2/introspect"
      client_id = "mcpvisor"
      client_secret = "s3cret"
    }
  }
}
`), testFilename)
	if err != nil {
		t.Fatal(err)
	}
	want := &config.OIDC{Issuer: "https://idp.example.com", Audience: "https://mcp.example.com/mcp", Scopes: []string{"mcp:tools"},
		ScopesSupported: []string{"mcp:tools", "mcp:admin"}, SubjectClaim: "sub", GroupsClaim: "groups",
		TrustUnverifiedEmail: true, RequireTypAtJWT: true, ClockSkew: 30 * time.Second,
		IntrospectionURL: "https://idp.example.com/oauth/v2/introspect", ClientID: "mcpvisor", ClientSecret: "s3cret"}
	if diff := cmp.Diff(want, cfg.Host.OIDC); diff != "" {
		t.Errorf("oidc block (-want +got):\n%s", diff)
	}
	if cfg.Host.MaxSessionsPerSubject != 7 {
		t.Errorf("max_sessions_per_subject = %d; want 7", cfg.Host.MaxSessionsPerSubject)
	}
	for _, tc := range []struct{ lines, want string }{
		{`introspection_url = "https://idp.example.com/introspect"`, "without client_id and client_secret"},
		{"scopes = [\"a\"]\n      required_scopes = [\"a\"]", "keep required_scopes only"},
		{`clock_skew = "2h"`, "between 0s and 1h"},
	} {
		_, err := config.Parse([]byte("host {\n  auth {\n    oidc {\n      issuer = \"https://idp.example.com\"\n      audience = \"https://mcp.example.com/mcp\"\n      "+tc.lines+"\n    }\n  }\n}\n"), testFilename)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error saying %q", tc.lines, err, tc.want)
		}
	}
	if _, err := config.Parse([]byte("host {\n  max_sessions_per_subject = 0\n}\n"), testFilename); err == nil || !strings.Contains(err.Error(), "max_sessions_per_subject") {
		t.Errorf("max_sessions_per_subject = 0: %v; want an error naming it", err)
	}
}
