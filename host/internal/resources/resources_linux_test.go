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
		var started int
		for {
			cmd := exec.Command("/bin/sleep", "3600")
			if err := cmd.Start(); err != nil {
				fmt.Printf("started %d: %v\n", started, err)
				break
			}
			started++
			if started > 1000 {
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
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
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

// newGroup is New, closed when the test ends.
func newGroup(t *testing.T, l Limits) *Group {
	t.Helper()
	g := New(t.Name(), l, errSentinel, nil)
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
	g := newGroup(t, Limits{Memory: 32 << 20})
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
	g := newGroup(t, Limits{Processes: 8})
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
	g := newGroup(t, Limits{OpenFiles: 64})
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
	g := newGroup(t, Limits{Memory: 64 << 20, Processes: 16})
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
	g := newGroup(t, Limits{Memory: 256 << 20})
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

// A processes limit nothing enforces (root, no pids cgroup) is not
// silently ignored.
func TestUnenforcedProcessesLimitWarns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("RLIMIT_NPROC binds a non-root user: nothing to warn of")
	}
	var buf strings.Builder
	logger := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Warn})
	NewWithoutCgroups("s", Limits{Processes: 8}, errSentinel, logger)
	if !strings.Contains(buf.String(), "the processes limit is not enforced") {
		t.Fatalf("no warning for a processes limit root ignores: %q", buf.String())
	}
	buf.Reset()
	NewWithoutCgroups("s", Limits{OpenFiles: 64}, errSentinel, logger)
	if buf.Len() != 0 {
		t.Fatalf("a warning without a processes limit: %q", buf.String())
	}
}
