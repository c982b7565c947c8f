package cli_test

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/host/cli"
	"github.com/mcpvisor/mcpvisor/host/config"
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
}`, []string{"GITHUB_PERSONAL_ACCESS_TOKEN"}},
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

// runBin runs the real mcpvisor binary with env added to the test's.
func runBin(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(mcpvisorBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("running mcpvisor %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// A hostile client configuration cannot make `import` write HCL that runs
// something else than the source client would: a case variant of a key is
// refused (Claude Desktop ignores "Command" and runs "command"), and a
// newline in the source path or "${", "%{", quotes and control characters
// in names and values stay inside their strings and comments. The HCL
// validates with exactly the intended servers, and every value reads back
// as it was in the JSON.
func TestImportHostileSources(t *testing.T) {
	dir := t.TempDir()
	write := func(name, json string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(json), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	for _, tc := range []struct{ name, json, inErr string }{
		{"key case variant", `{"mcpServers": {"a": {"command": "/bin/echo", "Command": "/tmp/evil"}}}`, `server "a": key "Command" is not "command"`},
		{"only a case variant", `{"mcpServers": {"a": {"COMMAND": "/tmp/evil"}}}`, `server "a": key "COMMAND" is not "command"`},
		{"top-level case variant", `{"MCPServers": {"a": {"command": "/tmp/evil"}}}`, `the key "MCPServers" is not "mcpServers"`},
		{"bad JSON", "{\"mcpServers\": {\n  \"a\": {\"command\": \"x\",}\n}}", "not a JSON MCP client configuration: line 2, column 24: invalid character '}'"},
		{"env case variant", `{"mcpServers": {"a": {"command": "/bin/echo", "Env": {"LD_PRELOAD": "/tmp/evil.so"}}}}`, `key "Env" is not "env"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runBin(t, nil, "import", write(tc.name+".json", tc.json))
			if code != cli.ExitUsage || !strings.Contains(errs, tc.inErr) {
				t.Errorf("import: exit %d, want %d and %q on stderr\nstdout: %s\nstderr: %s", code, cli.ExitUsage, tc.inErr, out, errs)
			}
			if strings.Contains(out, "evil") {
				t.Errorf("the case variant's value reached the HCL:\n%s", out)
			}
		})
	}

	t.Run("injection", func(t *testing.T) {
		args := []string{"${HOME}/x", "%{ if true }y%{ endif }", "a\"b\nserver \"evil\" {\n  command = \"/tmp/evil\"\n}\n", "$${x}", "\x1b]0;title\x07", `\`}
		src := map[string]any{"mcpServers": map[string]any{
			"files\nserver \"evil2\" {": map[string]any{
				"command": "/bin/echo",
				"args":    args,
				"env":     map[string]string{"PLAIN": "${env(\"HOME\")}", "ODD\"} NAME": "v\n}"},
			},
		}}
		raw, _ := json.Marshal(src)
		// The newline in the directory name would end a comment that
		// quoted the path as it is.
		in := write("x\nserver \"evil3\" {\n  command = \"/tmp/evil\"\n}\n#/client.json", string(raw))
		code, out, errs := runBin(t, nil, "import", in)
		if code != cli.ExitOK {
			t.Fatalf("import: exit %d\n%s", code, errs)
		}
		cfgPath := filepath.Join(dir, "config.hcl")
		if err := os.WriteFile(cfgPath, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
		if code, vout, verrs := runBin(t, nil, "validate", "-config", cfgPath); code != cli.ExitOK || !strings.Contains(vout, "valid (1 server(s))") {
			t.Fatalf("validate: exit %d, %s%s\nHCL:\n%s", code, vout, verrs, out)
		}
		cfg, err := config.Load(cfgPath)
		if err != nil {
			t.Fatal(err)
		}
		s := cfg.Servers[0]
		if s.Name != "files-server-evil2" || s.Command != "/bin/echo" {
			t.Errorf("server %q runs %q, want files-server-evil2 running /bin/echo", s.Name, s.Command)
		}
		if !slices.Equal(s.Args, args) {
			t.Errorf("args read back as %q, want %q", s.Args, args)
		}
		if want := map[string]string{"PLAIN": "${env(\"HOME\")}", "ODD\"} NAME": "v\n}"}; !maps.Equal(s.Env, want) {
			t.Errorf("env read back as %q, want %q", s.Env, want)
		}
		if !strings.Contains(errs, `server "files\nserver \"evil2\" {" is named "files-server-evil2"`) {
			t.Errorf("the rename is not reported on stderr:\n%s", errs)
		}
	})
}

// `import` keeps the source's environment variable names (a server prefix
// only where two servers need one name with different values), imports
// "disabled": true as enabled = false, and says which servers it renamed.
// The disabled server is validated but not started.
func TestImportNamesAndDisabled(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "claude_desktop_config.json")
	if err := os.WriteFile(in, []byte(`{"mcpServers": {
  "github": {"command": "`+echoBin+`", "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "API_KEY": "same-key-value-0123456789abcdef"}},
  "my server": {"command": "`+echoBin+`", "env": {"API_KEY": "same-key-value-0123456789abcdef"}},
  "work": {"command": "`+echoBin+`", "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_ZYXWVUTSRQPONMLKJIHGFEDCBA9876543210"}},
  "old": {"command": "`+echoBin+`", "disabled": true}
}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runBin(t, nil, "import", in)
	if code != cli.ExitOK {
		t.Fatalf("import: exit %d\n%s", code, errs)
	}
	for _, want := range []string{`env("API_KEY")`, `env("GITHUB_GITHUB_PERSONAL_ACCESS_TOKEN")`, `env("WORK_GITHUB_PERSONAL_ACCESS_TOKEN")`, "enabled = false"} {
		if !strings.Contains(out, want) {
			t.Errorf("the HCL lacks %s:\n%s", want, out)
		}
	}
	for _, want := range []string{`server "my server" is named "my-server"`, `server "old" is disabled`} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	cfgPath := filepath.Join(dir, "config.hcl")
	if err := os.WriteFile(cfgPath, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"API_KEY=k", "GITHUB_GITHUB_PERSONAL_ACCESS_TOKEN=a", "WORK_GITHUB_PERSONAL_ACCESS_TOKEN=b"}
	if code, vout, verrs := runBin(t, env, "validate", "-config", cfgPath); code != cli.ExitOK || !strings.Contains(vout, "valid (4 server(s))") {
		t.Fatalf("validate: exit %d, %s%s\nHCL:\n%s", code, vout, verrs, out)
	}
	// `tools` starts the enabled servers only: the disabled one is not
	// listed, and it says so on no line as a failure.
	code, tout, terrs := runBin(t, env, "tools", "-config", cfgPath)
	if code != cli.ExitOK {
		t.Fatalf("tools: exit %d\n%s", code, terrs)
	}
	if strings.Contains(tout, "old__") || !strings.Contains(tout, "my-server__echo") {
		t.Errorf("tools of the imported config:\n%s", tout)
	}
}

// `import` of a client's file after `client install` skips mcpvisor's own
// entry, saying so, rather than making mcpvisor a server of itself; a
// file with nothing else is refused, naming why.
func TestImportSkipsMcpvisorsOwnEntry(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the test HOME layout is Unix's")
	}
	home := t.TempDir()
	cfg := filepath.Join(home, "config.hcl")
	if err := os.WriteFile(cfg, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(home, ".claude.json")
	if err := os.WriteFile(path, []byte(`{"mcpServers": {"files": {"command": "`+echoBin+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runIn(t, home, "client", "install", "-config", "config.hcl", "claude-code"); code != cli.ExitOK {
		t.Fatalf("client install: exit %d\n%s", code, errs)
	}
	code, out, errs := runBin(t, nil, "import", path)
	if code != cli.ExitOK {
		t.Fatalf("import: exit %d\n%s", code, errs)
	}
	if !strings.Contains(out, `server "files"`) || strings.Contains(out, `server "mcpvisor"`) {
		t.Errorf("import after client install:\n%s", out)
	}
	if !strings.Contains(errs, `server "mcpvisor" runs mcpvisor itself`) {
		t.Errorf("stderr does not say the entry was skipped:\n%s", errs)
	}

	only := filepath.Join(home, "only.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc["mcpServers"], "files")
	b, _ = json.Marshal(map[string]any{"mcpServers": doc["mcpServers"]})
	if err := os.WriteFile(only, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runBin(t, nil, "import", only); code != cli.ExitUsage || !strings.Contains(errs, "only mcpvisor's own entry") {
		t.Errorf("import of mcpvisor's entry alone: exit %d\n%s", code, errs)
	}
}
