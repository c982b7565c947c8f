package audit_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/host/internal/audit"
)

func TestRedactJSON(t *testing.T) {
	secrets := []string{
		"hunter2", "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "sk-ant-abcdefghijklmnopqrstuvwxyz",
		"AKIAIOSFODNN7EXAMPLE", "abc.def.ghi-token-value", "xoxb-1234567890-abcdefghij",
	}
	in := `{"query":"find ghp_abcdefghijklmnopqrstuvwxyz0123456789 please","password":"hunter2",
	"nested":{"api_key":"sk-ant-abcdefghijklmnopqrstuvwxyz","list":["AKIAIOSFODNN7EXAMPLE",
	"Authorization: Bearer abc.def.ghi-token-value"]},"slack":"xoxb-1234567890-abcdefghij","n":3,"max_tokens":100}`
	out := string(audit.RedactJSON([]byte(in)))
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("%q survived: %s", s, out)
		}
	}
	for _, keep := range []string{`"query":"find [redacted] please"`, `"n":3`, `"max_tokens":100`} {
		if !strings.Contains(out, keep) {
			t.Errorf("%s lost: %s", keep, out)
		}
	}
	if got := string(audit.RedactJSON([]byte(`not json`))); got != `"[redacted]"` {
		t.Errorf("invalid JSON became %s", got)
	}
}

func TestRedactText(t *testing.T) {
	in := "server said: token=abc123&x=1 and -----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY----- done"
	out := audit.RedactText(in)
	if strings.Contains(out, "abc123") || strings.Contains(out, "MIIE") || !strings.HasSuffix(out, " done") {
		t.Errorf("RedactText: %q", out)
	}
}

// A key with a secret part anywhere in it, in any case, loses its whole
// value, an object included; counts of model tokens and look-alike keys
// keep theirs.
func TestRedactJSONSecretKeys(t *testing.T) {
	in := `{"authToken":"v1","X-Api-Key":"v2","SessionId":"v3","db_pwd":"v4","Cookie":"v5",
	"password":{"value":"v6","nested":{"deeper":"v7"}},"credentials":["v8","v9"],"bearer":"v10",
	"max_tokens":100,"total_tokens":7,"author":"Ada","keywords":["go"],"tokens":"v11"}`
	out := string(audit.RedactJSON([]byte(in)))
	for i := 1; i <= 11; i++ {
		if v := fmt.Sprintf(`"v%d"`, i); strings.Contains(out, v) {
			t.Errorf("%s survived: %s", v, out)
		}
	}
	for _, keep := range []string{`"max_tokens":100`, `"total_tokens":7`, `"author":"Ada"`, `"keywords":["go"]`, `"password":"[redacted]"`} {
		if !strings.Contains(out, keep) {
			t.Errorf("%s lost: %s", keep, out)
		}
	}
}

func TestRedactTextURLsAndMembers(t *testing.T) {
	for in, want := range map[string]string{
		"dial postgres://app:hunter2@db:5432/prod failed": "dial postgres://[redacted]@db:5432/prod failed",
		"https://u:p@ss@example.com/x":                    "https://[redacted]@example.com/x",
		`bad request {"authToken":"abc","n":1}`:           `bad request {"authToken":"[redacted]","n":1}`,
		"retry with sessionToken=abc&x=1":                 "retry with sessionToken=[redacted]&x=1",
		"see https://example.com/path@v2":                 "see https://example.com/path@v2",
	} {
		if got := audit.RedactText(in); got != want {
			t.Errorf("RedactText(%q) = %q, want %q", in, got, want)
		}
	}
}
