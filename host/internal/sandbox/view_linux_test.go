package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// viewHelperEnv makes the test binary, exec'd by the launcher as the
// "server", do one thing of the view tests: "ls DIR", "pwd", "exit N",
// "kill" (SIGKILL itself), "daemon TAG" (start a setsid'd sleep whose
// command line holds TAG, and exit).
const viewHelperEnv = "MCPVISOR_VIEW_TEST_HELPER"

func viewHelper(h string) int {
	what, arg, _ := strings.Cut(h, " ")
	switch what {
	case "ls":
		ents, err := os.ReadDir(arg)
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		for _, e := range ents {
			fmt.Println(e.Name())
		}
	case "pwd":
		d, _ := os.Getwd()
		fmt.Println(d)
	case "exit":
		n, _ := strconv.Atoi(arg)
		return n
	case "kill":
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
	case "daemon":
		cmd := exec.Command("sleep", arg)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println("started")
	}
	return 0
}

// viewSpec prepares the Spec of the test binary run as view helper h
// under sandbox block sb, in working directory cwd.
func viewSpec(t *testing.T, sb *config.Sandbox, cwd, h string) *Spec {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), viewHelperEnv + "=" + h}
	spec, tmp, _, err := Prepare(sb, "view", self, self, nil, env, cwd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	return spec
}

// runIn is run with the child in directory dir, and the init's report
// of the exit (ExitErr) as the error.
func runIn(t *testing.T, spec *Spec, dir string) (string, error) {
	t.Helper()
	cmd, err := Command(spec)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr, cmd.Dir = &out, &out, dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	ProcAttr(spec, cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		spec.CloseStatus()
		t.Fatal(err)
	}
	spec.Started()
	err = spec.ExitErr(cmd.Wait())
	return out.String(), err
}

// The server's /proc is its pid namespace's: it sees itself and its
// init, pid 1, and no other process of the machine.
func TestViewProcShowsOnlyItsNamespace(t *testing.T) {
	needLandlock(t, 3)
	out, err := runIn(t, viewSpec(t, &config.Sandbox{}, "", "ls /proc"), "")
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var pids []int
	for _, name := range strings.Fields(out) {
		if n, err := strconv.Atoi(name); err == nil {
			pids = append(pids, n)
		}
	}
	if len(pids) != 2 || !slices.Contains(pids, 1) {
		t.Fatalf("the server's /proc lists processes %v; want its init (1) and itself", pids)
	}
}

// /etc is not granted whole: the runtime files are there, /etc/shadow
// is not; and a block that grants /etc itself finds /etc/shadow empty.
func TestViewEtc(t *testing.T) {
	needLandlock(t, 3)
	if _, err := os.Stat("/etc/shadow"); err != nil {
		t.Skip("no /etc/shadow here")
	}
	if stdout, stderr, err := run(t, helperSpec(t, &config.Sandbox{}, "read /etc/passwd")); err != nil || !strings.Contains(stdout, "root:") {
		t.Fatalf("read /etc/passwd: %v, stdout %q, stderr %q", err, stdout, stderr)
	}
	if stdout, _, err := run(t, helperSpec(t, &config.Sandbox{}, "read /etc/shadow")); err == nil || !strings.Contains(stdout, "no such file or directory") {
		t.Fatalf("read /etc/shadow: %v, stdout %q; want no such file or directory", err, stdout)
	}
	// Not granted, not there: not even to be refused.
	if stdout, _, err := run(t, helperSpec(t, &config.Sandbox{}, "read /etc/fstab")); err == nil || !strings.Contains(stdout, "no such file or directory") {
		t.Fatalf("read /etc/fstab: %v, stdout %q; want no such file or directory", err, stdout)
	}
	stdout, stderr, err := run(t, helperSpec(t, &config.Sandbox{Read: []string{"/etc"}}, "read /etc/shadow"))
	if err != nil || stdout != "read: \n" {
		t.Fatalf("read /etc/shadow with /etc granted: %v, stdout %q, stderr %q; want it empty", err, stdout, stderr)
	}
}

// The working directory (by default the configuration file's) is not
// granted: the server starts there and finds it empty; granted, it sees
// its files.
func TestViewWorkingDirectoryNotGranted(t *testing.T) {
	needLandlock(t, 3)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "config.hcl"), []byte(`secret = "x"`), 0o600)
	out, err := runIn(t, viewSpec(t, &config.Sandbox{}, dir, "pwd"), dir)
	if err != nil || strings.TrimSpace(out) != dir {
		t.Fatalf("pwd: %v, %q; want %s", err, out, dir)
	}
	spec := viewSpec(t, &config.Sandbox{}, dir, "")
	spec.Env = append(spec.Env, helperEnv+"=read config.hcl")
	out, err = runIn(t, spec, dir)
	if err == nil || !strings.Contains(out, "no such file or directory") {
		t.Fatalf("read config.hcl in the working directory: %v, %q; want no such file or directory", err, out)
	}
	out, err = runIn(t, viewSpec(t, &config.Sandbox{Read: []string{dir}}, dir, "ls ."), dir)
	if err != nil || strings.TrimSpace(out) != "config.hcl" {
		t.Fatalf("ls of the working directory granted: %v, %q; want config.hcl", err, out)
	}
}

// The init reports the server's exit as cmd.Wait would have.
func TestInitReportsExitStatus(t *testing.T) {
	needLandlock(t, 3)
	for h, want := range map[string]string{"exit 0": "", "exit 3": "exit status 3", "kill": "signal: killed"} {
		_, err := runIn(t, viewSpec(t, &config.Sandbox{}, "", h), "")
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("%s: the exit is %q, want %q", h, got, want)
		}
	}
}

// When the server exits, nothing it started outlives it: the init
// exits with it, and the kernel kills the rest of the namespace (a
// setsid'd child here).
func TestInitEndsTheNamespace(t *testing.T) {
	needLandlock(t, 3)
	tag := fmt.Sprintf("%d.%d", 1000+os.Getpid()%1000, time.Now().UnixNano()%1000000)
	out, err := runIn(t, viewSpec(t, &config.Sandbox{}, "", "daemon "+tag), "")
	if err != nil || !strings.Contains(out, "started") {
		t.Fatalf("daemon: %v, %q", err, out)
	}
	if pid := findSleep(tag); pid != 0 {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the server's setsid'd child (pid %d) outlived it", pid)
	}
}

func findSleep(tag string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), "sleep\x00"+tag) {
			pid, _ := strconv.Atoi(e.Name())
			return pid
		}
	}
	return 0
}

// The defaults grant neither /etc as a whole nor the working directory.
func TestDefaultsNoEtcNoWorkingDirectory(t *testing.T) {
	dir := t.TempDir()
	r, err := Effective(&config.Sandbox{}, "s", "sh", "/bin/sh", []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(r.Read, r.Write...) {
		if p == "/etc" || p == dir || p == "/etc/shadow" {
			t.Errorf("the defaults grant %s", p)
		}
	}
	if !slices.Contains(r.Read, "/etc/passwd") {
		t.Errorf("the defaults do not grant /etc/passwd: %q", r.Read)
	}
}
