package config_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/mcpvisor/mcpvisor/host/config"
)

// ignoreRanges leaves source ranges out of comparisons; the golden error
// tests cover where diagnostics point.
var ignoreRanges = cmpopts.IgnoreFields(config.Server{}, "DeclRange")

// defaultHost is the host block's value when the file has none.
func defaultHost() config.Host {
	h := config.Host{LogLevel: "info", LogFormat: "text", Separator: "__", SessionIdleTimeout: 30 * time.Minute, MaxSessions: 10000, MaxSessionsPerSubject: 100, Drain: 5 * time.Second}
	// Bounds on bytes from upstream servers.
	h.MaxInflightBytes = 256 << 20
	return h
}

// defaultServer is a server named name with every default applied.
func defaultServer(name string, tr config.Transport) *config.Server {
	return &config.Server{
		Name:           name,
		Transport:      tr,
		Prefix:         name,
		Timeout:        300 * time.Second,
		ConnectTimeout: 60 * time.Second,
		Reconnect: config.Reconnect{
			MaxRetries:   5,
			MaxBackoff:   60 * time.Second,
			ParkedRetry:  300 * time.Second,
			HealthyAfter: 30 * time.Second,

			UnresponsiveAfter: 2,
		},
		Breaker: config.Breaker{Threshold: 3, Cooldown: 60 * time.Second},
		// Bounds on bytes from this server.
		MaxMessageSize: 16 << 20,
	}
}

// fullExample is a configuration with every attribute set (docs/config.md).
const fullExample = `host {
  listen     = "0.0.0.0:8811"
  log_level  = "debug"
  log_format = "json"
  separator  = "."
  replica    = "mcpvisor-0"
  drain      = "0s"
  max_inflight_bytes = "512MiB"
  auth { bearer_token = env("MCPVISOR_TEST_TOKEN") }
}

server "everything" {
  command          = "npx"
  args             = ["-y", "@modelcontextprotocol/server-everything"]
  env              = { API_KEY = env("MCPVISOR_TEST_KEY"), MODE = "test" }
  cwd              = "work"
  timeout          = "120s"
  connect_timeout  = "15s"
  prefix           = "ev"
  protocol_version = "2025-11-25"
  max_message_size = "4MiB"
  tools {
    include = ["echo", "add"]
    exclude = ["trigger-*"]
  }
  reconnect {
    max_retries   = 0
    max_backoff   = "30s"
    parked_retry  = "10m"
    healthy_after = "1m"
    unresponsive_after = 3
  }
  breaker {
    threshold = 1
    cooldown  = "5s"
  }
  health {
    interval = "20s"
    timeout  = "3s"
  }
}

server "remote" {
  url       = "https://mcp.example.com/mcp"
  headers   = { Authorization = "Bearer ${env("MCPVISOR_TEST_TOKEN")}" }
  transport = "sse"
  health { interval = "4s" }
}

server "over-unix" {
  plugin "unix" {
    command = "./bin/mcpvisor-transport-unix"
    args    = ["-v"]
    sha256  = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    config  = { socket = "/run/mcp/tools.sock", retries = 3, tls = { insecure = false } }
  }
}
`

func TestParseValid(t *testing.T) {
	t.Setenv("MCPVISOR_TEST_TOKEN", "s3cret")
	t.Setenv("MCPVISOR_TEST_KEY", "k3y")
	dir := filepath.Join("some", "dir")

	tests := []struct {
		name string
		src  string
		want *config.Config
	}{
		{
			name: "empty file",
			src:  "",
			want: &config.Config{Host: defaultHost()},
		},
		{
			name: "only comments",
			src:  "# nothing yet\n// still nothing\n",
			want: &config.Config{Host: defaultHost()},
		},
		{
			name: "minimal stdio server gets every default",
			src:  `server "fs" { command = "npx" }`,
			want: &config.Config{Host: defaultHost(), Servers: []*config.Server{
				func() *config.Server {
					s := defaultServer("fs", config.TransportStdio)
					s.Command = "npx"
					s.Cwd = dir
					return s
				}(),
			}},
		},
		{
			name: "oauth block with defaults and with every attribute",
			src: `server "linear" {
  url = "https://mcp.linear.app/mcp"
  oauth {}
}
server "svc" {
  url = "https://mcp.example.com/mcp"
  oauth {
    grant         = "client_credentials"
    client_id     = "svc"
    client_secret = env("MCPVISOR_TEST_KEY")
    scopes        = ["read", "write"]
    redirect_port = 8765
  }
}`,
			want: &config.Config{Host: defaultHost(), Servers: []*config.Server{
				func() *config.Server {
					s := defaultServer("linear", config.TransportStreamable)
					s.URL = "https://mcp.linear.app/mcp"
					s.OAuth = &config.OAuth{Grant: config.GrantAuthorizationCode}
					return s
				}(),
				func() *config.Server {
					s := defaultServer("svc", config.TransportStreamable)
					s.URL = "https://mcp.example.com/mcp"
					s.OAuth = &config.OAuth{Grant: config.GrantClientCredentials, ClientID: "svc", ClientSecret: "k3y",
						Scopes: []string{"read", "write"}, RedirectPort: 8765}
					return s
				}(),
			}},
		},
		{
			name: "url defaults to streamable HTTP",
			src:  `server "web" { url = "http://127.0.0.1:9000/mcp" }`,
			want: &config.Config{Host: defaultHost(), Servers: []*config.Server{
				func() *config.Server {
					s := defaultServer("web", config.TransportStreamable)
					s.URL = "http://127.0.0.1:9000/mcp"
					return s
				}(),
			}},
		},
		{
			name: "explicit empty prefix stays empty",
			src:  "server \"only\" {\n  command = \"npx\"\n  prefix = \"\"\n}\n",
			want: &config.Config{Host: defaultHost(), Servers: []*config.Server{
				func() *config.Server {
					s := defaultServer("only", config.TransportStdio)
					s.Cwd = dir
					s.Command = "npx"
					s.Prefix = ""
					return s
				}(),
			}},
		},
		{
			name: "null means unset",
			src:  "server \"fs\" {\n  command = \"npx\"\n  prefix = null\n  timeout = null\n}\n",
			want: &config.Config{Host: defaultHost(), Servers: []*config.Server{
				func() *config.Server {
					s := defaultServer("fs", config.TransportStdio)
					s.Command = "npx"
					s.Cwd = dir
					return s
				}(),
			}},
		},
		{
			name: "loopback listen needs no token",
			src:  `host { listen = "127.0.0.1:8811" }`,
			want: &config.Config{Host: func() config.Host { h := defaultHost(); h.Listen = "127.0.0.1:8811"; return h }()},
		},
		{
			name: "IPv6 loopback and localhost need no token",
			src:  `host { listen = "[::1]:0" }`,
			want: &config.Config{Host: func() config.Host { h := defaultHost(); h.Listen = "[::1]:0"; return h }()},
		},
		{
			name: "numbers and bools convert to strings",
			src:  "server \"fs\" {\n  command = \"npx\"\n  args = [1, true]\n}\n",
			want: &config.Config{Host: defaultHost(), Servers: []*config.Server{
				func() *config.Server {
					s := defaultServer("fs", config.TransportStdio)
					s.Cwd = dir
					s.Command = "npx"
					s.Args = []string{"1", "true"}
					return s
				}(),
			}},
		},
		{
			name: "full example",
			src:  fullExample,
			want: &config.Config{
				Host: config.Host{
					Listen:                "0.0.0.0:8811",
					LogLevel:              "debug",
					LogFormat:             "json",
					BearerToken:           "s3cret",
					Separator:             ".",
					SessionIdleTimeout:    30 * time.Minute,
					MaxSessions:           10000,
					MaxSessionsPerSubject: 100,
					Replica:               "mcpvisor-0",
					MaxInflightBytes:      512 << 20,
				},
				Servers: []*config.Server{
					{
						Name:            "everything",
						Transport:       config.TransportStdio,
						Command:         "npx",
						Args:            []string{"-y", "@modelcontextprotocol/server-everything"},
						Env:             map[string]string{"API_KEY": "k3y", "MODE": "test"},
						Cwd:             filepath.Join(dir, "work"),
						Timeout:         120 * time.Second,
						ConnectTimeout:  15 * time.Second,
						Prefix:          "ev",
						ProtocolVersion: "2025-11-25",
						Tools:           config.Filter{Include: []string{"echo", "add"}, Exclude: []string{"trigger-*"}},
						Reconnect: config.Reconnect{
							MaxRetries:   0,
							MaxBackoff:   30 * time.Second,
							ParkedRetry:  10 * time.Minute,
							HealthyAfter: time.Minute,

							UnresponsiveAfter: 3,
						},
						Breaker:        config.Breaker{Threshold: 1, Cooldown: 5 * time.Second},
						Health:         config.Health{Interval: 20 * time.Second, Timeout: 3 * time.Second},
						MaxMessageSize: 4 << 20,
					},
					func() *config.Server {
						s := defaultServer("remote", config.TransportSSE)
						s.URL = "https://mcp.example.com/mcp"
						s.Headers = map[string]string{"Authorization": "Bearer s3cret"}
						// Only an interval: the timeout is the default, at
						// most half the interval.
						s.Health = config.Health{Interval: 4 * time.Second, Timeout: 2 * time.Second}
						return s
					}(),
					func() *config.Server {
						s := defaultServer("over-unix", config.TransportPlugin)
						s.Plugin = &config.Plugin{
							Name:    "unix",
							Command: filepath.Join(dir, "bin", "mcpvisor-transport-unix"),
							Args:    []string{"-v"},
							SHA256:  "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
							Config:  []byte(`{"retries":3,"socket":"/run/mcp/tools.sock","tls":{"insecure":false}}`),
						}
						return s
					}(),
				},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			filename := filepath.Join(dir, "config.hcl")
			got, err := config.Parse([]byte(tc.src), filename)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			tc.want.Filename = filename
			if diff := cmp.Diff(tc.want, got, ignoreRanges); diff != "" {
				t.Errorf("Parse mismatch (-want +got):\n%s", diff)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("Validate of a parsed config: %v", err)
			}
		})
	}
}

func TestDeclRangePointsAtBlock(t *testing.T) {
	cfg, err := config.Parse([]byte("\n\nserver \"fs\" {\n  command = \"npx\"\n}\n"), "c.hcl")
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Servers[0].DeclRange
	if r.Filename != "c.hcl" || r.Start.Line != 3 {
		t.Errorf("DeclRange = %v, want c.hcl line 3", r)
	}
}

func TestEnvFunction(t *testing.T) {
	t.Setenv("MCPVISOR_TEST_SET", "value")
	t.Setenv("MCPVISOR_TEST_EMPTY", "")
	os.Unsetenv("MCPVISOR_TEST_UNSET")

	tests := []struct {
		expr string
		want string
	}{
		{`env("MCPVISOR_TEST_SET")`, "value"},
		{`env("MCPVISOR_TEST_SET", "fallback")`, "value"},
		{`env("MCPVISOR_TEST_UNSET", "fallback")`, "fallback"},
		{`env("MCPVISOR_TEST_EMPTY", "fallback")`, ""}, // set to "" counts as set
		{`"a-${env("MCPVISOR_TEST_SET")}-b"`, "a-value-b"},
		{`"${env("MCPVISOR_TEST_UNSET", "x")}${env("MCPVISOR_TEST_SET")}"`, "xvalue"},
	}
	for _, tc := range tests {
		t.Run(tc.expr, func(t *testing.T) {
			got := parseEnvValue(t, tc.expr)
			if got != tc.want {
				t.Errorf("%s = %q, want %q", tc.expr, got, tc.want)
			}
		})
	}
}

// parseEnvValue evaluates expr as a stdio server's env value.
func parseEnvValue(t *testing.T, expr string) string {
	t.Helper()
	src := "server \"fs\" {\n  command = \"npx\"\n  env = { V = " + expr + " }\n}\n"
	cfg, err := config.Parse([]byte(src), "config.hcl")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cfg.Servers[0].Env["V"]
}

func TestEnvFunctionMissing(t *testing.T) {
	os.Unsetenv("MCPVISOR_TEST_UNSET")
	_, err := config.Parse([]byte(`server "fs" { command = env("MCPVISOR_TEST_UNSET") }`), "config.hcl")
	if err == nil {
		t.Fatal("Parse succeeded with an unset variable and no default")
	}
	for _, want := range []string{`"MCPVISOR_TEST_UNSET" is not set`, `env("MCPVISOR_TEST_UNSET", "default")`, `in server "fs"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%s", want, err)
		}
	}
	// One failure, one diagnostic: no follow-up type error.
	if n := len(err.(*config.DiagnosticsError).Diags); n != 1 {
		t.Errorf("got %d diagnostics, want 1:\n%s", n, err)
	}
}

func TestFileFunction(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token.txt"), []byte("t0ken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "binary"), []byte{0xff, 0xfe, 0x00}, 0o600); err != nil {
		t.Fatal(err)
	}
	abs := filepath.Join(dir, "token.txt")
	filename := filepath.Join(dir, "config.hcl")

	ok := []struct {
		expr string
		want string
	}{
		{`file("token.txt")`, "t0ken\n"},
		{`trimspace(file("token.txt"))`, "t0ken"},
		{`file("./sub/../token.txt")`, "t0ken\n"},
		{`file("` + abs + `")`, "t0ken\n"},
		{`"Bearer ${trimspace(file("token.txt"))}"`, "Bearer t0ken"},
	}
	for _, tc := range ok {
		t.Run(tc.expr, func(t *testing.T) {
			src := "server \"fs\" {\n  command = \"npx\"\n  env = { V = " + tc.expr + " }\n}\n"
			cfg, err := config.Parse([]byte(src), filename)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := cfg.Servers[0].Env["V"]; got != tc.want {
				t.Errorf("%s = %q, want %q", tc.expr, got, tc.want)
			}
		})
	}

	bad := []struct {
		expr string
		want string
	}{
		{`file("missing.txt")`, `cannot read file "missing.txt" (resolved to "` + filepath.Join(dir, "missing.txt") + `"): no such file or directory`},
		{`file("sub")`, `cannot read file "sub" (resolved to "` + filepath.Join(dir, "sub") + `"): it is a directory`},
		{`file("binary")`, `is not UTF-8 text`},
		{`file("")`, `the path must not be empty`},
	}
	for _, tc := range bad {
		t.Run(tc.expr, func(t *testing.T) {
			src := "server \"web\" {\n  url = \"https://x.example/mcp\"\n  headers = { Authorization = " + tc.expr + " }\n}\n"
			_, err := config.Parse([]byte(src), filename)
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error lacks %q:\n%s", tc.want, err)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.hcl")
	src := `server "p" {
  cwd = "data"
  plugin "unix" { command = "bin/unix" }
}
server "q" {
  command = "/usr/bin/env"
  cwd     = "/tmp"
}
`
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if cfg.Filename != path {
		t.Errorf("Filename = %q, want %q", cfg.Filename, path)
	}
	p, q := cfg.Servers[0], cfg.Servers[1]
	if want := filepath.Join(dir, "bin", "unix"); p.Plugin.Command != want {
		t.Errorf("plugin command = %q, want %q", p.Plugin.Command, want)
	}
	if want := filepath.Join(dir, "data"); p.Cwd != want {
		t.Errorf("cwd = %q, want %q", p.Cwd, want)
	}
	if q.Command != "/usr/bin/env" || q.Cwd != "/tmp" {
		t.Errorf("absolute paths changed: command %q, cwd %q", q.Command, q.Cwd)
	}
}

func TestLoadRelativePathIsAbsolute(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.hcl"), []byte("server \"p\" {\n  plugin \"unix\" {\n    command = \"bin/unix\"\n  }\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	cfg, err := config.Load("config.hcl")
	if err != nil {
		t.Fatal(err)
	}
	// Load resolves against an absolute directory, so the path stays valid
	// if the process later changes directory.
	if got := cfg.Servers[0].Plugin.Command; !filepath.IsAbs(got) {
		t.Errorf("plugin command = %q, want an absolute path", got)
	}
}

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.hcl")
	_, err := config.Load(path)
	if err == nil {
		t.Fatal("Load succeeded")
	}
	var de *config.DiagnosticsError
	if !errors.As(err, &de) {
		t.Fatalf("error is %T, want *config.DiagnosticsError", err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.Is(err, fs.ErrNotExist) is false")
	}
	for _, want := range []string{"Configuration file not found", path, "-config"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%s", want, err)
		}
	}
}

func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	_, err := config.Load(dir)
	if err == nil || !strings.Contains(err.Error(), "Cannot read configuration file") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Load(dir) = %v, want a read error naming the path", err)
	}
}

func TestWriteDiagnosticsColor(t *testing.T) {
	_, err := config.Parse([]byte(`server "fs" { comand = "npx" }`), "config.hcl")
	var de *config.DiagnosticsError
	if !errors.As(err, &de) {
		t.Fatalf("error is %T", err)
	}
	var b strings.Builder
	if err := de.WriteDiagnostics(&b, 78, true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "\x1b[31mError") {
		t.Errorf("colored output lacks the red severity:\n%q", b.String())
	}
	if strings.Contains(de.Error(), "\x1b[") {
		t.Errorf("Error() contains escape sequences:\n%q", de.Error())
	}
}

func TestValidateGoBuilt(t *testing.T) {
	valid := func() *config.Config {
		c := &config.Config{Servers: []*config.Server{
			{Name: "fs", Command: "npx", Prefix: "fs"},
			{Name: "web", URL: "https://x.example/mcp"},
			{Name: "sock", Plugin: &config.Plugin{Name: "unix", Command: "/bin/unix"}},
		}}
		c.ApplyDefaults()
		return c
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("Validate of a defaulted config: %v", err)
	}

	t.Run("ApplyDefaults", func(t *testing.T) {
		got := valid()
		want := &config.Config{Servers: []*config.Server{
			func() *config.Server { s := defaultServer("fs", config.TransportStdio); s.Command = "npx"; return s }(),
			func() *config.Server {
				s := defaultServer("web", config.TransportStreamable)
				s.URL = "https://x.example/mcp"
				s.Prefix = "" // ApplyDefaults never sets a prefix
				return s
			}(),
			func() *config.Server {
				s := defaultServer("sock", config.TransportPlugin)
				s.Plugin = &config.Plugin{Name: "unix", Command: "/bin/unix"}
				s.Prefix = ""
				return s
			}(),
		}, Host: defaultHost()}
		want.Host.Drain = 0 // zero is a choice there: stop at once
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ApplyDefaults mismatch (-want +got):\n%s", diff)
		}
	})

	t.Run("ApplyDefaults keeps MaxRetries 0 when Reconnect is set", func(t *testing.T) {
		c := &config.Config{Servers: []*config.Server{{Name: "fs", Command: "npx", Reconnect: config.Reconnect{MaxBackoff: time.Second}}}}
		c.ApplyDefaults()
		r := c.Servers[0].Reconnect
		if r.MaxRetries != 0 || r.MaxBackoff != time.Second || r.ParkedRetry != config.DefaultParkedRetry {
			t.Errorf("Reconnect = %+v", r)
		}
	})

	t.Run("empty host strings mean defaults", func(t *testing.T) {
		c := &config.Config{}
		if err := c.Validate(); err != nil {
			t.Errorf("Validate(empty Config) = %v", err)
		}
	})

	bad := []struct {
		name   string
		mutate func(c *config.Config)
		want   []string
	}{
		{"duplicate", func(c *config.Config) { c.Servers[1].Name = "fs" }, []string{"Duplicate server name", `A server named "fs" is already defined.`}},
		{"empty name", func(c *config.Config) { c.Servers[0].Name = "" }, []string{"Empty server name"}},
		{"nil server", func(c *config.Config) { c.Servers[1] = nil }, []string{"Servers[1] is nil"}},
		{"conflict", func(c *config.Config) { c.Servers[0].URL = "https://x.example" }, []string{`server "fs" sets command and url`}},
		{"none", func(c *config.Config) { c.Servers[0].Command = "" }, []string{`server "fs" sets none of command, url or a plugin block`}},
		{"zero timeout", func(c *config.Config) { c.Servers[0].Timeout = 0 }, []string{`timeout in server "fs" is 0s`, "Call ApplyDefaults"}},
		{"zero threshold", func(c *config.Config) { c.Servers[2].Breaker.Threshold = 0 }, []string{`threshold in server "sock" is 0`}},
		{"url without transport", func(c *config.Config) { c.Servers[1].Transport = "" }, []string{`transport in server "web" is ""`}},
		{"transport mismatch", func(c *config.Config) { c.Servers[0].Transport = config.TransportSSE }, []string{`its transport must be "stdio", not "sse"`}},
		{"plugin transport mismatch", func(c *config.Config) { c.Servers[2].Transport = config.TransportStdio }, []string{`its transport must be "plugin"`}},
		{"plugin without command", func(c *config.Config) { c.Servers[2].Plugin.Command = "" }, []string{"Missing plugin command"}},
		{"plugin config not JSON", func(c *config.Config) { c.Servers[2].Plugin.Config = []byte("{") }, []string{"is not valid JSON"}},
		{"sha256", func(c *config.Config) { c.Servers[2].Plugin.SHA256 = strings.Repeat("g", 64) }, []string{"64 hexadecimal digits"}},
		{"bad url", func(c *config.Config) { c.Servers[1].URL = "ws://x.example" }, []string{`the scheme "ws" is not http or https`}},
		{"log level", func(c *config.Config) { c.Host.LogLevel = "INFO" }, []string{`log_level in the host block is "INFO"`}},
		{"listen", func(c *config.Config) { c.Host.Listen = "0.0.0.0:1" }, []string{"Non-loopback listen address without a bearer token"}},
		{"max retries", func(c *config.Config) { c.Servers[0].Reconnect.MaxRetries = -3 }, []string{"max_retries in server \"fs\" is -3"}},
		{"protocol", func(c *config.Config) { c.Servers[0].ProtocolVersion = "1" }, []string{"Unsupported protocol version"}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.mutate(c)
			err := c.Validate()
			if err == nil {
				t.Fatal("Validate succeeded")
			}
			var de *config.DiagnosticsError
			if !errors.As(err, &de) {
				t.Fatalf("error is %T", err)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%s", want, err)
				}
			}
		})
	}

	t.Run("listen with token", func(t *testing.T) {
		c := valid()
		c.Host.Listen = "0.0.0.0:1"
		c.Host.BearerToken = "x"
		if err := c.Validate(); err != nil {
			t.Error(err)
		}
	})

	t.Run("nil", func(t *testing.T) {
		var c *config.Config
		if err := c.Validate(); err == nil {
			t.Error("Validate(nil) succeeded")
		}
	})
}

func TestNonLoopbackListen(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:8811", ":8811", "[::]:8811", "192.168.1.5:8811", "example.com:8811"} {
		c := &config.Config{Host: config.Host{Listen: listen}}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "bearer token") {
			t.Errorf("listen %q without a token: Validate = %v, want a bearer-token error", listen, err)
		}
	}
	for _, listen := range []string{"127.0.0.1:8811", "127.1.2.3:1", "[::1]:8811", "localhost:8811"} {
		c := &config.Config{Host: config.Host{Listen: listen}}
		if err := c.Validate(); err != nil {
			t.Errorf("listen %q: %v", listen, err)
		}
	}
}

// TestAuthOIDC: the oidc block decodes with its defaults, admits a
// non-loopback listen on its own, and token is bearer_token's new name.
func TestAuthOIDC(t *testing.T) {
	cfg, err := config.Parse([]byte(`host {
  listen = "0.0.0.0:8811"
  auth {
    token = "shared"
    oidc {
      issuer   = "https://idp.example.com"
      audience = "https://mcp.example.com/mcp"
      scopes   = ["mcp:tools"]
    }
  }
}
`), testFilename)
	if err != nil {
		t.Fatal(err)
	}
	want := &config.OIDC{Issuer: "https://idp.example.com", Audience: "https://mcp.example.com/mcp", Scopes: []string{"mcp:tools"},
		SubjectClaim: "sub", GroupsClaim: "groups"}
	if diff := cmp.Diff(want, cfg.Host.OIDC); diff != "" || cfg.Host.BearerToken != "shared" {
		t.Errorf("oidc block (-want +got):\n%s\ntoken %q", diff, cfg.Host.BearerToken)
	}
	c := &config.Config{Host: config.Host{Listen: "0.0.0.0:8811", OIDC: want}}
	if err := c.Validate(); err != nil {
		t.Errorf("non-loopback listen with oidc only: %v", err)
	}
	c = &config.Config{Host: config.Host{OIDC: &config.OIDC{Issuer: "https://idp.example.com"}}}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "Audience") {
		t.Errorf("oidc without an audience: Validate = %v, want an error naming Audience", err)
	}
}

func TestProtocolVersionsIsACopy(t *testing.T) {
	v := config.ProtocolVersions()
	v[0] = "changed"
	if config.ProtocolVersions()[0] == "changed" {
		t.Error("ProtocolVersions returns shared state")
	}
}

// LoadForRun holds a server whose only errors are env() of unset variables
// (MissingEnv) and loads the rest; any other error still fails, and Load
// still refuses the file (validate).
func TestLoadForRunHoldsUnsetEnv(t *testing.T) {
	os.Unsetenv("MCPVISOR_TEST_UNSET")
	os.Unsetenv("MCPVISOR_TEST_UNSET2")
	path := filepath.Join(t.TempDir(), "config.hcl")
	write := func(src string) {
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`
server "ok" { command = "echo" }
server "paid" {
  url     = env("MCPVISOR_TEST_UNSET")
  headers = { Authorization = "Bearer ${env("MCPVISOR_TEST_UNSET2")}" }
}
`)
	cfg, err := config.LoadForRun(path)
	if err != nil {
		t.Fatalf("LoadForRun: %v", err)
	}
	if got := cfg.Servers[1].MissingEnv; !slices.Equal(got, []string{"MCPVISOR_TEST_UNSET", "MCPVISOR_TEST_UNSET2"}) {
		t.Errorf("MissingEnv = %q", got)
	}
	if len(cfg.Servers[0].MissingEnv) != 0 {
		t.Errorf("the other server has MissingEnv %q", cfg.Servers[0].MissingEnv)
	}
	if _, err := config.Load(path); err == nil || !strings.Contains(err.Error(), "MCPVISOR_TEST_UNSET") {
		t.Errorf("Load: %v; want the unset variable reported", err)
	}
	write(`
server "paid" {
  command = env("MCPVISOR_TEST_UNSET")
  timeout = "soon"
}
`)
	if _, err := config.LoadForRun(path); err == nil || !strings.Contains(err.Error(), "soon") {
		t.Errorf("LoadForRun of a block with another error too: %v; want that error", err)
	}
}

// TestDiscoveryBlock: the host's discovery block and a server's override
// decode into Host.Discovery and Server.Discovery (docs/discovery.md).
func TestDiscoveryBlock(t *testing.T) {
	cfg, err := config.Parse([]byte(`
host {
  discovery {
    mode = "search"
    pin  = ["github__*", "fs__read_file"]
  }
}
server "fs" {
  command = "fs"
  discovery { mode = "list" }
}
server "gh" {
  command = "gh"
  discovery { pin = ["list_*"] }
}
`), "discovery.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if d := cfg.Host.Discovery; d.Mode != config.DiscoverySearch || !slices.Equal(d.Pin, []string{"github__*", "fs__read_file"}) {
		t.Errorf("host discovery %+v", d)
	}
	if d := cfg.Servers[0].Discovery; d.Mode != config.DiscoveryList || d.Pin != nil {
		t.Errorf("fs discovery %+v", d)
	}
	if d := cfg.Servers[1].Discovery; d.Mode != "" || !slices.Equal(d.Pin, []string{"list_*"}) {
		t.Errorf("gh discovery %+v", d)
	}
}
