package config_test

import (
	"errors"
	"testing"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// FuzzParse checks that no input makes Parse panic, and that it returns
// either a config that passes Validate or a *DiagnosticsError with text.
func FuzzParse(f *testing.F) {
	f.Add([]byte(fullExample))
	f.Add([]byte(""))
	f.Add([]byte(`server "fs" { command = "npx" }`))
	f.Add([]byte("server \"web\" {\n  url = \"http://127.0.0.1:9000/mcp\"\n  transport = \"sse\"\n}\n"))
	f.Add([]byte("server \"p\" {\n  plugin \"unix\" {\n    command = \"./x\"\n    config = { a = [1, { b = null }] }\n  }\n}\n"))
	f.Add([]byte("host {\n  listen = \"127.0.0.1:0\"\n  auth { bearer_token = env(\"HOME\", \"x\") }\n}\n"))
	for _, tc := range errorCases {
		f.Add([]byte(tc.src))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		cfg, err := config.Parse(src, "fuzz/config.hcl")
		if err != nil {
			if cfg != nil {
				t.Errorf("Parse returned a config and an error")
			}
			var de *config.DiagnosticsError
			if !errors.As(err, &de) {
				t.Fatalf("error is %T, want *config.DiagnosticsError", err)
			}
			if len(de.Diags) == 0 || err.Error() == "" {
				t.Fatalf("error without diagnostics")
			}
			return
		}
		if cfg == nil {
			t.Fatal("Parse returned neither config nor error")
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("a parsed config fails Validate: %v", err)
		}
	})
}
