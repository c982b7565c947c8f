package cli_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/host/cli"
)

// commandNames are the commands `mcpvisor help` lists.
var commandNames = []string{"run", "validate", "tools", "call", "status", "revive", "restart", "import", "client", "login", "logout", "sandbox", "plugins", "completion", "version", "help"}

// Every command has a synopsis, options where it has any, and an example;
// `mcpvisor help CMD` and `mcpvisor CMD -h` print them on stdout and exit 0.
func TestEveryCommandHasHelp(t *testing.T) {
	code, global, _ := runBin(t, nil, "help")
	if code != cli.ExitOK {
		t.Fatalf("help: exit %d", code)
	}
	for _, name := range commandNames {
		if !strings.Contains(global, "\n  "+name+" ") {
			t.Errorf("`mcpvisor help` does not list %s:\n%s", name, global)
		}
		for _, args := range [][]string{{"help", name}, {name, "-h"}, {name, "--help"}} {
			code, out, errs := runBin(t, nil, args...)
			if code != cli.ExitOK {
				t.Errorf("mcpvisor %s: exit %d, want 0\n%s", strings.Join(args, " "), code, errs)
			}
			for _, want := range []string{"Usage: mcpvisor " + name, "Examples:\n  mcpvisor"} {
				if !strings.Contains(out, want) {
					t.Errorf("mcpvisor %s: stdout lacks %q:\n%s", strings.Join(args, " "), want, out)
				}
			}
			if strings.Contains(out, "Commands:") {
				t.Errorf("mcpvisor %s prints the global help, not the command's:\n%s", strings.Join(args, " "), out)
			}
		}
	}
	_, out, _ := runBin(t, nil, "call", "-h")
	for _, want := range []string{"Arguments:\n  TOOL ", "\n  JSON ", "-config"} {
		if !strings.Contains(out, want) {
			t.Errorf("call -h lacks %q:\n%s", want, out)
		}
	}
	_, out, _ = runBin(t, nil, "help", "run")
	for _, want := range []string{"-stdio", "-http"} {
		if !strings.Contains(out, want) {
			t.Errorf("help run lacks the option %s:\n%s", want, out)
		}
	}
}

// A mistyped command, option or tool name gets a suggestion, and a bad
// argument is named by its position.
func TestDidYouMean(t *testing.T) {
	good := writeConfig(t, fmt.Sprintf("server \"echo\" {\n  command = %q\n}\n", echoBin))
	for _, tc := range []struct {
		args  []string
		code  int
		inErr string
	}{
		{[]string{"statsu"}, cli.ExitUsage, `unknown command "statsu"; did you mean "status"?`},
		{[]string{"valdiate"}, cli.ExitUsage, `did you mean "validate"?`},
		{[]string{"help", "stauts"}, cli.ExitUsage, `did you mean "status"?`},
		{[]string{"validate", "-confg", good}, cli.ExitUsage, "-confg is not an option; did you mean -config?"},
		{[]string{"status", "--jsno"}, cli.ExitUsage, "did you mean -json?"},
		{[]string{"plugins", "lcok"}, cli.ExitUsage, `did you mean "lock"?`},
		{[]string{"call", "-config", good, "echo__ecoh", "{}"}, cli.ExitRuntime, `did you mean "echo__echo"?`},
		{[]string{"call", "-config", good, "echo__echo", "{nope"}, cli.ExitUsage, "argument 2 (JSON arguments) must be a JSON object: invalid character 'n' looking for beginning of object key string at byte 2\n  {nope\n   ^"},
		{[]string{"call", "-config", good, "echo__echo", "[1]"}, cli.ExitUsage, "argument 2 (JSON arguments) must be a JSON object: it is a JSON array"},
		{[]string{"call", "-config", good, "echo__echo", "{}", "{}"}, cli.ExitUsage, "argument 3"},
		{[]string{"completion", "tcsh"}, cli.ExitUsage, `argument 1 (SHELL): "tcsh" is not bash, zsh or fish`},
		{[]string{"revive", "-config", good}, cli.ExitUsage, "mcpvisor revive: missing argument 1 (SERVER)"},
		{[]string{"import", "a.json", "b.json"}, cli.ExitUsage, `mcpvisor import: argument 2 ("b.json") is one too many: it takes one FILE`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errs := runBin(t, nil, tc.args...)
			if code != tc.code || !strings.Contains(errs, tc.inErr) {
				t.Errorf("exit %d, want %d and %q on stderr\nstdout: %s\nstderr: %s", code, tc.code, tc.inErr, out, errs)
			}
		})
	}
}

// `mcpvisor completion bash` is a script bash accepts, and completing with
// it offers the commands and a command's options.
func TestCompletion(t *testing.T) {
	code, script, errs := runBin(t, nil, "completion", "bash")
	if code != cli.ExitOK {
		t.Fatalf("completion bash: exit %d\n%s", code, errs)
	}
	path := filepath.Join(t.TempDir(), "mcpvisor.bash")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("bash", "-n", path).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s\n%s", err, out, script)
	}
	complete := func(words ...string) string {
		t.Helper()
		prog := fmt.Sprintf(`source %q; COMP_WORDS=(%s); COMP_CWORD=%d; _mcpvisor; echo "${COMPREPLY[*]}"`,
			path, strings.Join(words, " "), len(words)-1)
		out, err := exec.Command("bash", "-c", prog).CombinedOutput()
		if err != nil {
			t.Fatalf("completing %v: %v\n%s", words, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := complete("mcpvisor", "sta"); got != "status" {
		t.Errorf("completing sta: %q, want status", got)
	}
	if got := complete("mcpvisor", "status", "-w"); got != "-watch" {
		t.Errorf("completing status -w: %q, want -watch", got)
	}
	if got := complete("mcpvisor", "completion", "z"); got != "zsh" {
		t.Errorf("completing completion z: %q, want zsh", got)
	}
	for _, shell := range []string{"zsh", "fish"} {
		code, script, errs := runBin(t, nil, "completion", shell)
		if code != cli.ExitOK || !strings.Contains(script, "status") || !strings.Contains(script, "watch") {
			t.Errorf("completion %s: exit %d\n%s%s", shell, code, script, errs)
			continue
		}
		if _, err := exec.LookPath(shell); err != nil {
			t.Logf("%s not installed; its script is not checked by the shell", shell)
			continue
		}
		p := filepath.Join(t.TempDir(), "mcpvisor."+shell)
		os.WriteFile(p, []byte(script), 0o600)
		if out, err := exec.Command(shell, "-n", p).CombinedOutput(); err != nil {
			t.Errorf("%s -n: %v\n%s", shell, err, out)
		}
	}
}
