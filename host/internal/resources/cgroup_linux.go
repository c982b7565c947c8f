package resources

/*
Design note: where a server's cgroup lives (docs/design.md §18.2).

A server's cgroup is a child of mcpvisor's own, so whatever bounds
mcpvisor (a systemd unit's MemoryMax, a container's limit) still bounds
its servers:

  - cgroup v1 (a hierarchy per controller): <mount>/<own>/mcpvisor/<name>
    in the memory and in the pids hierarchy. v1 allows processes in inner
    cgroups, so nothing has to move.
  - cgroup v2 (one hierarchy): <mount>/<own>/mcpvisor/<name>, with the
    memory and pids controllers enabled in <own> and in mcpvisor/. v2 lets
    a cgroup enable controllers for its children only while it holds no
    processes itself (the root cgroup excepted); so when <own> is not the
    root and holds mcpvisor alone (a systemd unit with Delegate=yes),
    mcpvisor first moves itself into <own>/mcpvisor-host. When it holds
    other processes too, or is not writable, there is no cgroup.

<name> is "<server>-<mcpvisor's pid>-<n>". A cgroup left behind by an
mcpvisor that was SIGKILLed (its servers are gone with it: the group
keeper) is empty; the next mcpvisor removes such cgroups of dead pids.

Without a cgroup for a controller the limit falls back: memory to sampling
the process group's RSS, processes to RLIMIT_NPROC (which counts every
process of the server's user, and which root is exempt from).
*/

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

const (
	// subtreeName is the cgroup under mcpvisor's own that holds one
	// cgroup per running server with limits.
	subtreeName = "mcpvisor"
	// hostLeafName is the cgroup v2 leaf mcpvisor moves itself into so
	// that its own cgroup may delegate controllers (see the note above).
	hostLeafName = "mcpvisor-host"
	// removeTimeout bounds how long Close waits for a cgroup's last
	// processes to be reaped before it leaves the directory behind.
	removeTimeout = 2 * time.Second
	// removePoll is how often Close retries the removal meanwhile.
	removePoll = 20 * time.Millisecond
)

// hierarchy is where one controller's cgroups are made.
type hierarchy struct {
	v2     bool
	parent string // the mcpvisor subtree: created, controllers enabled
}

// hierarchies finds, once per process, where the memory and pids
// controllers can make cgroups; a missing entry means no cgroup for it.
var hierarchies = sync.OnceValue(findHierarchies)

// seq numbers the cgroups this process makes.
var seq atomic.Uint64

// Group is the limits of one server process and its process group. Apply
// and Close may be called on a nil *Group (no limits): they do nothing.
type Group struct {
	limits   Limits
	sentinel error
	logger   hclog.Logger

	memDir  string // the cgroup with the memory limit; "" for sampling
	pidsDir string // the cgroup with the pids limit; "" for RLIMIT_NPROC
	v2      bool   // the group's one cgroup (memDir, pidsDir) is cgroup v2
	dirs    []string
	rlimits []Rlimit

	closeOnce sync.Once
}

// New prepares the limits l of one process of server: it creates the
// cgroups it can (with their limits set) and chooses rlimits for the
// rest. sentinel is what the MemoryLimitError of a stop matches. A cgroup
// that cannot be made is logged at debug level and falls back as the
// package comment says; New does not fail.
func New(server string, l Limits, sentinel error, logger hclog.Logger) *Group {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	g := &Group{limits: l, sentinel: sentinel, logger: logger}
	hs := hierarchies()
	name := cgroupName(server)
	if l.Memory > 0 || l.Processes > 0 {
		if h, ok := hs["memory"]; ok && h.v2 && (l.Processes == 0 || hs["pids"] == h) {
			// One directory carries both limits.
			if dir, err := g.makeV2(h.parent, name); err != nil {
				logger.Debug("no cgroup for the server's limits", "error", err)
			} else {
				g.memDir, g.v2 = dir, true
				if l.Processes > 0 {
					g.pidsDir = dir
				}
			}
		} else {
			if h, ok := hs["memory"]; ok && !h.v2 && l.Memory > 0 {
				if dir, err := g.makeV1(h.parent, name, "memory"); err != nil {
					logger.Debug("no memory cgroup for the server's limits", "error", err)
				} else {
					g.memDir = dir
				}
			}
			if h, ok := hs["pids"]; ok && !h.v2 && l.Processes > 0 {
				if dir, err := g.makeV1(h.parent, name, "pids"); err != nil {
					logger.Debug("no pids cgroup for the server's limits", "error", err)
				} else {
					g.pidsDir = dir
				}
			}
		}
		if l.Memory == 0 {
			g.memDir = ""
		}
	}
	g.setRlimits()
	g.warnUnenforced()
	return g
}

// warnUnenforced warns of a processes limit nothing enforces: without a
// pids cgroup it is RLIMIT_NPROC, which root is exempt from.
func (g *Group) warnUnenforced() {
	if g.limits.Processes > 0 && g.pidsDir == "" && os.Geteuid() == 0 {
		g.logger.Warn("the processes limit is not enforced: there is no pids cgroup for the server, and RLIMIT_NPROC does not apply to root (see docs/sandbox.md, \"Limits\")",
			"processes", g.limits.Processes)
	}
}

// setRlimits chooses the rlimits: open files always, processes where no
// pids cgroup bounds them.
func (g *Group) setRlimits() {
	l := g.limits
	if l.OpenFiles > 0 {
		g.rlimits = append(g.rlimits, Rlimit{Resource: unix.RLIMIT_NOFILE, Cur: uint64(l.OpenFiles), Max: uint64(l.OpenFiles)})
	}
	if l.Processes > 0 && g.pidsDir == "" {
		g.rlimits = append(g.rlimits, Rlimit{Resource: unix.RLIMIT_NPROC, Cur: uint64(l.Processes), Max: uint64(l.Processes)})
	}
}

// NewWithoutCgroups is New for where no cgroup may be made: memory is
// sampled and processes bounded by RLIMIT_NPROC, as on a machine without
// cgroups.
func NewWithoutCgroups(server string, l Limits, sentinel error, logger hclog.Logger) *Group {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	g := &Group{limits: l, sentinel: sentinel, logger: logger}
	g.setRlimits()
	g.warnUnenforced()
	return g
}

// cgroupName is the name of the next cgroup of server: its name with
// anything but letters, digits, '_' and '.' replaced, mcpvisor's pid and
// a sequence number.
func cgroupName(server string) string {
	clean := []byte(server)
	for i, c := range clean {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.') {
			clean[i] = '_'
		}
	}
	if len(clean) > 64 {
		clean = clean[:64]
	}
	return fmt.Sprintf("%s-%d-%d", clean, os.Getpid(), seq.Add(1))
}

// makeV2 creates the server's cgroup v2 directory with its limits.
func (g *Group) makeV2(parent, name string) (string, error) {
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	g.dirs = append(g.dirs, dir)
	var err error
	if g.limits.Memory > 0 {
		err = writeFile(dir, "memory.max", strconv.FormatInt(g.limits.Memory, 10))
		// No swap: a server over its limit is stopped, not swapped out
		// (absent without swap accounting). Kill the whole cgroup on an
		// OOM, not one process of it.
		writeFile(dir, "memory.swap.max", "0")
		writeFile(dir, "memory.oom.group", "1")
	}
	if err == nil && g.limits.Processes > 0 {
		err = writeFile(dir, "pids.max", strconv.Itoa(g.limits.Processes))
	}
	if err != nil {
		os.Remove(dir)
		g.dirs = g.dirs[:len(g.dirs)-1]
		return "", err
	}
	return dir, nil
}

// makeV1 creates the server's cgroup in the v1 hierarchy of controller.
func (g *Group) makeV1(parent, name, controller string) (string, error) {
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	var err error
	switch controller {
	case "memory":
		err = writeFile(dir, "memory.limit_in_bytes", strconv.FormatInt(g.limits.Memory, 10))
		if err == nil {
			// Memory and swap together at the same bound: no swapping
			// past the limit (absent without swap accounting).
			writeFile(dir, "memory.memsw.limit_in_bytes", strconv.FormatInt(g.limits.Memory, 10))
		}
	case "pids":
		err = writeFile(dir, "pids.max", strconv.Itoa(g.limits.Processes))
	}
	if err != nil {
		os.Remove(dir)
		return "", err
	}
	g.dirs = append(g.dirs, dir)
	return dir, nil
}

// Mode says how the limits are enforced, for the log: "cgroup v2",
// "cgroup v1", "sampling" (memory without a cgroup) or "rlimits".
func (g *Group) Mode() string {
	switch {
	case len(g.dirs) > 0 && g.v2:
		return "cgroup v2"
	case len(g.dirs) > 0:
		return "cgroup v1"
	case g.limits.Memory > 0:
		return "sampling"
	default:
		return "rlimits"
	}
}

// CgroupDirs are the cgroups the server's process must join.
func (g *Group) CgroupDirs() []string { return append([]string(nil), g.dirs...) }

// Spec is what a launcher running in the child before the server's
// command must do: the same as Apply, from the inside, with no window.
func (g *Group) Spec() LauncherSpec {
	return LauncherSpec{Rlimits: append([]Rlimit(nil), g.rlimits...), CgroupDirs: g.CgroupDirs()}
}

// Apply puts the started process pid into the group's cgroups and sets
// its rlimits, from the parent.
//
// This leaves a window: between the exec of the server and Apply the
// server runs without its limits, and a child it forks in that window
// stays outside the cgroups and keeps the old rlimits (processes it starts
// later inherit them). The window is microseconds of a program's start-up,
// before it reads its first request; a launcher in the child (Spec) closes
// it.
func (g *Group) Apply(pid int) error {
	if g == nil {
		return nil
	}
	for _, dir := range g.dirs {
		if err := writeFile(dir, "cgroup.procs", strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("joining cgroup %s: %w", dir, err)
		}
	}
	for _, r := range g.rlimits {
		lim := unix.Rlimit{Cur: r.Cur, Max: r.Max}
		if err := unix.Prlimit(pid, r.Resource, &lim, nil); err != nil {
			return fmt.Errorf("setting %s to %d: %w", rlimitName(r.Resource), r.Cur, err)
		}
	}
	return nil
}

func rlimitName(res int) string {
	switch res {
	case unix.RLIMIT_NOFILE:
		return "RLIMIT_NOFILE (open_files)"
	case unix.RLIMIT_NPROC:
		return "RLIMIT_NPROC (processes)"
	}
	return "rlimit " + strconv.Itoa(res)
}

// MemoryByCgroup reports whether the kernel enforces the memory limit
// (a memory cgroup) rather than sampling.
func (g *Group) MemoryByCgroup() bool { return g.memDir != "" }

// OOMKills is how many processes the kernel's OOM killer has killed in
// the group's memory cgroup (0 without one).
func (g *Group) OOMKills() uint64 {
	if g.memDir == "" {
		return 0
	}
	file := "memory.oom_control" // v1: "oom_kill N" since Linux 4.13
	if g.v2 {
		file = "memory.events"
	}
	f, err := os.Open(filepath.Join(g.memDir, file))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		if k == "oom_kill" {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// Check reports the group over its memory limit: an OOM kill in its
// memory cgroup, or, without one, the resident memory of process group
// pgid (leaving out except, its keeper) above the limit. nil when within.
func (g *Group) Check(pgid, except int) *MemoryLimitError {
	if g.limits.Memory <= 0 {
		return nil
	}
	if g.memDir != "" {
		if g.OOMKills() > 0 {
			return &MemoryLimitError{Limit: g.limits.Memory, OOMKill: true, Sentinel: g.sentinel}
		}
		return nil
	}
	if u, ok := g.Usage(pgid, except); ok && u.RSS > g.limits.Memory {
		return &MemoryLimitError{Limit: g.limits.Memory, RSS: u.RSS, Sentinel: g.sentinel}
	}
	return nil
}

// Usage measures the server's processes. With a cgroup they are its
// members (cgroup.procs): only the server's own processes are read, and
// one that left the process group (setsid) still counts; except is left
// out. Without one they are the live members of process group pgid but
// except (GroupUsage).
func (g *Group) Usage(pgid, except int) (Usage, bool) {
	if len(g.dirs) > 0 {
		if pids, err := readCgroupPids(g.dirs[0]); err == nil {
			// except (a contained server's init) is in the cgroup too.
			return PidsUsage(slices.DeleteFunc(pids, func(p int) bool { return p == except })), true
		}
	}
	return GroupUsage(pgid, except)
}

// Watch checks the memory limit every SampleInterval until done closes,
// and calls over once, then returns, when the group is over it. It
// returns at once without a memory limit.
func (g *Group) Watch(pgid, except int, done <-chan struct{}, over func(*MemoryLimitError)) {
	if g.limits.Memory <= 0 {
		return
	}
	t := time.NewTicker(SampleInterval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		if e := g.Check(pgid, except); e != nil {
			over(e)
			return
		}
	}
}

// Close kills what is left in the group's cgroups (processes that left
// the process group) and removes them. Call it once the process group is
// gone.
func (g *Group) Close() {
	if g == nil {
		return
	}
	g.closeOnce.Do(func() {
		for _, dir := range g.dirs {
			removeCgroup(dir, g.logger)
		}
	})
}

// removeCgroup kills a cgroup's processes and removes it, waiting up to
// removeTimeout for them to be reaped.
func removeCgroup(dir string, logger hclog.Logger) {
	deadline := time.Now().Add(removeTimeout)
	for {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			logger.Warn("cannot remove the server's cgroup; remove it by hand once it is empty", "cgroup", dir, "error", err)
			return
		}
		if writeFile(dir, "cgroup.kill", "1") != nil {
			for _, pid := range cgroupPids(dir) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(removePoll)
	}
}

// cgroupPids lists the processes in cgroup dir (none when it cannot be
// read).
func cgroupPids(dir string) []int {
	pids, _ := readCgroupPids(dir)
	return pids
}

// readCgroupPids reads the processes in cgroup dir.
func readCgroupPids(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

func writeFile(dir, name, value string) error {
	return os.WriteFile(filepath.Join(dir, name), []byte(value), 0o644)
}
