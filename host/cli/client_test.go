package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// runIn runs the binary with HOME=home (and no XDG_CONFIG_HOME).
func runIn(t *testing.T, home string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(mcpvisorBin, args...)
	cmd.Dir = home
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") && !strings.HasPrefix(kv, "APPDATA=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "HOME="+home)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if s := errb.String(); strings.Contains(s, "goroutine ") || strings.Contains(s, "panic") {
		t.Errorf("stack trace shown to the user:\n%s", s)
	}
	return code, out.String(), errb.String()
}

// userConfigDir is os.UserConfigDir for HOME=home.
func userConfigDir(home string) string {
	if runtime.GOOS == "darwin" {
		return filepath.Join(home, "Library", "Application Support")
	}
	return filepath.Join(home, ".config")
}

type clientCase struct {
	name string
	// file is the user-level file under home; key holds the servers.
	file func(home string) string
	key  string
	// typed entries carry "type": "stdio".
	typed bool
	// other is a real-looking file with other servers and keys mcpvisor
	// knows nothing of.
	other string
}

var clientCases = []clientCase{
	{"claude-desktop", func(h string) string { return filepath.Join(userConfigDir(h), "Claude", "claude_desktop_config.json") }, "mcpServers", false,
		`{
  "globalShortcut": "Alt+Space",
  "mcpServers": {
    "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"], "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_x"}},
    "files": {"command": "/usr/local/bin/files", "args": ["--root", "/home/me/docs"], "unknownKey": {"deep": [1, 2.50, "\u00e9"]}}
  },
  "zzz": null
}
`},
	{"claude-code", func(h string) string { return filepath.Join(h, ".claude.json") }, "mcpServers", true,
		`{"numStartups":42,"projects":{"/home/me/src":{"allowedTools":[],"history":[{"display":"hi"}]}},"mcpServers":{"remote":{"type":"http","url":"https://mcp.example.com/mcp"}},"userID":"abc"}`},
	{"cursor", func(h string) string { return filepath.Join(h, ".cursor", "mcp.json") }, "mcpServers", false,
		`{"mcpServers": {"notes": {"command": "node", "args": ["notes.js"]}}}`},
	{"vscode", func(h string) string { return filepath.Join(userConfigDir(h), "Code", "User", "mcp.json") }, "servers", true,
		`{
	"inputs": [{"type": "promptString", "id": "key", "description": "API key", "password": true}],
	"servers": {"fetch": {"type": "stdio", "command": "uvx", "args": ["mcp-server-fetch"]}}
}`},
	{"windsurf", func(h string) string { return filepath.Join(h, ".codeium", "windsurf", "mcp_config.json") }, "mcpServers", false,
		`{"mcpServers": {"brave": {"command": "npx", "args": ["-y", "brave"], "env": {"BRAVE_API_KEY": "k"}}}}`},
}

// `client install` adds an entry that runs this very binary on the
// absolute config path, keeps every other entry and key (and their order),
// keeps the file's mode, backs the old file up; -print writes nothing;
// `client uninstall` gives back the rest of the file.
func TestClientInstallUninstall(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the test HOME layout is Unix's")
	}
	bin := mcpvisorBin
	for _, tc := range clientCases {
		t.Run(tc.name, func(t *testing.T) {
			home := t.TempDir()
			cfg := filepath.Join(home, "mcp", "config.hcl")
			if err := os.MkdirAll(filepath.Dir(cfg), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(cfg, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			path := tc.file(home)
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			orig := []byte(tc.other)
			if err := os.WriteFile(path, orig, 0o640); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, 0o640); err != nil {
				t.Fatal(err)
			}

			// -print: the merged file on stdout, nothing written.
			code, out, errs := runIn(t, home, "client", "install", "-print", "-config", "mcp/config.hcl", tc.name)
			if code != 0 {
				t.Fatalf("install -print: exit %d\n%s", code, errs)
			}
			checkInstalled(t, tc, []byte(out), orig, "mcpvisor", bin, cfg)
			assertFile(t, path, orig)
			if _, err := os.Stat(path + ".bak"); err == nil {
				t.Errorf("-print wrote a backup")
			}

			// install, with a relative -config from the home directory.
			code, _, errs = runIn(t, home, "client", "install", "-config", "mcp/config.hcl", tc.name)
			if code != 0 {
				t.Fatalf("install: exit %d\n%s", code, errs)
			}
			if !strings.Contains(errs, path+".bak") {
				t.Errorf("install does not say where the backup is:\n%s", errs)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			checkInstalled(t, tc, got, orig, "mcpvisor", bin, cfg)
			assertFile(t, path+".bak", orig)
			for _, p := range []string{path, path + ".bak"} {
				if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o640 {
					t.Errorf("%s: mode %v (err %v), want the original 0640", p, st.Mode().Perm(), err)
				}
			}

			// Installing again replaces mcpvisor's entry, and a second
			// name adds a second one.
			if code, _, errs := runIn(t, home, "client", "install", "-config", cfg, tc.name); code != 0 {
				t.Fatalf("install again: exit %d\n%s", code, errs)
			}
			if code, _, errs := runIn(t, home, "client", "install", "-config", cfg, "-name", "work", tc.name); code != 0 {
				t.Fatalf("install -name work: exit %d\n%s", code, errs)
			}
			got, _ = os.ReadFile(path)
			checkInstalled(t, tc, got, orig, "work", bin, cfg)
			if n := len(serversOf(t, got, tc.key)); n != len(serversOf(t, orig, tc.key))+2 {
				t.Errorf("%d servers after two installs, want the original ones plus 2:\n%s", n, got)
			}

			// uninstall removes exactly mcpvisor's entries.
			for _, name := range []string{"mcpvisor", "work"} {
				if code, _, errs := runIn(t, home, "client", "uninstall", "-name", name, tc.name); code != 0 {
					t.Fatalf("uninstall %s: exit %d\n%s", name, code, errs)
				}
			}
			// Install and uninstall edit only mcpvisor's entries: the
			// original comes back byte for byte.
			assertFile(t, path, orig)
		})
	}
}

// checkInstalled checks that got is orig plus the entry name, which runs
// bin on cfg, with every other key and entry as it was and in its order.
func checkInstalled(t *testing.T, tc clientCase, got, orig []byte, name, bin, cfg string) {
	t.Helper()
	servers := serversOf(t, got, tc.key)
	var entry map[string]any
	if err := json.Unmarshal(servers[name], &entry); err != nil {
		t.Fatalf("no entry %q under %q: %v\n%s", name, tc.key, err, got)
	}
	want := map[string]any{"command": bin, "args": []any{"run", "--stdio", "-config", cfg}}
	if tc.typed {
		want["type"] = "stdio"
	}
	if !reflect.DeepEqual(entry, want) {
		t.Errorf("entry %q = %v, want %v", name, entry, want)
	}
	for k, v := range serversOf(t, orig, tc.key) {
		if !reflect.DeepEqual(decode(t, servers[k]), decode(t, v)) {
			t.Errorf("server %q changed: %s, was %s", k, servers[k], v)
		}
	}
	gotTop, origTop := decode(t, got).(map[string]any), decode(t, orig).(map[string]any)
	for k, v := range origTop {
		if k != tc.key && !reflect.DeepEqual(gotTop[k], v) {
			t.Errorf("key %q changed: %v, was %v", k, gotTop[k], v)
		}
	}
	if k := topKeys(t, got); !reflect.DeepEqual(k, topKeys(t, orig)) {
		t.Errorf("top-level key order %v, want %v", k, topKeys(t, orig))
	}
	// Every byte before the servers key is as it was (literals such as
	// 2.50, escapes such as \u00e9, the indentation).
	if i := bytes.Index(orig, []byte(`"`+tc.key+`"`)); i < 0 || !bytes.HasPrefix(got, orig[:i]) {
		t.Errorf("the bytes before %q changed:\n%s\nwas:\n%s", tc.key, got, orig)
	}
}

func decode(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	return v
}

func serversOf(t *testing.T, b []byte, key string) map[string]json.RawMessage {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	var s map[string]json.RawMessage
	if raw, ok := top[key]; ok {
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func topKeys(t *testing.T, b []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.Token()
	var keys []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

func assertFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s changed:\n%s\nwas:\n%s", path, got, want)
	}
}

// A file that is not valid JSON (comments, a trailing comma, half a file)
// is refused and left byte for byte as it was, with no backup; so is an
// entry of mcpvisor's name that runs something else.
func TestClientInstallRefuses(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the test HOME layout is Unix's")
	}
	home := t.TempDir()
	cfg := filepath.Join(home, "config.hcl")
	if err := os.WriteFile(cfg, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(home, ".cursor", "mcp.json")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, content, inStderr string }{
		{"comment", "{\n  // my servers\n  \"mcpServers\": {}\n}\n", "line 2"},
		{"trailing comma", `{"mcpServers": {"a": {"command": "x"},}}`, "not a JSON object"},
		{"truncated", `{"mcpServers": {"a": {"comm`, "not a JSON object"},
		{"array", `[1, 2]`, "not a JSON object"},
		{"servers not an object", `{"mcpServers": ["a"]}`, "not an object of servers"},
		{"key case", `{"MCPServers": {}}`, `"MCPServers" is not "mcpServers"`},
		{"duplicate key", `{"mcpServers": {}, "mcpServers": {"a": {"command": "x"}}}`, `"mcpServers" appears twice`},
		{"duplicate server", `{"mcpServers": {"mcpvisor": {"command": "mcpvisor"}, "mcpvisor": {"command": "x"}}}`, `"mcpvisor" appears twice`},
		{"foreign entry", `{"mcpServers": {"mcpvisor": {"command": "/usr/bin/something-else"}}}`, "does not run mcpvisor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, sub := range []string{"install", "uninstall"} {
				code, _, errs := runIn(t, home, "client", sub, "-config", cfg, "cursor")
				if code != 1 {
					t.Errorf("%s: exit %d, want 1\n%s", sub, code, errs)
				}
				if sub == "install" && !strings.Contains(errs, tc.inStderr) {
					t.Errorf("%s: stderr lacks %q:\n%s", sub, tc.inStderr, errs)
				}
				if sub == "install" && !strings.Contains(errs, path) {
					t.Errorf("%s: the error does not name the file:\n%s", sub, errs)
				}
				assertFile(t, path, []byte(tc.content))
				if _, err := os.Stat(path + ".bak"); err == nil {
					t.Errorf("%s: a refused file was backed up", sub)
				}
			}
		})
	}
	// A missing configuration is refused before anything is written.
	os.Remove(path)
	code, _, errs := runIn(t, home, "client", "install", "-config", filepath.Join(home, "nope.hcl"), "cursor")
	if code != 1 || !strings.Contains(errs, "nope.hcl") {
		t.Errorf("missing config: exit %d\n%s", code, errs)
	}
	if _, err := os.Stat(path); err == nil {
		t.Errorf("a file was written for a missing configuration")
	}
}

// -project writes the project's file (created when missing, mode 0600),
// and the entry written there really starts mcpvisor over stdio.
func TestClientInstallProjectRuns(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the test HOME layout is Unix's")
	}
	home := t.TempDir()
	proj := filepath.Join(home, "src", "app")
	if err := os.MkdirAll(proj, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(proj, "mcpvisor.hcl")
	if err := os.WriteFile(cfg, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, rel := range map[string]string{"claude-code": ".mcp.json", "cursor": ".cursor/mcp.json", "vscode": ".vscode/mcp.json"} {
		code, _, errs := runIn(t, home, "client", "install", "-project", proj, "-config", cfg, name)
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s", name, code, errs)
		}
		p := filepath.Join(proj, rel)
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %s not written with mode 0600: %v", name, p, err)
		}
	}
	if code, _, errs := runIn(t, home, "client", "install", "-project", proj, "-config", cfg, "windsurf"); code != 2 || !strings.Contains(errs, "no project-level file") {
		t.Errorf("windsurf -project: exit %d\n%s", code, errs)
	}

	b, err := os.ReadFile(filepath.Join(proj, ".mcp.json"))
	if err != nil {
		t.Fatal(err)
	}
	var entry struct {
		Command string
		Args    []string
	}
	if err := json.Unmarshal(serversOf(t, b, "mcpServers")["mcpvisor"], &entry); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.Command(entry.Command, entry.Args...)
	cmd.Dir = t.TempDir() // a client starts it wherever it likes
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("the installed entry does not start mcpvisor: %v", err)
	}
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Errorf("tools/list: %v", err)
	}
	cs.Close()
}

// Usage errors say what is wrong and what was meant, and write nothing.
func TestClientUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		inStderr string
	}{
		{[]string{"client"}, "client install|uninstall"},
		{[]string{"client", "instal", "cursor"}, `did you mean "install"?`},
		{[]string{"client", "install", "cursr"}, `did you mean "cursor"?`},
		{[]string{"client", "install"}, "missing argument 1 (CLIENT)"},
		{[]string{"client", "install", "-name", "", "cursor"}, "-name must be a non-empty name"},
		{[]string{"client", "install", "-project", "/nonexistent-dir", "cursor"}, "-project /nonexistent-dir is not a directory"},
		{[]string{"client", "install", "-project", ".", "-file", "x.json", "cursor"}, "-file and -project exclude each other"},
	} {
		code, _, errs := run(tc.args...)
		if code != 2 || !strings.Contains(errs, tc.inStderr) {
			t.Errorf("%q: exit %d, want 2 with %q:\n%s", tc.args, code, tc.inStderr, errs)
		}
	}
}

// A client file that is a symlink (a dotfiles checkout) stays a symlink:
// the file it points at is edited, with its mode.
func TestClientInstallFollowsSymlink(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("symlinks need privileges on Windows")
	}
	home := t.TempDir()
	cfg := filepath.Join(home, "config.hcl")
	if err := os.WriteFile(cfg, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(home, "dotfiles", "windsurf.json")
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		t.Fatal(err)
	}
	orig := []byte("{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"a\"}\n  }\n}\n")
	if err := os.WriteFile(target, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(home, ".codeium", "windsurf", "mcp_config.json")
	if err := os.MkdirAll(filepath.Dir(link), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runIn(t, home, "client", "install", "-config", cfg, "windsurf"); code != 0 {
		t.Fatalf("install: exit %d\n%s", code, errs)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("%s is no longer a symlink: %v", link, err)
	}
	got, err := os.ReadFile(target)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := serversOf(t, got, "mcpServers")["mcpvisor"]; !ok {
		t.Errorf("the symlink's target lacks the entry:\n%s", got)
	}
	assertFile(t, target+".bak", orig)
}
