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

On cgroup v1 a server also gets a cgroup in the freezer hierarchy, when
one is mounted: Close freezes it, SIGKILLs every member and thaws it, so
no process forks its way out of the kill. On v2, cgroup.kill does that.

<name> is "<server>-<mcpvisor's pid>-<n>". When mcpvisor is SIGKILLed the
group keeper kills its servers' process groups, but a process that left
the group (setsid, a double-forked daemon) is still in the server's
cgroup: the next mcpvisor (RemoveLeftovers) kills the members of every
cgroup whose mcpvisor pid is dead, removes it and logs it.

Without a cgroup for a controller the limit is refused (ErrNotEnforceable)
unless the block says best_effort: RLIMIT_NPROC would count every process
of the user, other servers' too, and /proc cannot see all the memory a
server holds (SampledMemory says what it counts).
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

	memDir     string // the cgroup with the memory limit; "" for sampling
	pidsDir    string // the cgroup with the pids limit; "" for none
	freezerDir string // cgroup v1's freezer cgroup; "" without one
	killDir    string // the cgroup that holds every process of the server
	v2         bool   // the group's one cgroup (memDir, pidsDir) is cgroup v2
	dirs       []string
	rlimits    []Rlimit

	closeOnce sync.Once
}

// ErrNotEnforceable is wrapped by the error of New when this machine
// cannot enforce a limit the way it must be and the block does not say
// best_effort: the server is refused at start (docs/sandbox.md, "Limits").
var ErrNotEnforceable = errors.New("limit not enforceable here")

// New prepares the limits l of one process of server: it creates the
// cgroups (with their limits set) and chooses the rlimits. sentinel is
// what the MemoryLimitError of a stop matches.
//
// memory needs a memory cgroup and processes a pids cgroup: RLIMIT_NPROC
// counts every process of the user (other servers', mcpvisor's own
// threads), and no /proc sample counts all the memory a server can hold
// (a tmpfs file it wrote and closed). Without the cgroup New fails with
// ErrNotEnforceable, unless l.BestEffort: memory is then sampled
// (SampledMemory) and processes is not enforced, each with a warning.
// Whatever cgroup the server has (a freezer one too on cgroup v1) is
// what Close kills every process of, so nothing the server starts
// outlives it.
func New(server string, l Limits, sentinel error, logger hclog.Logger) (*Group, error) {
	RemoveLeftovers(logger)
	return newGroup(server, l, sentinel, logger, hierarchies())
}

// NewWithoutCgroups is New on a machine where no cgroup may be made, for
// the tests of the fallback on a machine with cgroups.
func NewWithoutCgroups(server string, l Limits, sentinel error, logger hclog.Logger) (*Group, error) {
	return newGroup(server, l, sentinel, logger, nil)
}

func newGroup(server string, l Limits, sentinel error, logger hclog.Logger, hs map[string]hierarchy) (*Group, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	g := &Group{limits: l, sentinel: sentinel, logger: logger}
	name := cgroupName(server)
	why := map[string]error{}
	if h, ok := hs["memory"]; ok && h.v2 && (l.Processes == 0 || hs["pids"] == h) {
		// One directory carries both limits (and is the one to kill).
		if dir, err := g.makeV2(h.parent, name); err != nil {
			why["memory"], why["pids"] = err, err
		} else {
			g.v2, g.killDir = true, dir
			if l.Memory > 0 {
				g.memDir = dir
			}
			if l.Processes > 0 {
				g.pidsDir = dir
			}
		}
	} else {
		if h, ok := hs["memory"]; ok && !h.v2 && l.Memory > 0 {
			if dir, err := g.makeV1(h.parent, name, "memory"); err != nil {
				why["memory"] = err
			} else {
				g.memDir = dir
			}
		}
		if h, ok := hs["pids"]; ok && !h.v2 && l.Processes > 0 {
			if dir, err := g.makeV1(h.parent, name, "pids"); err != nil {
				why["pids"] = err
			} else {
				g.pidsDir = dir
			}
		}
		// The freezer stops every process of the server at once, so
		// that a stop kills them all and none forks meanwhile.
		if h, ok := hs["freezer"]; ok {
			if dir, err := g.makeV1(h.parent, name, "freezer"); err != nil {
				logger.Debug("no freezer cgroup for the server", "error", err)
			} else {
				g.freezerDir, g.killDir = dir, dir
			}
		}
		if g.killDir == "" && g.pidsDir != "" {
			g.killDir = g.pidsDir
		} else if g.killDir == "" {
			g.killDir = g.memDir
		}
	}
	if errs := g.unenforceable(why); len(errs) > 0 {
		if !l.BestEffort {
			g.Close()
			return nil, errs[0]
		}
		for _, err := range errs {
			logger.Warn("limit not fully enforced (best_effort): " + err.Error())
		}
	}
	g.setRlimits()
	return g, nil
}

// unenforceable says which of the limits have no cgroup of their own,
// and why (why holds the errors of the cgroups that could not be made).
func (g *Group) unenforceable(why map[string]error) []error {
	l := g.limits
	var errs []error
	for _, c := range []string{"memory", "pids"} {
		limit, set, have := "memory", l.Memory > 0, g.memDir != ""
		if c == "pids" {
			limit, set, have = "processes", l.Processes > 0, g.pidsDir != ""
		}
		if !set || have {
			continue
		}
		reason := "there is no " + c + " cgroup hierarchy mcpvisor may write to (cgroup v1's " + c + " hierarchy, or cgroup v2 with " + c + " in cgroup.controllers)"
		if err := why[c]; err != nil {
			reason = "making its " + c + " cgroup failed: " + err.Error()
		}
		errs = append(errs, &unenforceableError{fmt.Sprintf("limits.%s needs a %s cgroup of the server's own, and %s: run mcpvisor as root or in a delegated cgroup, or set best_effort = true in the limits block to start it with %s (docs/sandbox.md, \"Limits\")",
			limit, c, reason, fallbackWords[limit])})
	}
	return errs
}

// Plan is how this machine enforces a limits block, for `mcpvisor
// sandbox` and `mcpvisor validate`: New's own decision, made by making
// the cgroups a start would make and removing them at once.
type Plan struct {
	// Memory, Processes, OpenFiles and Kill say how each is enforced
	// ("" where the block sets no such limit); Kill is how a stop kills
	// every process of the server.
	Memory, Processes, OpenFiles, Kill string
	// Unenforceable are the limits this machine cannot enforce as they
	// must be: a start refuses them (ErrNotEnforceable) without
	// best_effort, and warns of them with it.
	Unenforceable []error
}

// PlanLimits makes the Plan of l for server.
func PlanLimits(server string, l Limits) Plan {
	probe := l
	probe.BestEffort = true
	g, _ := newGroup(server, probe, nil, nil, hierarchies())
	defer g.Close()
	var p Plan
	version := "cgroup v1"
	if g.v2 {
		version = "cgroup v2"
	}
	switch {
	case l.Memory == 0:
	case g.memDir != "":
		p.Memory = fmt.Sprintf("%s, a cgroup of its own under %s", version, filepath.Dir(g.memDir))
	default:
		p.Memory = "no memory cgroup: " + fallbackWords["memory"]
	}
	switch {
	case l.Processes == 0:
	case g.pidsDir != "":
		p.Processes = fmt.Sprintf("%s pids.max, a cgroup of its own under %s", version, filepath.Dir(g.pidsDir))
	default:
		p.Processes = "no pids cgroup: " + fallbackWords["processes"]
	}
	if l.OpenFiles > 0 {
		p.OpenFiles = fmt.Sprintf("RLIMIT_NOFILE %d, per process", l.OpenFiles)
	}
	switch {
	case g.killDir != "" && g.v2:
		p.Kill = "cgroup v2: cgroup.kill of the server's cgroup"
	case g.freezerDir != "":
		p.Kill = "cgroup v1 freezer: every process of the server frozen, then SIGKILLed"
	case g.killDir != "":
		p.Kill = "cgroup v1: every member of the server's cgroup SIGKILLed until none is left"
	default:
		p.Kill = "process group only: a process that leaves it (setsid) outlives the server"
	}
	p.Unenforceable = g.unenforceable(nil)
	return p
}

// unenforceableError is a limit this machine cannot enforce; it matches
// ErrNotEnforceable.
type unenforceableError struct{ msg string }

func (e *unenforceableError) Error() string        { return e.msg }
func (e *unenforceableError) Is(target error) bool { return target == ErrNotEnforceable }

// fallbackWords say what best_effort gives a limit without its cgroup.
var fallbackWords = map[string]string{
	"memory":    "memory sampled from /proc every 250ms instead (PSS, swap and held shared-memory files; memory in a tmpfs file no process holds open is not counted)",
	"processes": "processes not enforced (RLIMIT_NPROC would count every process of mcpvisor's user, other servers' too)",
}

// setRlimits chooses the rlimits: open files. processes is never
// RLIMIT_NPROC, which counts every process of the user, other servers'
// too. (A server that runs as a user of its own could have it: that user
// has no other processes.)
func (g *Group) setRlimits() {
	l := g.limits
	if l.OpenFiles > 0 {
		g.rlimits = append(g.rlimits, Rlimit{Resource: unix.RLIMIT_NOFILE, Cur: uint64(l.OpenFiles), Max: uint64(l.OpenFiles)})
	}
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
	case "freezer":
	}
	if err != nil {
		os.Remove(dir)
		return "", err
	}
	g.dirs = append(g.dirs, dir)
	return dir, nil
}

// Mode says how the limits are enforced, for the log: "cgroup v2",
// "cgroup v1", "sampling" (memory without a cgroup, best_effort) or
// "rlimits".
func (g *Group) Mode() string {
	switch {
	case g.memDir == "" && g.limits.Memory > 0:
		return "sampling"
	case len(g.dirs) > 0 && g.v2:
		return "cgroup v2"
	case len(g.dirs) > 0:
		return "cgroup v1"
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
// memory cgroup, or, without one (best_effort), the SampledMemory of
// process group pgid's members (leaving out except, its keeper) above the
// limit. nil when within.
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
	pids, ok := g.members(pgid, except)
	if !ok {
		return nil
	}
	if m := SampledMemory(pids); m > g.limits.Memory {
		return &MemoryLimitError{Limit: g.limits.Memory, RSS: m, Sentinel: g.sentinel}
	}
	return nil
}

// members are the server's processes: its cgroup's where it has one,
// else process group pgid's but except.
func (g *Group) members(pgid, except int) ([]int, bool) {
	if g.killDir != "" {
		if pids, err := readCgroupPids(g.killDir); err == nil {
			return pids, true
		}
	}
	return groupMembers(pgid, except)
}

// Usage measures the server's processes. With a cgroup they are its
// members (cgroup.procs): only the server's own processes are read, and
// one that left the process group (setsid) still counts; except is left
// out. Without one they are the live members of process group pgid but
// except (GroupUsage).
func (g *Group) Usage(pgid, except int) (Usage, bool) {
	pids, ok := g.members(pgid, except)
	if !ok {
		return Usage{}, false
	}
	// except (a contained server's init) is in the cgroup too.
	pids = slices.DeleteFunc(pids, func(p int) bool { return p == except })
	return PidsUsage(pids), true
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

// Close kills every process left in the group's cgroups (whatever the
// server started, in its process group or not: a setsid daemon too) and
// removes them. Every stop of the server ends here (transport's
// Process.stop): a crash, a restart, an idle stop, max_lifetime, a
// memory-limit stop, a reload, mcpvisor's own shutdown.
func (g *Group) Close() {
	if g == nil {
		return
	}
	g.closeOnce.Do(func() {
		if g.killDir != "" {
			if n := killCgroup(g.killDir, g.freezerDir != "", g.v2); n > 0 {
				g.logger.Debug("killed the processes left in the server's cgroup", "cgroup", g.killDir, "killed", n)
			}
		}
		for _, dir := range g.dirs {
			removeCgroup(dir, dir == g.freezerDir, g.v2, g.logger)
		}
	})
}

// killCgroup kills every process in cgroup dir and waits (up to
// removeTimeout) for it to be empty; it returns how many processes it
// signalled. cgroup v2 has cgroup.kill (Linux 5.14), which kills them
// all at once. On cgroup v1 a freezer cgroup is frozen first, so that
// none forks between the read of its members and their kill; without
// one every member is SIGKILLed until none is left (a fork in between
// makes a member the next round kills).
func killCgroup(dir string, freezer, v2 bool) int {
	if v2 && writeFile(dir, "cgroup.kill", "1") == nil {
		waitEmpty(dir)
		return 0
	}
	var killed int
	if freezer {
		frozen := freeze(dir)
		for _, pid := range cgroupPids(dir) {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
		if frozen {
			// A frozen process dies of SIGKILL only once thawed.
			writeFile(dir, "freezer.state", "THAWED")
		}
	}
	deadline := time.Now().Add(removeTimeout)
	for {
		pids := cgroupPids(dir)
		if len(pids) == 0 || time.Now().After(deadline) {
			return killed
		}
		for _, pid := range pids {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
		time.Sleep(removePoll)
	}
}

// freeze freezes a v1 freezer cgroup and waits (up to removeTimeout) for
// the kernel to report it FROZEN.
func freeze(dir string) bool {
	if writeFile(dir, "freezer.state", "FROZEN") != nil {
		return false
	}
	deadline := time.Now().Add(removeTimeout)
	for {
		b, err := os.ReadFile(filepath.Join(dir, "freezer.state"))
		if err != nil {
			return false
		}
		if strings.TrimSpace(string(b)) == "FROZEN" {
			return true
		}
		if time.Now().After(deadline) {
			return true // FREEZING: the kill goes on all the same
		}
		time.Sleep(removePoll)
	}
}

// waitEmpty waits up to removeTimeout for cgroup dir to hold no process.
func waitEmpty(dir string) {
	deadline := time.Now().Add(removeTimeout)
	for len(cgroupPids(dir)) > 0 && time.Now().Before(deadline) {
		time.Sleep(removePoll)
	}
}

// removeCgroup removes a cgroup, killing what is still in it, waiting up
// to removeTimeout for its last processes to be reaped.
func removeCgroup(dir string, freezer, v2 bool, logger hclog.Logger) {
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
		killCgroup(dir, freezer, v2)
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
