package hardening_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// Issue #32 (items 5, 6, 7): the limits count what a server holds and
// only what it holds, and nothing a server starts outlives it.

// hostileLimited is a server block running the hostile example with the
// limits inside (one attribute a line) and the server attributes extra.
func hostileLimited(name, limits, extra string) string {
	return fmt.Sprintf("server %q {\n  command = %s\n%s  limits {\n%s  }\n}\n", name, hclString(bins["hostile"]), extra, limits)
}

// startDaemon has the hostile server behind tool double-fork a setsid
// daemon and returns its pid; the daemon is killed when the test ends,
// whatever happened.
func startDaemon(t *testing.T, cs *mcp.ClientSession, tool string) int {
	t.Helper()
	pidfile := filepath.Join(t.TempDir(), "daemon.pid")
	os.Chmod(filepath.Dir(pidfile), 0o777)
	os.Chmod(filepath.Dir(filepath.Dir(pidfile)), 0o755)
	got := probe(t, cs, tool, "setsid-daemon", pidfile)
	pid, err := strconv.Atoi(strings.TrimPrefix(got, "escaped: daemon "))
	if err != nil || pid <= 0 {
		t.Fatalf("daemon probe: %s", got)
	}
	t.Cleanup(func() {
		if testutil.Alive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return pid
}

// memoryCgroup is the memory cgroup directory of process pid ("" when
// it has none, or the hierarchy is not at /sys/fs/cgroup/memory).
func memoryCgroup(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && parts[1] == "memory" && strings.Contains(parts[2], "/mcpvisor/") {
			return filepath.Join("/sys/fs/cgroup/memory", parts[2])
		}
	}
	return ""
}

// needRootCgroups skips a test that needs mcpvisor to make cgroups.
func needRootCgroups(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mcpvisor makes cgroups as root here")
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		t.Skip("no cgroup v1 memory hierarchy at /sys/fs/cgroup/memory")
	}
}

// A double-forked setsid daemon leaves the server's process group, not
// its cgroup: every stop of the server kills it — a restart, an idle
// stop, max_lifetime — and a SIGKILL of mcpvisor leaves it only until
// the next mcpvisor starts, which kills it and removes its cgroup.
func TestDaemonDiesWithItsServer(t *testing.T) {
	needRootCgroups(t)
	const limits = "    memory    = \"256MiB\"\n    processes = 64\n"
	t.Run("restart", func(t *testing.T) {
		mv := startMcpvisor(t, hostileLimited("hostile", limits, ""))
		cs := connectClient(t, mv)
		waitTool(t, cs, "hostile__probe")
		pid := startDaemon(t, cs, "hostile__probe")
		if code, out, errOut := runCLI(t, "restart", "-config", mv.config, "hostile"); code != 0 {
			t.Fatalf("mcpvisor restart: exit %d: %s%s", code, out, errOut)
		}
		testutil.Eventually(t, 30*time.Second, "the daemon to die with the restart", func() bool { return !testutil.Alive(pid) })
	})
	t.Run("idle stop", func(t *testing.T) {
		mv := startMcpvisor(t, hostileLimited("hostile", limits, "  idle_timeout = \"2s\"\n"))
		cs := connectClient(t, mv)
		waitTool(t, cs, "hostile__probe")
		pid := startDaemon(t, cs, "hostile__probe")
		testutil.Eventually(t, 30*time.Second, "the server to go idle", func() bool { return mv.status(t)["hostile"].State == "idle" })
		testutil.Eventually(t, 30*time.Second, "the daemon to die with the idle stop", func() bool { return !testutil.Alive(pid) })
	})
	t.Run("max_lifetime", func(t *testing.T) {
		mv := startMcpvisor(t, hostileLimited("hostile", limits, "  max_lifetime = \"3s\"\n"))
		cs := connectClient(t, mv)
		waitTool(t, cs, "hostile__probe")
		pid := startDaemon(t, cs, "hostile__probe")
		testutil.Eventually(t, 60*time.Second, "the daemon to die with the replaced process", func() bool { return !testutil.Alive(pid) })
	})
	t.Run("SIGKILL of mcpvisor", func(t *testing.T) {
		servers := hostileLimited("hostile", limits, "")
		mv := startMcpvisor(t, servers)
		cs := connectClient(t, mv)
		waitTool(t, cs, "hostile__probe")
		pid := startDaemon(t, cs, "hostile__probe")
		dir := memoryCgroup(pid)
		if dir == "" {
			t.Fatalf("the daemon %d is in no mcpvisor memory cgroup: %s", pid, readFile(fmt.Sprintf("/proc/%d/cgroup", pid)))
		}
		syscall.Kill(mv.pid, syscall.SIGKILL)
		<-mv.done
		// The keeper kills the process group; the daemon is not in it.
		time.Sleep(500 * time.Millisecond)
		if !testutil.Alive(pid) {
			t.Log("the daemon died with mcpvisor already (nothing left for the next one to do)")
		}
		next := startMcpvisor(t, servers)
		testutil.Eventually(t, 30*time.Second, "the next mcpvisor to kill the daemon", func() bool { return !testutil.Alive(pid) })
		testutil.Eventually(t, 30*time.Second, "the leftover cgroup to be removed", func() bool {
			_, err := os.Stat(dir)
			return os.IsNotExist(err)
		})
		if !strings.Contains(next.stderr.String(), "removed a server cgroup a previous mcpvisor left") {
			t.Errorf("the next mcpvisor did not log the leftover cgroup it removed:\n%s", tail(next.stderr.String(), 4<<10))
		}
	})
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// A 300MiB memfd, written and never mapped, counts against memory =
// "64MiB": in the memory cgroup as root, by the sampler as nobody (no
// cgroup: best_effort), and a nobody without best_effort is refused at
// start with the reason.
func TestMemfdCountsAgainstTheMemoryLimit(t *testing.T) {
	check := func(t *testing.T, mv *mcpvisor) {
		cs := connectClient(t, mv)
		waitTool(t, cs, "hostile__probe")
		before := mv.status(t)["hostile"].Pid
		// The probe may answer before the stop, or not at all.
		callText(cs, "hostile__probe", map[string]any{"name": "memfd", "arg": "300"}, time.Minute)
		testutil.Eventually(t, 60*time.Second, "the server to be stopped for its memory limit", func() bool {
			st := mv.status(t)["hostile"]
			return strings.Contains(st.LastError, "memory limit 64MiB exceeded") || (before != 0 && !testutil.Alive(before) && strings.Contains(mv.stderr.String(), "memory limit 64MiB exceeded"))
		})
	}
	t.Run("root", func(t *testing.T) {
		needRootCgroups(t)
		check(t, startMcpvisor(t, hostileLimited("hostile", "    memory = \"64MiB\"\n", "")))
	})
	t.Run("nobody best_effort", func(t *testing.T) {
		mv, _ := startMcpvisorAsUser(t, "", hostileLimited("hostile", "    memory = \"64MiB\"\n    best_effort = true\n", ""))
		check(t, mv)
	})
	t.Run("nobody refused", func(t *testing.T) {
		mv, _ := startMcpvisorAsUser(t, "", hostileLimited("hostile", "    memory = \"64MiB\"\n", ""))
		testutil.Eventually(t, 60*time.Second, "the start to be refused", func() bool {
			st := mv.status(t)["hostile"]
			return st.State == "parked" && strings.Contains(st.LastError, "limits.memory needs a memory cgroup") && strings.Contains(st.LastError, "best_effort = true")
		})
	})
}

// One server forking up to its processes limit does not keep another
// server of the same user from forking.
func TestProcessesLimitLeavesTheSiblingAlone(t *testing.T) {
	run := func(t *testing.T, mv *mcpvisor, wantFirst string) {
		cs := connectClient(t, mv)
		waitTool(t, cs, "a__probe")
		waitTool(t, cs, "b__probe")
		if got := probe(t, cs, "a__probe", "fork", "40"); !strings.HasPrefix(got, wantFirst) {
			t.Fatalf("server a forking 40 under processes = 16: %s, want %q…", got, wantFirst)
		}
		if got := probe(t, cs, "b__probe", "fork", "4"); got != "escaped: started 4" {
			t.Fatalf("server b forking 4 under its own processes = 16, after a forked to its limit: %s", got)
		}
	}
	t.Run("root", func(t *testing.T) {
		needRootCgroups(t)
		l := "    processes = 16\n"
		run(t, startMcpvisor(t, hostileLimited("a", l, "")+hostileLimited("b", l, "")), "refused: started")
	})
	t.Run("nobody best_effort", func(t *testing.T) {
		l := "    processes = 16\n    best_effort = true\n"
		mv, _ := startMcpvisorAsUser(t, "", hostileLimited("a", l, "")+hostileLimited("b", l, ""))
		run(t, mv, "escaped: started 40")
	})
}

// validate says, as the user it runs as, which limit a start would
// refuse: as nobody (no cgroups) memory and processes without best_effort
// are errors (exit 2), with best_effort warnings; as root they are
// enforced and nothing is said.
func TestValidateSaysWhatThisKernelCannotEnforce(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running as another user needs root")
	}
	if err := os.Chmod(filepath.Dir(bins["mcpvisor"]), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	validate := func(limits string, cred *syscall.Credential) (int, string) {
		path := filepath.Join(dir, "config.hcl")
		if err := os.WriteFile(path, []byte(hostileLimited("hostile", limits, "")), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bins["mcpvisor"], "validate", "-config", path)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	nobody := &syscall.Credential{Uid: nobodyUID, Gid: nobodyGID}
	code, out := validate("    memory = \"64MiB\"\n    processes = 16\n", nobody)
	if code != 2 || !strings.Contains(out, `Error: server "hostile": limits.memory needs a memory cgroup`) || !strings.Contains(out, "limits.processes needs a pids cgroup") {
		t.Errorf("validate as nobody: exit %d, want 2 naming both limits:\n%s", code, out)
	}
	code, out = validate("    memory = \"64MiB\"\n    processes = 16\n    best_effort = true\n", nobody)
	if code != 0 || !strings.Contains(out, `Warning: server "hostile": limits.memory needs a memory cgroup`) {
		t.Errorf("validate as nobody with best_effort: exit %d, want 0 with warnings:\n%s", code, out)
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err == nil {
		code, out = validate("    memory = \"64MiB\"\n    processes = 16\n", nil)
		if code != 0 || strings.Contains(out, "cgroup") {
			t.Errorf("validate as root: exit %d, want 0 and nothing about cgroups:\n%s", code, out)
		}
	}
}
