package audit_test

import (
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
