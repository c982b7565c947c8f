package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/host/cli"
)

// `import` turns the MCP client configurations people already have into
// config.hcl: stdio and HTTP servers, secrets as env() references named in
// a comment (never their values), and the result validates once those
// variables are set.
func TestImportRoundTripsThroughValidate(t *testing.T) {
	for _, tc := range []struct {
		name, json string
		vars       []string
	}{
		{"claude desktop", `{
  "mcpServers": {
    "github": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-github"],
      "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_abcdefghijklmnopqrstuvwxyz0123456789"}
    },
    "files": {"command": "/usr/local/bin/files-server", "args": ["--root", "${HOME}/docs"]}
  }
}`, []string{"GITHUB_GITHUB_PERSONAL_ACCESS_TOKEN"}},
		{".mcp.json", `{
  "mcpServers": {
    "remote": {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer s3cr3t-t0ken-value-abcdef123456"}},
    "legacy": {"type": "sse", "url": "https://old.example.com/sse"}
  }
}`, []string{"REMOTE_AUTHORIZATION"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			in := filepath.Join(dir, "client.json")
			if err := os.WriteFile(in, []byte(tc.json), 0o600); err != nil {
				t.Fatal(err)
			}
			code, out, errs := run("import", in)
			if code != cli.ExitOK {
				t.Fatalf("import: exit %d\n%s", code, errs)
			}
			for _, secret := range []string{"ghp_abcdefghij", "s3cr3t-t0ken"} {
				if strings.Contains(out, secret) {
					t.Errorf("the secret %q is in the HCL:\n%s", secret, out)
				}
			}
			for _, v := range tc.vars {
				if !strings.Contains(out, v) || !strings.Contains(errs, v) {
					t.Errorf("variable %s not named in the HCL and on stderr:\n%s\n%s", v, out, errs)
				}
				t.Setenv(v, "value-of-"+v)
			}
			cfg := filepath.Join(dir, "config.hcl")
			if err := os.WriteFile(cfg, []byte(out), 0o600); err != nil {
				t.Fatal(err)
			}
			if code, _, errs := run("validate", "-config", cfg); code != cli.ExitOK {
				t.Fatalf("the imported config does not validate:\n%s\n%s", out, errs)
			}
		})
	}
	if code, _, errs := run("import", "/nonexistent.json"); code == cli.ExitOK || !strings.Contains(errs, "nonexistent.json") {
		t.Errorf("import of a missing file: exit %d, %s", code, errs)
	}
}
