//go:build unix

package e2e_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cliTimeout bounds one one-shot mcpvisor command (it connects the upstream first).
const cliTimeout = 60 * time.Second

// TestCLIWithEverything drives the one-shot commands of docs/design.md §11 with
// server-everything as the upstream: validate (0, and 2 on an invalid file), tools
// and call. Each must leave no process behind when it returns.
func TestCLIWithEverything(t *testing.T) {
	t.Parallel()
	tl := requireTools(t)
	env := newTestEnv(t)
	cfg := writeConfig(t, fmt.Sprintf(`server "everything" {
  command = %s
  args    = [%s, "stdio"]
}
`, hclString(tl.Node22), hclString(tl.Everything)))
	t.Cleanup(func() { checkNoLeftovers(t, "mcpvisor CLI", env, nil, nil) })

	if out, code := runCLI(t, tl, env, "validate", "-config", cfg); code != 0 {
		t.Errorf("validate of a valid file: exit %d, want 0\n%s", code, out)
	}
	bad := writeConfig(t, "server \"everything\" {\n  comand = \"node\"\n}\n")
	if out, code := runCLI(t, tl, env, "validate", "-config", bad); code != 2 {
		t.Errorf("validate of an invalid file: exit %d, want 2\n%s", code, out)
	} else if !strings.Contains(out, "comand") {
		t.Errorf("validate of an invalid file does not name the bad attribute:\n%s", out)
	}

	out, code := runCLI(t, tl, env, "tools", "-config", cfg)
	if code != 0 || !strings.Contains(out, exposedEchoTool) {
		t.Errorf("tools: exit %d, want 0 and %s listed\n%s", code, exposedEchoTool, out)
	}
	checkNoLeftovers(t, "mcpvisor tools", env, nil, nil)

	out, code = runCLI(t, tl, env, "call", "-config", cfg, exposedEchoTool, `{"message":"hello from mcpvisor call"}`)
	if code != 0 || !strings.Contains(out, "hello from mcpvisor call") {
		t.Errorf("call: exit %d, want 0 and the echo back\n%s", code, out)
	}
	checkNoLeftovers(t, "mcpvisor call", env, nil, nil)
}

// runCLI runs bin/mcpvisor with args in its own process group (killed as a whole on
// timeout) and returns its combined output and exit code.
func runCLI(t *testing.T, tl e2eTools, env testEnv, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), cliTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, tl.Mcpvisor, args...)
	cmd.Env = env.environ()
	cmd.Dir = env.TmpDir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &exit) && exit.Exited():
		return out.String(), exit.ExitCode()
	default:
		t.Fatalf("mcpvisor %s: %v\n%s", strings.Join(args, " "), err, out.String())
		return "", -1
	}
}
