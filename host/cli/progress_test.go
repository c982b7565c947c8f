//go:build unix

package cli_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// slowStartConfig is a config whose startup takes over a second: one
// server comes up after a 2 s sleep, one cannot start at all.
func slowStartConfig(t *testing.T, addr string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.hcl")
	src := fmt.Sprintf(`host {
  listen = %q
}
server "slow" {
  command = "sh"
  args    = ["-c", "sleep 2; exec %s"]
}
server "bad" {
  command = "/nonexistent/mcp-server"
}
`, addr, echoBin)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRunProgressOnTerminal: `run` with its stderr on a terminal (a pty
// from script(1)) says how the servers come up instead of waiting
// silently: counts, and why the failed one failed.
func TestRunProgressOnTerminal(t *testing.T) {
	script, err := exec.LookPath("script")
	if err != nil {
		t.Skip("script(1) from util-linux is not installed: no pty to run mcpvisor on")
	}
	env := addEnv(t)
	path := slowStartConfig(t, freePort(t))
	var out testutil.Buffer
	cmd := exec.Command(script, "-qfec", fmt.Sprintf("exec '%s' run -config '%s'", mcpvisorBin, path), os.DevNull)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() {
		kids := testutil.Descendants(cmd.Process.Pid)
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		for _, pid := range kids {
			syscall.Kill(pid, syscall.SIGTERM)
		}
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Errorf("script did not stop within 30s of SIGTERM")
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		for _, pid := range kids {
			if testutil.Alive(pid) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if t.Failed() {
			t.Logf("terminal output:\n%s", out.String())
		}
	}()
	testutil.Eventually(t, 60*time.Second, "the final progress line", func() bool {
		return strings.Contains(out.String(), "starting 2 servers… 1 ready, 1 failed (notes: bad parked:")
	})
	if !strings.Contains(out.String(), `/nonexistent/mcp-server" not found`) {
		t.Errorf("the progress line does not say why bad failed:\n%s", out.String())
	}
}

// TestRunNoProgressWithoutTerminal: with stderr on a pipe (a service's
// log), the same slow startup writes no progress line, only log records.
func TestRunNoProgressWithoutTerminal(t *testing.T) {
	env := addEnv(t)
	addr := freePort(t)
	path := slowStartConfig(t, addr)
	logs := startRun(t, env, path, addr)
	// /healthz answers once the startup wait is over, when the progress
	// would have been printed.
	testutil.Eventually(t, 60*time.Second, "slow ready", func() bool {
		resp, err := http.Get("http://" + addr + "/status")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 64<<10)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return strings.Contains(b.String(), `"state": "ready"`)
	})
	if strings.Contains(logs.String(), "starting 2 servers") {
		t.Errorf("progress written to a non-terminal:\n%s", logs.String())
	}
}
