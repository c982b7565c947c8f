package cli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/host/cli"
	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

var (
	echoBin     string
	mcpvisorBin string // the real binary, for tests that need a process of its own
	testpeerBin string // plugins/internal/testpeer, a plugin with -plugin
	testpeerErr error  // why testpeerBin could not be built
)

func TestMain(m *testing.M) {
	os.Exit(testutil.BuildAndRun(m, func(b map[string]string) {
		echoBin, mcpvisorBin = b["echo"], b[testutil.Mcpvisor]
		testpeerBin = filepath.Join(filepath.Dir(echoBin), "testpeer")
		testpeerErr = testutil.GoBuild(testpeerBin, "./plugins/internal/testpeer")
	}, "echo", testutil.Mcpvisor))
}

// run runs the CLI in this process. Its output buffers are synchronized:
// the host's logger writes to stderr from the servers' goroutines while
// the command prints.
func run(args ...string) (code int, stdout, stderr string) {
	var out, errb testutil.Buffer
	code = cli.Run(args, cli.IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
	return code, out.String(), errb.String()
}

func writeConfig(t *testing.T, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.hcl")
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExitCodes(t *testing.T) {
	good := writeConfig(t, fmt.Sprintf("server \"echo\" {\n  command = %q\n}\n", echoBin))
	bad := writeConfig(t, "server \"echo\" {\n  comand = \"x\"\n}\n")
	tests := []struct {
		name     string
		args     []string
		code     int
		inStdout string
		inStderr string
	}{
		{"no command", nil, cli.ExitUsage, "", "Usage"},
		{"unknown command", []string{"frobnicate"}, cli.ExitUsage, "", `unknown command "frobnicate"`},
		{"version", []string{"version"}, cli.ExitOK, "mcpvisor ", ""},
		{"validate ok", []string{"validate", "-config", good}, cli.ExitOK, "valid (1 server(s))", ""},
		{"validate bad", []string{"validate", "-config", bad}, cli.ExitUsage, "", `Did you mean "command"?`},
		{"validate missing file", []string{"validate", "-config", "/nonexistent/config.hcl"}, cli.ExitUsage, "", "/nonexistent/config.hcl"},
		{"bad flag", []string{"validate", "-nope"}, cli.ExitUsage, "", "flag provided but not defined"},
		{"call without tool", []string{"call", "-config", good}, cli.ExitUsage, "", "usage: mcpvisor call"},
		{"call with bad JSON", []string{"call", "-config", good, "echo__echo", "{nope"}, cli.ExitUsage, "", "must be a JSON object"},
		{"call unknown tool", []string{"call", "-config", good, "echo__nope", "{}"}, cli.ExitRuntime, "", `unknown tool "echo__nope"`},
		{"call ok", []string{"call", "-config", good, "echo__echo", `{"text":"hi there"}`}, cli.ExitOK, `"text": "hi there"`, ""},
		{"call isError", []string{"call", "-config", good, "echo__fail", `{"message":"nope"}`}, cli.ExitRuntime, `"isError": true`, ""},
		{"tools", []string{"tools", "-config", good}, cli.ExitOK, "echo__echo", ""},
		{"status without host", []string{"status", "-config", good, "-addr", "127.0.0.1:1"}, cli.ExitRuntime, "", "no host answering at 127.0.0.1:1"},
		{"run with bad config", []string{"run", "-config", bad}, cli.ExitUsage, "", "comand"},
		{"run with extra argument", []string{"run", "-config", good, "extra"}, cli.ExitUsage, "", `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := run(tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, out, errs)
			}
			if !strings.Contains(out, tt.inStdout) {
				t.Errorf("stdout lacks %q:\n%s", tt.inStdout, out)
			}
			if !strings.Contains(errs, tt.inStderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.inStderr, errs)
			}
			if strings.Contains(errs, "goroutine ") || strings.Contains(errs, "panic") {
				t.Errorf("stack trace shown to the user:\n%s", errs)
			}
		})
	}
}
