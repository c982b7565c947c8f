//go:build linux

package config_test

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// TestContainmentBlocks checks the sandbox and limits blocks, idle_timeout
// and max_lifetime of issue #26: every attribute is read, relative paths
// resolve against the file's directory, and network defaults to "any".
func TestContainmentBlocks(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Parse([]byte(`server "notes" {
  command = "npx"
  sandbox {
    read        = ["ref", "/srv/reference"]
    write       = ["/srv/notes"]
    connect     = [443, 8080]
    best_effort = true
    udp          = true
    connect_unix = ["run/agent.sock"]
    user         = "mcp-notes"
    group        = "mcp"
  }
  limits {
    memory     = "512MiB"
    processes  = 64
    open_files = 1024
    best_effort = true
  }
  idle_timeout = "10m"
  max_lifetime = "24h"
}
server "plain" {
  command = "npx"
}
`), filepath.Join(dir, "config.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Servers[0]
	want := &config.Sandbox{
		Read:        []string{filepath.Join(dir, "ref"), "/srv/reference"},
		Write:       []string{"/srv/notes"},
		Network:     config.NetworkAny,
		Connect:     []int{443, 8080},
		BestEffort:  true,
		UDP:         true,
		ConnectUnix: []string{filepath.Join(dir, "run/agent.sock")},
		User:        "mcp-notes",
		Group:       "mcp",
	}
	if !reflect.DeepEqual(s.Sandbox, want) {
		t.Errorf("Sandbox = %+v, want %+v", s.Sandbox, want)
	}
	if s.Limits != (config.Limits{Memory: 512 << 20, Processes: 64, OpenFiles: 1024, BestEffort: true}) {
		t.Errorf("Limits = %+v", s.Limits)
	}
	if s.IdleTimeout != 10*time.Minute || s.MaxLifetime != 24*time.Hour {
		t.Errorf("IdleTimeout, MaxLifetime = %v, %v", s.IdleTimeout, s.MaxLifetime)
	}
	p := cfg.Servers[1]
	if p.Sandbox != nil || !p.Limits.IsZero() || p.IdleTimeout != 0 || p.MaxLifetime != 0 {
		t.Errorf("a server without the blocks is contained: %+v", p)
	}
}

// TestContainmentErrors checks that each bad value is refused with a
// message naming the attribute and what to write instead.
func TestContainmentErrors(t *testing.T) {
	for _, tc := range []struct {
		body, want string
	}{
		{`command = "x"` + "\n" + `sandbox { network = "host" }`, `use "none"`},
		{`command = "x"` + "\n" + "sandbox {\nnetwork = \"none\"\nconnect = [443]\n}", "Conflicting network rules"},
		{`command = "x"` + "\n" + `sandbox { connect = [0] }`, "between 1 and 65535"},
		{`command = "x"` + "\n" + `sandbox { read = [""] }`, "empty path"},
		{`command = "x"` + "\n" + `sandbox { udp = true }`, "Needless udp"},
		{`command = "x"` + "\n" + "sandbox {\nnetwork = \"none\"\nudp = true\n}", "no host to send UDP to"},
		{`command = "x"` + "\n" + `sandbox { group = "mcp" }`, "Group without user"},
		{`command = "x"` + "\n" + `sandbox { user = "" }`, "Invalid user"},
		{`command = "x"` + "\n" + `sandbox { user = "a b" }`, "Invalid user"},
		{`command = "x"` + "\n" + `sandbox { connect_unix = [""] }`, "empty path"},
		{`command = "x"` + "\n" + `sandbox { users = "x" }`, `Did you mean "user"?`},
		{`command = "x"` + "\n" + `limits { memory = "1MiB" }`, "at least 8MiB"},
		{`command = "x"` + "\n" + `limits { processes = 0 }`, "processes in the limits"},
		{`command = "x"` + "\n" + `limits { open_files = 3 }`, "at least 16"},
		{`command = "x"` + "\n" + `idle_timeout = "0s"`, "idle_timeout in server"},
		{`command = "x"` + "\n" + `max_lifetime = "-1m"`, "max_lifetime in server"},
		{`url = "http://127.0.0.1:1/mcp"` + "\n" + `sandbox {}`, "Not a stdio server"},
		{`url = "http://127.0.0.1:1/mcp"` + "\n" + `idle_timeout = "1m"`, "Not a stdio server"},
	} {
		_, err := config.Parse([]byte("server \"s\" {\n"+tc.body+"\n}\n"), "config.hcl")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n err = %v\n want it to contain %q", tc.body, err, tc.want)
		}
	}
}
