package transport_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
	"github.com/mcpvisor/mcpvisor/host/internal/transport"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// A sandboxed server is the launcher exec'd in place (docs/design.md
// §18.1): the pid mcpvisor holds is the server's own, it is in the
// keeper's group, it runs with no_new_privs under its private TMPDIR, and
// Close removes that directory.
func TestSandboxedProcessIsExecdInPlace(t *testing.T) {
	p, err := transport.StartProcess(transport.ProcessConfig{
		Command: "sh",
		Args:    []string{"-c", `echo "pid=$$ tmp=$TMPDIR" >&2; exec sleep 60`},
		Env:     transport.ChildEnv(nil),
		Sandbox: &config.Sandbox{},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	var line string
	testutil.Eventually(t, 10*time.Second, "the server's stderr line", func() bool {
		for _, l := range p.StderrTail() {
			if strings.HasPrefix(l, "pid=") {
				line = l
				return true
			}
		}
		return false
	})
	var pid int
	var tmp string
	fmt.Sscanf(line, "pid=%d tmp=%s", &pid, &tmp)
	if pid != p.Pid() {
		t.Errorf("the server's own pid is %d, mcpvisor holds %d", pid, p.Pid())
	}
	if pgid, err := syscall.Getpgid(pid); err != nil || pgid == pid {
		t.Errorf("the server leads its own group (%d, %v): it should be in its keeper's", pgid, err)
	}
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if !strings.Contains(string(status), "NoNewPrivs:\t1") {
		t.Errorf("the server runs without no_new_privs: not under Landlock")
	}
	if st, err := os.Stat(tmp); err != nil || !st.IsDir() || !strings.HasPrefix(filepath.Base(tmp), "mcpvisor-") {
		t.Fatalf("TMPDIR %q is not the private directory: %v", tmp, err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the private TMPDIR %s outlived the server: %v", tmp, err)
	}
}

// A path of the block that does not exist is refused before anything
// starts, as a start error no retry can fix, naming the path.
func TestSandboxMissingPathCannotStart(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gone")
	_, err := transport.StartProcess(transport.ProcessConfig{
		Command: "sh", Args: []string{"-c", "exit 0"}, Server: "notes",
		Sandbox: &config.Sandbox{Read: []string{missing}},
	})
	if !errors.Is(err, recovery.ErrCannotStart) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("want ErrCannotStart naming %s; got %v", missing, err)
	}
}
