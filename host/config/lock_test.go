package config_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// lockDir is a configuration directory with plugin binaries: its config
// file has two plugin servers (one binary below the directory, one outside
// it) and a stdio server.
type lockDir struct {
	dir, config, lock string
	inside, outside   string // the two binaries
}

func newLockDir(t *testing.T) *lockDir {
	t.Helper()
	d := &lockDir{dir: t.TempDir()}
	d.config = filepath.Join(d.dir, "config.hcl")
	d.lock = filepath.Join(d.dir, config.LockFileName)
	d.inside = filepath.Join(d.dir, "bin", "mcpvisor-transport-unix")
	d.outside = filepath.Join(t.TempDir(), "mcpvisor-transport-ws")
	writeFile(t, d.inside, "unix plugin, build 1")
	writeFile(t, d.outside, "websocket plugin, build 1")
	writeFile(t, d.config, `# the servers
server "zeta-ws" {
  plugin "websocket" {
    command = "`+d.outside+`"
    config  = { url = "ws://127.0.0.1:1/ws" }
  }
}

server "alpha-unix" {
  plugin "unix" {
    command = "./bin/mcpvisor-transport-unix"
  }
}

server "echo" {
  command = "echo"
}
`)
	return d
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
}

func hashOf(content string) string {
	sum := sha256.Sum256([]byte(content))
	return hex.EncodeToString(sum[:])
}

func load(t *testing.T, path string) *config.Config {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return cfg
}

func lock(t *testing.T, path string) *config.Lock {
	t.Helper()
	l, rep := load(t, path).LockPlugins()
	if rep.HasErrors() || l == nil {
		t.Fatalf("LockPlugins: %s", reportText(t, rep))
	}
	if err := l.Write(); err != nil {
		t.Fatal(err)
	}
	return l
}

func reportText(t *testing.T, r *config.Report) string {
	t.Helper()
	var b strings.Builder
	if err := r.WriteDiagnostics(&b, 0, false); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestLockRoundTrip: LockPlugins writes a lock file in stable order with a
// generated-file header; Load reads it back into every plugin block; the
// check finds nothing; locking again rewrites the same bytes.
func TestLockRoundTrip(t *testing.T) {
	d := newLockDir(t)
	lock(t, d.config)

	got, err := os.ReadFile(d.lock)
	if err != nil {
		t.Fatal(err)
	}
	want := `# This file is maintained automatically by "mcpvisor plugins lock".
# It records the SHA-256 of each plugin binary the configuration beside it
# runs; mcpvisor refuses to start a plugin whose binary has another hash.
# Commit it together with the configuration. After a deliberate upgrade or
# rebuild of a plugin, run "mcpvisor plugins lock" again.

server "alpha-unix" {
  plugin "unix" {
    path   = "bin/mcpvisor-transport-unix"
    sha256 = "` + hashOf("unix plugin, build 1") + `"
  }
}

server "zeta-ws" {
  plugin "websocket" {
    path   = "` + d.outside + `"
    sha256 = "` + hashOf("websocket plugin, build 1") + `"
  }
}
`
	if string(got) != want {
		t.Errorf("lock file:\n%s\nwant:\n%s", got, want)
	}
	if fi, err := os.Stat(d.lock); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("lock file mode = %v, %v; want 0644 (it is meant to be committed)", fi.Mode(), err)
	}

	cfg := load(t, d.config)
	if cfg.Lock == nil || len(cfg.Lock.Plugins) != 2 {
		t.Fatalf("Lock = %+v, want 2 entries", cfg.Lock)
	}
	ws, unix := cfg.Servers[0].Plugin, cfg.Servers[1].Plugin
	for _, c := range []struct {
		p          *config.Plugin
		path, want string
	}{
		{unix, d.inside, hashOf("unix plugin, build 1")},
		{ws, d.outside, hashOf("websocket plugin, build 1")},
	} {
		if c.p.Lock == nil || c.p.Lock.SHA256 != c.want || c.p.Lock.Path != c.path || c.p.Lock.File != d.lock || c.p.Lock.ConfigFile != d.config {
			t.Errorf("plugin %q: Lock = %+v, want sha256 %s for %s in %s", c.p.Name, c.p.Lock, c.want, c.path, d.lock)
		}
		if sum := c.p.WantSHA256(); sum != c.want {
			t.Errorf("plugin %q: WantSHA256 = %s", c.p.Name, sum)
		}
	}
	if rep := cfg.CheckPlugins(); len(rep.Diags) != 0 {
		t.Errorf("CheckPlugins of a fresh lock:\n%s", reportText(t, rep))
	}

	lock(t, d.config)
	again, _ := os.ReadFile(d.lock)
	if string(again) != string(got) {
		t.Errorf("relocking an unchanged configuration changed the file:\n%s", again)
	}
}

// TestCheckPlugins covers every finding of the check a validate runs.
func TestCheckPlugins(t *testing.T) {
	t.Run("unlocked", func(t *testing.T) {
		d := newLockDir(t)
		rep := load(t, d.config).CheckPlugins()
		text := reportText(t, rep)
		if rep.HasErrors() || len(rep.Diags) != 2 {
			t.Fatalf("want two warnings:\n%s", text)
		}
		for _, want := range []string{
			"Warning: Plugin not locked",
			`in server "alpha-unix"`,
			"sha256 " + hashOf("unix plugin, build 1"),
			"Run `mcpvisor plugins lock -config " + d.config + "`",
		} {
			if !strings.Contains(text, want) {
				t.Errorf("report lacks %q:\n%s", want, text)
			}
		}
	})

	t.Run("rebuilt binary", func(t *testing.T) {
		d := newLockDir(t)
		lock(t, d.config)
		writeFile(t, d.inside, "unix plugin, build 2")
		rep := load(t, d.config).CheckPlugins()
		text := reportText(t, rep)
		if !rep.HasErrors() || len(rep.Diags) != 1 {
			t.Fatalf("want one error:\n%s", text)
		}
		for _, want := range []string{
			"Error: Plugin binary does not match the lock file",
			`on ` + d.config + ` line 9, in server "alpha-unix":`,
			d.inside + " has SHA-256 " + hashOf("unix plugin, build 2"),
			"but " + d.lock + " records " + hashOf("unix plugin, build 1"),
			"refuses to start it",
			"run `mcpvisor plugins lock -config " + d.config + "`",
		} {
			if !strings.Contains(text, want) {
				t.Errorf("report lacks %q:\n%s", want, text)
			}
		}
	})

	t.Run("sha256 wins over the lock", func(t *testing.T) {
		d := newLockDir(t)
		lock(t, d.config)
		src, _ := os.ReadFile(d.config)
		pinned := strings.Replace(string(src), `command = "./bin/mcpvisor-transport-unix"`,
			`command = "./bin/mcpvisor-transport-unix"
    sha256  = "`+strings.ToUpper(hashOf("unix plugin, build 0"))+`"`, 1)
		writeFile(t, d.config, pinned)
		rep := load(t, d.config).CheckPlugins()
		text := reportText(t, rep)
		if !strings.Contains(text, "Error: Plugin binary does not match sha256") ||
			!strings.Contains(text, "but the server block's sha256 is "+hashOf("unix plugin, build 0")) ||
			!strings.Contains(text, `set sha256 = "`+hashOf("unix plugin, build 1")+`"`) {
			t.Errorf("report:\n%s", text)
		}

		// A sha256 the binary matches wins, and the lock is only stale.
		writeFile(t, d.inside, "unix plugin, build 0")
		rep = load(t, d.config).CheckPlugins()
		text = reportText(t, rep)
		if rep.HasErrors() || !strings.Contains(text, "Warning: Lock file disagrees with sha256") {
			t.Errorf("report:\n%s", text)
		}
	})

	t.Run("stale entry and missing binary", func(t *testing.T) {
		d := newLockDir(t)
		lock(t, d.config)
		src, _ := os.ReadFile(d.config)
		writeFile(t, d.config, strings.Replace(string(src), `server "alpha-unix"`, `server "beta-unix"`, 1))
		os.Remove(d.outside)
		rep := load(t, d.config).CheckPlugins()
		text := reportText(t, rep)
		if rep.HasErrors() {
			t.Errorf("a stale entry or a missing binary is not an error:\n%s", text)
		}
		for _, want := range []string{
			"Warning: Cannot check plugin binary",
			d.outside + " does not exist",
			"Warning: Plugin not locked", // beta-unix
			"Warning: Stale lock file entry",
			"on " + d.lock + " line 7",
			`plugin "unix" of server "alpha-unix"`,
		} {
			if !strings.Contains(text, want) {
				t.Errorf("report lacks %q:\n%s", want, text)
			}
		}
	})
}

// TestLockPluginsErrors: a binary that cannot be read, or that differs
// from its block's sha256, is not locked, and nothing is written.
func TestLockPluginsErrors(t *testing.T) {
	d := newLockDir(t)
	os.Remove(d.inside)
	l, rep := load(t, d.config).LockPlugins()
	text := reportText(t, rep)
	if l != nil || !rep.HasErrors() || !strings.Contains(text, "Error: Cannot read plugin binary") || !strings.Contains(text, d.inside+" does not exist") {
		t.Errorf("missing binary: lock %v, report:\n%s", l, text)
	}

	writeFile(t, d.inside, "unix plugin, build 1")
	src, _ := os.ReadFile(d.config)
	writeFile(t, d.config, strings.Replace(string(src), `command = "./bin/mcpvisor-transport-unix"`,
		`command = "./bin/mcpvisor-transport-unix"
    sha256  = "`+hashOf("something else")+`"`, 1))
	l, rep = load(t, d.config).LockPlugins()
	text = reportText(t, rep)
	if l != nil || !strings.Contains(text, "Error: Plugin binary does not match sha256") || !strings.Contains(text, "sha256 wins over the lock file") {
		t.Errorf("sha256 conflict: lock %v, report:\n%s", l, text)
	}
	if _, err := os.Stat(d.lock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a lock file was written: %v", err)
	}

	if _, rep := (&config.Config{}).LockPlugins(); !strings.Contains(reportText(t, rep), "No configuration file") {
		t.Errorf("a Config built in Go has no place for a lock file")
	}
}

// lockErrorCases are malformed lock files; each one's diagnostics are
// testdata/lock_<name>.golden.
var lockErrorCases = []struct {
	name string
	src  string
	want string
}{
	{"syntax_error", "server \"a\" {\n  plugin \"unix\" {\n", "Unclosed configuration block"},
	{"unknown_attribute", "server \"a\" {\n  plugin \"unix\" {\n    path   = \"bin/a\"\n    sha256 = \"" + strings.Repeat("ab", 32) + "\"\n    sha = \"x\"\n  }\n}\n", `Unsupported argument`},
	{"sha256_invalid", "server \"a\" {\n  plugin \"unix\" {\n    path   = \"bin/a\"\n    sha256 = \"abc\"\n  }\n}\n", "64 hexadecimal digits"},
	{"missing_sha256", "server \"a\" {\n  plugin \"unix\" {\n    path = \"bin/a\"\n  }\n}\n", `The entry for server "a" has no sha256`},
	{"no_plugin_block", "server \"a\" {\n}\n", "has no plugin block"},
	{"duplicate_entry", "server \"a\" {\n  plugin \"unix\" {\n    path   = \"bin/a\"\n    sha256 = \"" + strings.Repeat("ab", 32) + "\"\n  }\n}\nserver \"a\" {\n  plugin \"unix\" {\n    path   = \"bin/a\"\n    sha256 = \"" + strings.Repeat("ab", 32) + "\"\n  }\n}\n", "two entries for server"},
	{"expression", "server \"a\" {\n  plugin \"unix\" {\n    path   = env(\"HOME\")\n    sha256 = \"" + strings.Repeat("ab", 32) + "\"\n  }\n}\n", "Function calls not allowed"},
}

// TestLoadLockErrors: a malformed lock file makes Load fail (a garbled
// lock must not silently turn the checks off), pointing into the lock file
// and saying how to get a good one.
func TestLoadLockErrors(t *testing.T) {
	for _, tc := range lockErrorCases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			writeFile(t, "config.hcl", "server \"a\" {\n  plugin \"unix\" {\n    command = \"bin/a\"\n  }\n}\n")
			writeFile(t, config.LockFileName, tc.src)
			cfg, err := config.Load("config.hcl")
			if err == nil {
				t.Fatalf("Load succeeded: %+v", cfg.Lock)
			}
			var de *config.DiagnosticsError
			if !errors.As(err, &de) {
				t.Fatalf("error is %T", err)
			}
			for _, d := range de.Diags {
				if d.Subject == nil || d.Subject.Filename != config.LockFileName {
					t.Errorf("diagnostic %q does not point into the lock file", d.Summary)
				}
				if d.Severity == hcl.DiagError && !strings.Contains(d.Detail, "mcpvisor plugins lock") {
					t.Errorf("diagnostic %q does not say how to rewrite the file", d.Summary)
				}
			}
			got := err.Error() + "\n"
			if !strings.Contains(got, tc.want) {
				t.Errorf("error lacks %q:\n%s", tc.want, got)
			}
			checkGolden(t, "lock_"+tc.name, got)
		})
	}
}

// TestLoadWithoutLockFile: every plugin block learns where its lock file
// would be, with no entry.
func TestLoadWithoutLockFile(t *testing.T) {
	d := newLockDir(t)
	cfg := load(t, d.config)
	if cfg.Lock != nil {
		t.Errorf("Lock = %+v without a lock file", cfg.Lock)
	}
	p := cfg.Servers[1].Plugin
	if p.Lock == nil || p.Lock.File != d.lock || p.Lock.SHA256 != "" {
		t.Errorf("Lock = %+v", p.Lock)
	}
	if sum := p.WantSHA256(); sum != "" {
		t.Errorf("WantSHA256 = %q for an unlocked plugin", sum)
	}
	if got, want := p.LockCommand(), "mcpvisor plugins lock -config "+d.config; got != want {
		t.Errorf("LockCommand = %q, want %q", got, want)
	}
}
