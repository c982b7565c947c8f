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

// A sandboxed server runs under its init (docs/design.md §18.1): the pid
// mcpvisor holds is the init's, which leads the group (no keeper); the
// server is the init's child in the init's pid namespace, in the
// init's group, with no_new_privs, under its private TMPDIR; Close
// removes that directory.
func TestSandboxedProcessRunsUnderItsInit(t *testing.T) {
	p, err := transport.StartProcess(transport.ProcessConfig{
		Command: "sh",
		Args:    []string{"-c", `echo "pid=$$ tmp=$TMPDIR" >&2; exec sleep 60`},
		Env:     transport.ChildEnv(nil),
		Sandbox: &config.Sandbox{},
		Server:  "boxed",
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
	init := p.Pid()
	if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", init)); !strings.Contains(string(st), fmt.Sprintf("NSpid:\t%d\t1\n", init)) {
		t.Errorf("the process mcpvisor holds is not pid 1 of a namespace of its own")
	}
	children, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", init, init))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(children))
	if len(f) != 1 {
		t.Fatalf("the init %d has children %q; want the server alone", init, f)
	}
	var server int
	fmt.Sscan(f[0], &server)
	if pgid, err := syscall.Getpgid(init); err != nil || pgid != init {
		t.Errorf("the init is in group %d (%v); want its own", pgid, err)
	}
	if pgid, err := syscall.Getpgid(server); err != nil || pgid != init {
		t.Errorf("the server is in group %d (%v); want its init's, %d", pgid, err, init)
	}
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", server))
	if !strings.Contains(string(status), "NoNewPrivs:\t1") {
		t.Errorf("the server runs without no_new_privs: not under Landlock")
	}
	if !strings.Contains(string(status), fmt.Sprintf("NSpid:\t%d\t%d\n", server, pid)) {
		t.Errorf("the server (pid %d to itself) is not in its init's pid namespace", pid)
	}
	if st, err := os.Stat(tmp); err != nil || !st.IsDir() || !strings.HasPrefix(filepath.Base(tmp), "mcpvisor-boxed-") {
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

// A contained server's init is not the server's: its memory (a Go
// runtime, tens of MiB of the binary's pages) is left out of the
// server's usage, with and without a cgroup.
func TestContainedUsageLeavesOutTheInit(t *testing.T) {
	for name, limits := range map[string]config.Limits{"group": {}, "cgroup": {Memory: 256 << 20}} {
		t.Run(name, func(t *testing.T) {
			p, err := transport.StartProcess(transport.ProcessConfig{
				Command: "sleep", Args: []string{"60"}, Env: transport.ChildEnv(nil),
				Sandbox: &config.Sandbox{}, Limits: limits, Server: "usage",
			})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close(context.Background())
			testutil.Eventually(t, 10*time.Second, "the server running sleep", func() bool {
				b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p.Pid(), p.Pid()))
				f := strings.Fields(string(b))
				if len(f) != 1 {
					return false
				}
				comm, _ := os.ReadFile("/proc/" + f[0] + "/comm")
				return strings.TrimSpace(string(comm)) == "sleep"
			})
			u, ok := p.Usage()
			if !ok {
				t.Fatal("the server cannot be measured")
			}
			st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
			if err != nil {
				t.Fatal(err)
			}
			var initKB int64
			for _, l := range strings.Split(string(st), "\n") {
				if strings.HasPrefix(l, "VmRSS:") {
					fmt.Sscan(strings.TrimPrefix(l, "VmRSS:"), &initKB)
				}
			}
			if u.Processes != 1 || u.RSS >= initKB<<10 {
				t.Errorf("usage %d processes, RSS %d bytes; want the sleep alone (1), less than the init's %d KiB", u.Processes, u.RSS, initKB)
			}
		})
	}
}
