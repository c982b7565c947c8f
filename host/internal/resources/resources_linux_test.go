package resources

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// The test binary doubles as the processes the limits are tried on: with
// helperEnv set it runs helperMain instead of the tests. A helper waits
// for a line on stdin before it acts, so that the test can Apply the
// limits first (Apply works from outside, after the start).
const helperEnv = "MCPVISOR_RESOURCES_HELPER"

var errSentinel = errors.New("sentinel")

// hangGuard bounds a wait for a helper that should be killed: far longer
// than the kernel takes, it only tells "killed" from "never".
const hangGuard = 60 * time.Second

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		helperMain(mode)
		return
	}
	os.Exit(m.Run())
}

// helperMain is one helper: "alloc N" touches N MiB and sleeps; "fork"
// starts children until fork fails and prints how many it started and the
// error; "files" opens files until that fails and prints the count and
// the error; "sleep" sleeps.
func helperMain(mode string) {
	bufio.NewReader(os.Stdin).ReadString('\n')
	f := strings.Fields(mode)
	switch f[0] {
	case "alloc":
		n, _ := strconv.Atoi(f[1])
		var keep [][]byte
		for i := 0; i < n; i++ {
			b := make([]byte, 1<<20)
			for j := range b {
				b[j] = byte(j)
			}
			keep = append(keep, b)
		}
		fmt.Println("allocated", len(keep))
		time.Sleep(time.Hour)
	case "fork":
		// fork [N]: until fork fails, or N started.
		limit := 1000
		if len(f) > 1 {
			limit, _ = strconv.Atoi(f[1])
		}
		var started int
		for {
			cmd := exec.Command("/bin/sleep", "3600")
			if err := cmd.Start(); err != nil {
				fmt.Printf("started %d: %v\n", started, err)
				break
			}
			started++
			if started >= limit {
				fmt.Println("started", started, "without an error")
				break
			}
		}
		time.Sleep(time.Hour)
	case "files":
		var opened []*os.File
		for {
			f, err := os.Open("/dev/null")
			if err != nil {
				fmt.Printf("opened %d: %v\n", len(opened), err)
				break
			}
			opened = append(opened, f)
			if len(opened) > 100000 {
				fmt.Println("opened", len(opened), "without an error")
				break
			}
		}
		time.Sleep(time.Hour)
	case "memfd":
		// memfd N [map]: N MiB in a memfd, written or mapped and touched.
		n, _ := strconv.Atoi(f[1])
		fd, err := unix.MemfdCreate("hog", 0)
		if err != nil {
			fmt.Println("error", err)
			break
		}
		if len(f) > 2 {
			unix.Ftruncate(fd, int64(n)<<20)
			m, err := unix.Mmap(fd, 0, n<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			if err != nil {
				fmt.Println("error", err)
				break
			}
			for j := 0; j < len(m); j += 4096 {
				m[j] = 1
			}
		} else {
			chunk := make([]byte, 1<<20)
			for i := range chunk {
				chunk[i] = 1
			}
			for i := 0; i < n; i++ {
				unix.Write(fd, chunk)
			}
		}
		fmt.Println("memfd", n)
		time.Sleep(time.Hour)
	case "sleep":
		fmt.Println("sleeping")
		time.Sleep(time.Hour)
	case "setsid":
		// A child that leaves the process group.
		cmd := exec.Command("/bin/sleep", "3600")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			fmt.Println("error", err)
		} else {
			fmt.Println("started", cmd.Process.Pid)
		}
		time.Sleep(time.Hour)
	}
}

// helper is one running helper process, leading its own process group.
type helper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	done  chan struct{}
	err   error
}

func startHelper(t *testing.T, mode string) *helper {
	t.Helper()
	return startHelperAs(t, mode, -1)
}

// startHelperAs starts a helper as user uid (-1: as this process).
func startHelperAs(t *testing.T, mode string, uid int) *helper {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if uid >= 0 {
		// The build directory is the builder's alone: run a copy.
		exe = copyForAnyone(t, exe)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if uid >= 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout), done: make(chan struct{})}
	go func() {
		h.err = cmd.Wait()
		close(h.done)
	}()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-h.done
	})
	return h
}

// copyForAnyone copies the executable exe to a directory any user may
// run it from.
func copyForAnyone(t *testing.T, exe string) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "helper")
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// go tells the helper to act.
func (h *helper) run(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(h.stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
}

// line is the helper's next line of output ("" once it is gone).
func (h *helper) line() string {
	s, _ := h.out.ReadString('\n')
	return strings.TrimSpace(s)
}

// testGroup is New, closed when the test ends; it skips the test when
// this machine has no cgroup for the limits (the fallback is tested
// apart).
func testGroup(t *testing.T, l Limits) *Group {
	t.Helper()
	g, err := New(t.Name(), l, errSentinel, nil)
	if errors.Is(err, ErrNotEnforceable) {
		t.Skipf("no cgroup for %+v here (hierarchies found: %v): %v", l, hierarchies(), err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g
}

// needCgroup skips the test when this kernel or this user cannot make the
// cgroup a test needs.
func needCgroup(t *testing.T, dir, what string) {
	t.Helper()
	if dir == "" {
		t.Skipf("no %s cgroup can be made here (hierarchies found: %v); the fallback is tested apart", what, hierarchies())
	}
}

func TestMemoryCgroupOOMKillIsAMemoryLimitStop(t *testing.T) {
	g := testGroup(t, Limits{Memory: 32 << 20})
	needCgroup(t, g.memDir, "memory")
	h := startHelper(t, "alloc 256")
	if err := g.Apply(h.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if e := g.Check(h.cmd.Process.Pid, 0); e != nil {
		t.Fatalf("a group that has not allocated yet is over its limit: %v", e)
	}
	h.run(t)
	select {
	case <-h.done:
	case <-time.After(hangGuard):
		t.Fatalf("the helper allocating 256MiB under a 32MiB limit still runs after %s (it said %q)", hangGuard, h.line())
	}
	if !strings.Contains(fmt.Sprint(h.err), "killed") {
		t.Fatalf("the helper allocating 256MiB under a 32MiB limit ended with %v, want killed by the OOM killer", h.err)
	}
	if n := g.OOMKills(); n == 0 {
		t.Fatal("the cgroup counts no OOM kill")
	}
	e := g.Check(h.cmd.Process.Pid, 0)
	if e == nil || !e.OOMKill || e.Error() != "memory limit 32MiB exceeded" || !errors.Is(e, errSentinel) {
		t.Fatalf("Check after the OOM kill = %#v, want an OOM kill error \"memory limit 32MiB exceeded\" matching the sentinel", e)
	}
	dirs := g.CgroupDirs()
	g.Close()
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s still there after Close: %v", d, err)
		}
	}
}

func TestSampledMemoryOverLimit(t *testing.T) {
	// A Group without a memory cgroup: the fallback samples RSS.
	g := &Group{limits: Limits{Memory: 32 << 20}, sentinel: errSentinel}
	h := startHelper(t, "alloc 64")
	pgid := h.cmd.Process.Pid
	if e := g.Check(pgid, 0); e != nil {
		t.Fatalf("over the limit before allocating: %v", e)
	}
	h.run(t)
	if l := h.line(); l != "allocated 64" {
		t.Fatalf("helper said %q", l)
	}
	e := g.Check(pgid, 0)
	if e == nil || e.OOMKill || e.RSS <= 32<<20 || e.Error() != "memory limit 32MiB exceeded" || !errors.Is(e, errSentinel) {
		t.Fatalf("Check = %#v, want the sampled RSS over 32MiB", e)
	}
	// Watch reports the same and returns.
	over := make(chan *MemoryLimitError, 1)
	go g.Watch(pgid, 0, make(chan struct{}), func(e *MemoryLimitError) { over <- e })
	if e := <-over; e.RSS <= 32<<20 {
		t.Fatalf("Watch reported %#v", e)
	}
	// The keeper (except) is left out: the same group without its only
	// member is within the limit.
	if e := g.Check(pgid, pgid); e != nil {
		t.Fatalf("with its only member left out the group is over its limit: %#v", e)
	}
}

func TestGroupUsageSumsTheGroup(t *testing.T) {
	h := startHelper(t, "alloc 40")
	h.run(t)
	if l := h.line(); l != "allocated 40" {
		t.Fatalf("helper said %q", l)
	}
	pgid := h.cmd.Process.Pid
	one, ok := GroupUsage(pgid, 0)
	if !ok || one.Processes != 1 || one.RSS < 40<<20 {
		t.Fatalf("GroupUsage of one helper = %+v, %v; want 1 process with ≥ 40MiB", one, ok)
	}
	// A second process in the same group adds to it.
	sleeper := exec.Command("/bin/sleep", "3600")
	sleeper.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	two, ok := GroupUsage(pgid, 0)
	if !ok || two.Processes != 2 || two.RSS <= one.RSS-(1<<20) {
		t.Fatalf("GroupUsage of two = %+v, want 2 processes", two)
	}
	if u, _ := GroupUsage(pgid, sleeper.Process.Pid); u.Processes != 1 {
		t.Fatalf("GroupUsage leaving the sleeper out counts %d processes", u.Processes)
	}
}

func TestProcessesLimitStopsForkLoop(t *testing.T) {
	g := testGroup(t, Limits{Processes: 8})
	h := startHelper(t, "fork")
	if err := g.Apply(h.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if g.pidsDir == "" && os.Geteuid() == 0 {
		t.Skip("no pids cgroup here, and root is exempt from RLIMIT_NPROC")
	}
	h.run(t)
	l := h.line()
	var n int
	if _, err := fmt.Sscanf(l, "started %d:", &n); err != nil || !strings.Contains(l, "resource temporarily unavailable") {
		t.Fatalf("fork loop said %q, want \"started N: … resource temporarily unavailable\"", l)
	}
	// The helper's Go runtime has threads of its own, which count too.
	if n >= 8 {
		t.Fatalf("started %d processes under processes = 8", n)
	}
	t.Logf("%s (mode %s)", l, g.Mode())
}

func TestOpenFilesLimit(t *testing.T) {
	g := testGroup(t, Limits{OpenFiles: 64})
	h := startHelper(t, "files")
	if err := g.Apply(h.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	h.run(t)
	l := h.line()
	var n int
	if _, err := fmt.Sscanf(l, "opened %d:", &n); err != nil || !strings.Contains(l, "too many open files") {
		t.Fatalf("helper said %q, want \"opened N: … too many open files\"", l)
	}
	if n > 64 || n < 32 {
		t.Fatalf("opened %d files under open_files = 64", n)
	}
}

func TestCloseKillsStragglersAndRemovesCgroups(t *testing.T) {
	g := testGroup(t, Limits{Memory: 64 << 20, Processes: 16})
	dirs := g.CgroupDirs()
	if len(dirs) == 0 {
		t.Skipf("no cgroup can be made here (hierarchies: %v)", hierarchies())
	}
	h := startHelper(t, "sleep")
	if err := g.Apply(h.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if got := cgroupPids(d); len(got) != 1 || got[0] != h.cmd.Process.Pid {
			t.Fatalf("cgroup %s holds %v, want the helper %d", d, got, h.cmd.Process.Pid)
		}
	}
	g.Close()
	<-h.done
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s still there after Close: %v", d, err)
		}
	}
}

func TestFindHierarchiesParsesMounts(t *testing.T) {
	dir := t.TempDir()
	mi := filepath.Join(dir, "mountinfo")
	os.WriteFile(mi, []byte(
		"30 25 0:26 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw,nsdelegate\n"+
			"31 25 0:27 /docker/abc /sys/fs/cgroup/memory rw,nosuid shared:11 - cgroup cgroup rw,memory\n"+
			"32 25 0:28 / /sys/fs/cgroup/cpu\\040acct rw shared:12 - cgroup cgroup rw,cpu,cpuacct\n"+
			"33 25 8:1 / / rw - ext4 /dev/sda1 rw\n"), 0o644)
	ms := cgroupMounts(mi)
	if len(ms) != 3 || !ms[0].v2 || !ms[1].controllers["memory"] || ms[2].point != "/sys/fs/cgroup/cpu acct" {
		t.Fatalf("cgroupMounts = %+v", ms)
	}
	if d, ok := ms[1].dirOf("/docker/abc/inner"); !ok || d != "/sys/fs/cgroup/memory/inner" {
		t.Fatalf("dirOf below the mount's root = %q, %v", d, ok)
	}
	if _, ok := ms[1].dirOf("/elsewhere"); ok {
		t.Fatal("dirOf outside the mount's root succeeded")
	}
	cg := filepath.Join(dir, "cgroup")
	os.WriteFile(cg, []byte("12:pids:/a\n4:memory,foo:/b\n0::/c\n"), 0o644)
	own := ownCgroups(cg)
	if own["pids"] != "/a" || own["memory"] != "/b" || own["foo"] != "/b" || own[""] != "/c" {
		t.Fatalf("ownCgroups = %v", own)
	}
}

func TestCgroupNameIsSafe(t *testing.T) {
	n := cgroupName("../we ird/" + strings.Repeat("x", 100))
	if strings.ContainsAny(n, "/ ") || strings.HasPrefix(n, "..") && strings.Contains(n, "/") || len(n) > 100 {
		t.Fatalf("cgroupName = %q", n)
	}
	if !strings.Contains(n, fmt.Sprintf("-%d-", os.Getpid())) {
		t.Fatalf("cgroupName %q does not name this process", n)
	}
}

// The cgroup v2 layout, on a directory tree standing in for the cgroup2
// file system (this machine's kernel runs v1 for memory and pids; the
// kernel's side of v2 is not tried here): the mcpvisor subtree under the
// process's own cgroup, the controllers enabled for it, and a server's
// cgroup with its limits.
func TestCgroupV2Layout(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpuset cpu io memory pids\n"), 0o644)
	mi := filepath.Join(t.TempDir(), "mountinfo")
	os.WriteFile(mi, []byte(fmt.Sprintf("30 25 0:26 / %s rw,nosuid shared:10 - cgroup2 cgroup2 rw,nsdelegate\n", root)), 0o644)
	cg := filepath.Join(t.TempDir(), "cgroup")
	os.WriteFile(cg, []byte("0::/\n"), 0o644)

	hs := findHierarchiesIn(mi, cg)
	want := hierarchy{v2: true, parent: filepath.Join(root, subtreeName)}
	if hs["memory"] != want || hs["pids"] != want {
		t.Fatalf("hierarchies = %+v, want memory and pids at %+v", hs, want)
	}
	// The last controller enabled is what a plain file keeps; the kernel
	// keeps them all.
	if b, _ := os.ReadFile(filepath.Join(root, "cgroup.subtree_control")); string(b) != "+pids" {
		t.Fatalf("the root's subtree_control was written %q", b)
	}

	g := &Group{limits: Limits{Memory: 64 << 20, Processes: 16}, sentinel: errSentinel}
	dir, err := g.makeV2(want.parent, "srv-1-1")
	if err != nil {
		t.Fatal(err)
	}
	for file, value := range map[string]string{"memory.max": "67108864", "memory.swap.max": "0", "memory.oom.group": "1", "pids.max": "16"} {
		if b, _ := os.ReadFile(filepath.Join(dir, file)); string(b) != value {
			t.Errorf("%s = %q, want %q", file, b, value)
		}
	}
	// An OOM kill counted in memory.events is a memory-limit stop.
	g.memDir, g.v2 = dir, true
	if g.Check(0, 0) != nil {
		t.Fatal("over the limit without an OOM kill")
	}
	os.WriteFile(filepath.Join(dir, "memory.events"), []byte("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 1\n"), 0o644)
	if e := g.Check(0, 0); e == nil || !e.OOMKill {
		t.Fatalf("Check with oom_kill 1 in memory.events = %v", e)
	}
	if g.Mode() != "cgroup v2" {
		t.Fatalf("Mode() = %q", g.Mode())
	}

	// A cgroup whose controllers are missing gets none.
	os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpu io\n"), 0o644)
	os.RemoveAll(want.parent)
	if hs := findHierarchiesIn(mi, cg); len(hs) != 0 {
		t.Fatalf("hierarchies without the controllers = %+v", hs)
	}
}

// With a cgroup, a server's processes are its cgroup's members: a child
// that left the process group (setsid) is still measured, and Close kills
// it.
func TestUsageCountsCgroupMembersOutsideTheGroup(t *testing.T) {
	g := testGroup(t, Limits{Memory: 256 << 20})
	needCgroup(t, g.memDir, "memory")
	h := startHelper(t, "setsid")
	if err := g.Apply(h.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	h.run(t)
	var child int
	if l := h.line(); !strings.HasPrefix(l, "started ") {
		t.Fatalf("helper said %q", l)
	} else {
		child, _ = strconv.Atoi(strings.TrimPrefix(l, "started "))
	}
	pgid := h.cmd.Process.Pid
	if u, _ := GroupUsage(pgid, 0); u.Processes != 1 {
		t.Fatalf("the process group holds %d processes, want the helper alone (its child left it)", u.Processes)
	}
	if u, ok := g.Usage(pgid, 0); !ok || u.Processes != 2 {
		t.Fatalf("Usage = %+v, %v; want the helper and its setsid child", u, ok)
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
	<-h.done
	g.Close()
	deadline := time.Now().Add(hangGuard)
	for syscall.Kill(child, 0) == nil {
		if st, ok := readProcStat(strconv.Itoa(child)); ok && st.state == 'Z' {
			break // killed; init reaps it
		}
		if time.Now().After(deadline) {
			t.Fatalf("the setsid child %d outlived Close", child)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Without a pids cgroup a processes limit is refused (RLIMIT_NPROC would
// count every process of the user); with best_effort it starts, warned
// of, and sets no RLIMIT_NPROC. Likewise memory without a memory cgroup.
func TestLimitsWithoutTheirCgroupAreRefused(t *testing.T) {
	for _, l := range []Limits{{Processes: 8}, {Memory: 64 << 20}} {
		if _, err := NewWithoutCgroups("s", l, errSentinel, nil); !errors.Is(err, ErrNotEnforceable) || !strings.Contains(err.Error(), "best_effort = true") {
			t.Errorf("NewWithoutCgroups(%+v) = %v; want ErrNotEnforceable naming best_effort", l, err)
		}
	}
	var buf strings.Builder
	logger := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Warn})
	g, err := NewWithoutCgroups("s", Limits{Processes: 8, BestEffort: true}, errSentinel, logger)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "processes not enforced") {
		t.Fatalf("no warning for a processes limit best_effort leaves unenforced: %q", buf.String())
	}
	for _, r := range g.Spec().Rlimits {
		if r.Resource == unix.RLIMIT_NPROC {
			t.Fatalf("best_effort set RLIMIT_NPROC, which counts other servers' processes: %+v", g.Spec().Rlimits)
		}
	}
	buf.Reset()
	if _, err := NewWithoutCgroups("s", Limits{OpenFiles: 64}, errSentinel, logger); err != nil || buf.Len() != 0 {
		t.Fatalf("open_files alone: %v, warned %q", err, buf.String())
	}
}

// A memfd of 300MiB filled with write() and never mapped is resident
// memory no RSS shows: the sampled memory of a best_effort limit counts
// it, and so it does mapped.
func TestSampledMemoryCountsMemfd(t *testing.T) {
	for _, mode := range []string{"memfd 300", "memfd 300 map"} {
		t.Run(mode, func(t *testing.T) {
			g, err := NewWithoutCgroups(t.Name(), Limits{Memory: 64 << 20, BestEffort: true}, errSentinel, nil)
			if err != nil {
				t.Fatal(err)
			}
			h := startHelper(t, mode)
			pgid := h.cmd.Process.Pid
			h.run(t)
			if l := h.line(); l != "memfd 300" {
				t.Fatalf("helper said %q", l)
			}
			if u, _ := GroupUsage(pgid, 0); mode == "memfd 300" && u.RSS > 64<<20 {
				t.Fatalf("the helper's RSS is %d: the memfd shows in RSS, the test proves nothing", u.RSS)
			}
			e := g.Check(pgid, 0)
			if e == nil || e.RSS < 300<<20 {
				t.Fatalf("Check = %#v; want the 300MiB memfd counted against the 64MiB limit", e)
			}
		})
	}
}

// A processes limit is the server's own: a server that forks up to its
// limit does not stop another server of the same user from forking —
// with pids cgroups, and without them (best_effort), where no
// RLIMIT_NPROC counts the user's processes.
func TestProcessesLimitIsPerServer(t *testing.T) {
	t.Run("pids cgroup", func(t *testing.T) {
		a := testGroup(t, Limits{Processes: 8})
		b := testGroup(t, Limits{Processes: 8})
		la, lb := forkBoth(t, a, b, "fork")
		var na, nb int
		fmt.Sscanf(la, "started %d:", &na)
		fmt.Sscanf(lb, "started %d:", &nb)
		if na == 0 || nb == 0 || nb < na-1 {
			t.Fatalf("server a %q, then server b %q: b's forks were taken by a's", la, lb)
		}
	})
	t.Run("best_effort without cgroups", func(t *testing.T) {
		l := Limits{Processes: 8, BestEffort: true}
		a, err := NewWithoutCgroups("a", l, errSentinel, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := NewWithoutCgroups("b", l, errSentinel, nil)
		if err != nil {
			t.Fatal(err)
		}
		la, lb := forkBoth(t, a, b, "fork 20")
		if la != "started 20 without an error" || lb != "started 20 without an error" {
			t.Fatalf("server a %q, then server b %q; want both to start 20 (an unenforced limit, not RLIMIT_NPROC counting the user's processes)", la, lb)
		}
	})
}

// forkBoth runs a fork helper as nobody under a, lets it fork, then one
// under b, and returns what each said.
func forkBoth(t *testing.T, a, b *Group, mode string) (string, string) {
	t.Helper()
	ha, hb := startHelperAs(t, mode, 65534), startHelperAs(t, mode, 65534)
	if err := a.Apply(ha.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if err := b.Apply(hb.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	ha.run(t)
	la := ha.line()
	hb.run(t)
	return la, hb.line()
}

// What a SIGKILLed mcpvisor left (a cgroup named for its dead pid, with a
// daemon in it) is killed and removed by the next one.
func TestRemoveLeftoversKillsAndRemoves(t *testing.T) {
	hs := hierarchies()
	h, ok := hs["memory"]
	if !ok {
		t.Skipf("no memory cgroup hierarchy here: %v", hs)
	}
	dead := exec.Command("/bin/true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(h.parent, fmt.Sprintf("leftover-%d-1", dead.Process.Pid))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	daemon := exec.Command("/bin/sleep", "3600")
	daemon.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { daemon.Wait(); close(exited) }()
	t.Cleanup(func() { daemon.Process.Kill(); <-exited })
	if err := writeFile(dir, "cgroup.procs", strconv.Itoa(daemon.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	removeLeftoversIn(map[string]hierarchy{"memory": h}, hclog.New(&hclog.LoggerOptions{Output: &buf}))
	select {
	case <-exited:
	case <-time.After(hangGuard):
		t.Fatal("the daemon in the leftover cgroup still runs")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the leftover cgroup %s is still there: %v", dir, err)
	}
	if !strings.Contains(buf.String(), "removed a server cgroup a previous mcpvisor left") || !strings.Contains(buf.String(), "killed=1") {
		t.Fatalf("log = %q", buf.String())
	}
}
