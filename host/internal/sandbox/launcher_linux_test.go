package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// helperEnv makes the test binary, exec'd by the launcher as the
// "server", do one thing and print the outcome: "read PATH", "dial
// ADDR", "env".
const helperEnv = "MCPVISOR_SANDBOX_TEST_HELPER"

func TestMain(m *testing.M) {
	if h, ok := os.LookupEnv(helperEnv); ok {
		os.Exit(helper(h))
	}
	if h, ok := os.LookupEnv(viewHelperEnv); ok {
		os.Exit(viewHelper(h))
	}
	os.Exit(testutil.RunWithLeakCheck(m))
}

func helper(h string) int {
	what, arg, _ := strings.Cut(h, " ")
	switch what {
	case "read":
		b, err := os.ReadFile(arg)
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Printf("read: %s\n", b)
	case "write":
		if err := os.WriteFile(arg, []byte("x"), 0o600); err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println("wrote")
	case "dial":
		c, err := net.Dial("tcp", arg)
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		c.Close()
		fmt.Println("connected")
	case "caps":
		b, _ := os.ReadFile("/proc/self/status")
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "Cap") {
				fmt.Println(l)
			}
		}
	case "env":
		for _, kv := range os.Environ() {
			fmt.Println(kv)
		}
	default:
		if f, ok := moreHelpers[what]; ok {
			return f(arg)
		}
		fmt.Println("unknown helper", what)
		return 2
	}
	return 0
}

// run starts the launcher with spec as a real child process and returns
// its stdout, stderr and exit error.
func run(t *testing.T, spec *Spec) (string, string, error) {
	t.Helper()
	cmd, err := Command(spec)
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	ProcAttr(spec, cmd.SysProcAttr)
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// helperSpec prepares the Spec of the test binary run as helper h under
// sandbox block sb.
func helperSpec(t *testing.T, sb *config.Sandbox, h string) *Spec {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), helperEnv + "=" + h}
	spec, tmp, warning, err := Prepare(sb, "test", self, self, nil, env, "")
	if err != nil {
		t.Fatal(err)
	}
	if warning != "" {
		t.Fatalf("warning on a kernel with Landlock ABI %d: %s", abi(), warning)
	}
	if tmp != "" {
		t.Cleanup(func() { os.RemoveAll(tmp) })
	}
	return spec
}

// landlockOnly is spec without its view: the Landlock layer alone.
func landlockOnly(spec *Spec) *Spec {
	spec.View = nil
	return spec
}

func needLandlock(t *testing.T, need int) {
	t.Helper()
	if abi() < need {
		t.Skipf("this kernel has Landlock ABI %d; the test needs %d", abi(), need)
	}
}

func TestLandlockReadInsideAllowedOutsideDenied(t *testing.T) {
	needLandlock(t, 3)
	in, out := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(in, "f"), []byte("inside"), 0o600)
	os.WriteFile(filepath.Join(out, "f"), []byte("outside"), 0o600)
	sb := &config.Sandbox{Read: []string{in}}

	stdout, stderr, err := run(t, helperSpec(t, sb, "read "+filepath.Join(in, "f")))
	if err != nil || stdout != "read: inside\n" {
		t.Fatalf("read inside: %v, stdout %q, stderr %q", err, stdout, stderr)
	}
	// Landlock alone (without the view, which would not even show the
	// path): the kernel's refusal.
	stdout, stderr, err = run(t, landlockOnly(helperSpec(t, sb, "read "+filepath.Join(out, "f"))))
	if err == nil || !strings.Contains(stdout, "permission denied") {
		t.Fatalf("read outside: want the kernel's permission denied; got %v, stdout %q, stderr %q", err, stdout, stderr)
	}
	// Read is not write.
	stdout, _, err = run(t, landlockOnly(helperSpec(t, sb, "write "+filepath.Join(in, "g"))))
	if err == nil || !strings.Contains(stdout, "permission denied") {
		t.Fatalf("write in a read path: want permission denied; got %v, stdout %q", err, stdout)
	}
	// With the view: the path outside does not exist, the read path is
	// a read-only mount.
	stdout, stderr, err = run(t, helperSpec(t, sb, "read "+filepath.Join(out, "f")))
	if err == nil || !strings.Contains(stdout, "no such file or directory") {
		t.Fatalf("read outside in the view: want no such file or directory; got %v, stdout %q, stderr %q", err, stdout, stderr)
	}
	stdout, _, err = run(t, helperSpec(t, sb, "write "+filepath.Join(in, "g")))
	if err == nil || !strings.Contains(stdout, "read-only file system") {
		t.Fatalf("write in a read path in the view: want read-only file system; got %v, stdout %q", err, stdout)
	}
	stdout, stderr, err = run(t, helperSpec(t, &config.Sandbox{Write: []string{in}}, "write "+filepath.Join(in, "g")))
	if err != nil || stdout != "wrote\n" {
		t.Fatalf("write in a write path: %v, stdout %q, stderr %q", err, stdout, stderr)
	}
}

func TestSpecNeverReachesServerAndTmpdirIsPrivate(t *testing.T) {
	needLandlock(t, 3)
	spec := helperSpec(t, &config.Sandbox{}, "env")
	stdout, stderr, err := run(t, spec)
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	if strings.Contains(stdout, specEnv) {
		t.Errorf("the server's environment holds the launch spec:\n%s", stdout)
	}
	tmp := envValue(strings.Split(stdout, "\n"), "TMPDIR")
	if tmp == "" || tmp != envValue(spec.Env, "TMPDIR") {
		t.Fatalf("TMPDIR = %q, want the private directory %q", tmp, envValue(spec.Env, "TMPDIR"))
	}
	st, err := os.Stat(tmp)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("private temp dir: %v, mode %v", err, st.Mode())
	}
}

func TestNetworkNoneReachesNoHostListener(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	addr := ln.Addr().String()
	// The same dial without the sandbox reaches the listener: the test
	// can fail.
	stdout, _, err := run(t, &Spec{Path: mustSelf(t), Args: []string{"helper"}, Env: []string{helperEnv + "=dial " + addr}, Rlimits: []Rlimit{{Resource: syscall.RLIMIT_CORE}}})
	if err != nil || stdout != "connected\n" {
		t.Fatalf("unsandboxed dial: %v, %q", err, stdout)
	}
	<-accepted
	needLandlock(t, 3)
	stdout, stderr, err := run(t, helperSpec(t, &config.Sandbox{Network: config.NetworkNone}, "dial "+addr))
	if err == nil || !strings.Contains(stdout, "connection refused") {
		// Its own loopback is up and empty: refused, not unreachable.
		t.Fatalf("dial under network none: want connection refused; got %v, stdout %q, stderr %q", err, stdout, stderr)
	}
	select {
	case <-accepted:
		t.Fatal("the host's listener accepted a connection from a server under network = none")
	default:
	}
}

func TestConnectAllowsListedPortOnly(t *testing.T) {
	needLandlock(t, 4)
	allowed, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer allowed.Close()
	other, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	port := allowed.Addr().(*net.TCPAddr).Port
	sb := &config.Sandbox{Network: config.NetworkAny, Connect: []int{port}}
	stdout, stderr, err := run(t, helperSpec(t, sb, "dial "+allowed.Addr().String()))
	if err != nil || stdout != "connected\n" {
		t.Fatalf("dial a listed port: %v, stdout %q, stderr %q", err, stdout, stderr)
	}
	stdout, stderr, err = run(t, helperSpec(t, sb, "dial "+other.Addr().String()))
	if err == nil || !strings.Contains(stdout, "permission denied") {
		t.Fatalf("dial an unlisted port: want permission denied; got %v, stdout %q, stderr %q", err, stdout, stderr)
	}
}

func TestRlimitsApplied(t *testing.T) {
	spec := &Spec{Path: "/bin/sh", Args: []string{"sh", "-c", "ulimit -n; ulimit -c"}, Env: []string{},
		Rlimits: []Rlimit{{Resource: syscall.RLIMIT_NOFILE, Cur: 77, Max: 77}, {Resource: syscall.RLIMIT_CORE, Cur: 0, Max: 0}}}
	stdout, stderr, err := run(t, spec)
	if err != nil || stdout != "77\n0\n" {
		t.Fatalf("ulimit under rlimits: %v, stdout %q, stderr %q", err, stdout, stderr)
	}
}

func TestCgroupJoined(t *testing.T) {
	root, rel := writableCgroup(t)
	dir := filepath.Join(root, rel)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot create a cgroup: %v", err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	spec := &Spec{Path: "/bin/cat", Args: []string{"cat", "/proc/self/cgroup"}, Env: []string{}, Cgroups: []string{dir}}
	stdout, stderr, err := run(t, spec)
	if err != nil || !strings.Contains(stdout, "/"+rel+"\n") {
		t.Fatalf("cgroup of the server: %v, stdout %q, stderr %q; want %s", err, stdout, stderr, rel)
	}
	spec.Cgroups = []string{filepath.Join(root, "missing-"+rel)}
	_, stderr, err = run(t, spec)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != ExitLaunchFailed || !strings.Contains(stderr, "joining cgroup") {
		t.Fatalf("missing cgroup: want exit %d naming it; got %v, %q", ExitLaunchFailed, err, stderr)
	}
}

// writableCgroup finds a cgroup hierarchy this test may create a group
// in: cgroup2 at /sys/fs/cgroup, else v1's pids controller.
func writableCgroup(t *testing.T) (root, name string) {
	name = fmt.Sprintf("mcpvisor-test-%d", os.Getpid())
	for _, r := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/pids"} {
		if _, err := os.Stat(filepath.Join(r, "cgroup.procs")); err == nil && syscall.Access(r, 2) == nil {
			return r, name
		}
	}
	t.Skip("no writable cgroup hierarchy")
	return "", ""
}

func TestMissingPathRefused(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	_, _, _, err := Prepare(&config.Sandbox{Write: []string{missing}}, "notes", "/bin/cat", "/bin/cat", nil, nil, "")
	if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("want an error naming %s; got %v", missing, err)
	}
}

func TestOldKernelFailsClosedUnlessBestEffort(t *testing.T) {
	saved := abi
	t.Cleanup(func() { abi = saved })
	abi = func() int { return 3 }
	_, _, _, err := Prepare(&config.Sandbox{Connect: []int{443}}, "web", "/bin/cat", "/bin/cat", nil, nil, "")
	if err == nil || !strings.Contains(err.Error(), "Landlock ABI 3") || !strings.Contains(err.Error(), "needs ABI 4") || !strings.Contains(err.Error(), "best_effort") {
		t.Fatalf("want the found and needed ABI; got %v", err)
	}
	_, tmp, warning, err := Prepare(&config.Sandbox{Connect: []int{443}, BestEffort: true}, "web", "/bin/cat", "/bin/cat", nil, nil, "")
	if err != nil || !strings.Contains(warning, "best_effort") {
		t.Fatalf("best effort: want a warning; got %v, %q", err, warning)
	}
	os.RemoveAll(tmp)
}

func mustSelf(t *testing.T) string {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return self
}

// A default never opens the home directory as a whole: a server whose
// working directory is ~ and whose command sits in ~ itself may read
// the command, not ~/.ssh.
func TestDefaultsNeverOpenHome(t *testing.T) {
	needLandlock(t, 3)
	home := t.TempDir()
	os.Mkdir(filepath.Join(home, ".ssh"), 0o700)
	secret := filepath.Join(home, ".ssh", "id_ed25519")
	os.WriteFile(secret, []byte("secret"), 0o600)
	self, err := os.ReadFile(mustSelf(t))
	if err != nil {
		t.Fatal(err)
	}
	cmd := filepath.Join(home, "server")
	if err := os.WriteFile(cmd, self, 0o700); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + home, helperEnv + "=read " + secret}
	spec, tmp, _, err := Prepare(&config.Sandbox{}, "home", cmd, cmd, nil, env, home)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	for _, p := range spec.Landlock.Read {
		if p == home || p == "/" {
			t.Errorf("the defaults grant %s", p)
		}
	}
	stdout, stderr, err := run(t, spec)
	// Not in the server's view at all (view_linux.go): not even there
	// to be refused.
	if err == nil || !strings.Contains(stdout, "no such file or directory") {
		t.Fatalf("read ~/.ssh: want no such file or directory; got %v, stdout %q, stderr %q", err, stdout, stderr)
	}
}

// As a user other than root, network = "none" takes a user namespace too:
// the server cannot reach the host's listeners, and the launcher's ambient
// CAP_NET_ADMIN (for the loopback) does not reach the server. As root the
// test runs itself again as nobody (uid 65534), from a copy of the test
// binary that user may execute.
func TestNetworkNoneAsUserLeavesNoCapabilities(t *testing.T) {
	needLandlock(t, 3)
	if os.Geteuid() == 0 {
		runAsNobody(t, "TestNetworkNoneAsUserLeavesNoCapabilities|TestNetworkNoneReachesNoHostListener")
		return
	}
	stdout, stderr, err := run(t, helperSpec(t, &config.Sandbox{Network: config.NetworkNone}, "caps"))
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] != "CapBnd:" && strings.Trim(f[1], "0") != "" {
			t.Errorf("the server has capabilities: %s", l)
		}
	}
}

// runAsNobody runs the tests matching pattern in a copy of this test binary
// as uid and gid 65534 and fails unless they all pass.
func runAsNobody(t *testing.T, pattern string) {
	t.Helper()
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o777)
	}
	b, err := os.ReadFile(mustSelf(t))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sandbox.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.v", "-test.run=^("+pattern+")$")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "TMPDIR=" + dir}
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), "--- SKIP") || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("as uid 65534: %v\n%s", err, out)
	}
	t.Logf("as uid 65534:\n%s", out)
}
