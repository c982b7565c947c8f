package resources

// Finding where this process may make cgroups: its cgroup mounts and its
// own cgroups (the design note in cgroup_linux.go).

import (
	"bufio"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// findHierarchies finds where this process may make the memory and pids
// cgroups of its servers (the design note above).
func findHierarchies() map[string]hierarchy {
	return findHierarchiesIn("/proc/self/mountinfo", "/proc/self/cgroup")
}

func findHierarchiesIn(mountinfo, selfCgroup string) map[string]hierarchy {
	own := ownCgroups(selfCgroup)
	hs := map[string]hierarchy{}
	mounts := cgroupMounts(mountinfo)
	var v2 *cgroupMount
	for i, m := range mounts {
		if m.v2 {
			if v2 == nil {
				v2 = &mounts[i]
			}
			continue
		}
		for _, c := range []string{"memory", "pids", "freezer"} {
			if _, done := hs[c]; done || !m.controllers[c] {
				continue
			}
			if dir, ok := m.dirOf(own[c]); ok {
				parent := filepath.Join(dir, subtreeName)
				if err := os.MkdirAll(parent, 0o755); err == nil {
					hs[c] = hierarchy{parent: parent}
				}
			}
		}
	}
	if v2 != nil {
		var want []string
		for _, c := range []string{"memory", "pids"} {
			if _, done := hs[c]; !done {
				want = append(want, c)
			}
		}
		if len(want) > 0 {
			if parent, ok := v2Parent(v2, own[""], want); ok {
				for _, c := range want {
					hs[c] = hierarchy{v2: true, parent: parent}
				}
			}
		}
	}
	return hs
}

// v2Parent makes the mcpvisor subtree in the cgroup v2 hierarchy with the
// controllers want enabled for its children.
func v2Parent(m *cgroupMount, own string, want []string) (string, bool) {
	base, ok := m.dirOf(own)
	if !ok {
		return "", false
	}
	avail, err := os.ReadFile(filepath.Join(base, "cgroup.controllers"))
	if err != nil {
		return "", false
	}
	have := strings.Fields(string(avail))
	for _, c := range want {
		if !contains(have, c) {
			return "", false
		}
	}
	enable := func(dir string) error {
		for _, c := range want {
			if err := writeFile(dir, "cgroup.subtree_control", "+"+c); err != nil {
				return err
			}
		}
		return nil
	}
	if err := enable(base); errors.Is(err, syscall.EBUSY) && own != "/" {
		// base holds processes: move mcpvisor into a leaf of its own, if
		// it is base's only process, and try again.
		if pids := cgroupPids(base); len(pids) != 1 || pids[0] != os.Getpid() {
			return "", false
		}
		leaf := filepath.Join(base, hostLeafName)
		if err := os.MkdirAll(leaf, 0o755); err != nil {
			return "", false
		}
		if err := writeFile(leaf, "cgroup.procs", "0"); err != nil {
			return "", false
		}
		if enable(base) != nil {
			return "", false
		}
	} else if err != nil {
		return "", false
	}
	parent := filepath.Join(base, subtreeName)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", false
	}
	if enable(parent) != nil {
		return "", false
	}
	return parent, true
}

// removeLeftovers runs RemoveLeftovers once per process.
var removeLeftovers sync.Once

// RemoveLeftovers kills the processes in, and removes, the server cgroups
// of mcpvisor instances that are gone (the pid in their name is dead):
// what a SIGKILLed mcpvisor left, such as a daemon a server double-forked
// out of its process group. Each is logged. It runs once per process: the
// host calls it at start, and New before the first cgroup.
func RemoveLeftovers(logger hclog.Logger) {
	removeLeftovers.Do(func() { removeLeftoversIn(hierarchies(), logger) })
}

func removeLeftoversIn(hs map[string]hierarchy, logger hclog.Logger) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	seen := map[string]bool{}
	for c, h := range hs {
		if seen[h.parent] {
			continue
		}
		seen[h.parent] = true
		for _, dir := range staleCgroups(h.parent) {
			n := killCgroup(dir, c == "freezer", h.v2)
			err := os.Remove(dir)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				logger.Warn("cannot remove a server cgroup a previous mcpvisor left; remove it by hand once it is empty", "cgroup", dir, "error", err)
				continue
			}
			logger.Info("removed a server cgroup a previous mcpvisor left", "cgroup", dir, "killed", n)
		}
	}
}

// staleCgroups lists the cgroups under parent whose mcpvisor (the pid in
// their name) is gone.
func staleCgroups(parent string) []string {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return nil
	}
	var stale []string
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		parts := strings.Split(e.Name(), "-")
		if len(parts) < 3 {
			continue
		}
		pid, err := strconv.Atoi(parts[len(parts)-2])
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			stale = append(stale, filepath.Join(parent, e.Name()))
		}
	}
	return stale
}

// cgroupMount is one mounted cgroup hierarchy.
type cgroupMount struct {
	v2          bool
	point, root string // mount point; the hierarchy's path mounted there
	controllers map[string]bool
}

// dirOf is the directory of the hierarchy's cgroup path p.
func (m cgroupMount) dirOf(p string) (string, bool) {
	if p == "" {
		return "", false
	}
	rel, err := filepath.Rel(m.root, p)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", false
	}
	return filepath.Join(m.point, rel), true
}

// cgroupMounts reads the cgroup and cgroup2 mounts of a mountinfo file.
func cgroupMounts(path string) []cgroupMount {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var ms []cgroupMount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID parent major:minor root point options [optional…] - type source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 5 || len(b) < 3 {
			continue
		}
		m := cgroupMount{root: unescapeMount(a[3]), point: unescapeMount(a[4]), controllers: map[string]bool{}}
		switch b[0] {
		case "cgroup2":
			m.v2 = true
		case "cgroup":
			for _, o := range strings.Split(b[2], ",") {
				m.controllers[o] = true
			}
		default:
			continue
		}
		ms = append(ms, m)
	}
	return ms
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ownCgroups reads /proc/self/cgroup: controller → this process's cgroup
// path in that v1 hierarchy, and "" → its cgroup v2 path.
func ownCgroups(path string) map[string]string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	own := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			own[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			own[c] = parts[2]
		}
	}
	return own
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
