package proctree

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/prometheus/procfs"
)

// maxDepth bounds an ancestor walk (a pid namespace nests at most 32
// deep; process trees are shallow), so a loop in a racing /proc cannot
// hold a request.
const maxDepth = 512

// Server reports why pid is a process one of hosts started ("" when it is
// not). An error means /proc could not tell (the process has exited, or
// /proc is not mounted); the caller refuses then.
func Server(pid int, hosts []int) (string, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return "", err
	}
	t := tree{fs: fs, hosts: hosts, stats: map[int]procfs.ProcStat{}}
	st, err := t.stat(pid)
	if err != nil {
		return "", fmt.Errorf("reading /proc/%d: %w", pid, err)
	}
	return t.why(pid, st), nil
}

// TCPPeer reports why the local end of the TCP connection from remote to
// local belongs to a process one of hosts started ("" when it does not,
// or when the connection comes from another machine or network
// namespace). A process of a server whose file descriptors cannot be read
// (it made itself undumpable) might hold it: that is a reason too.
func TCPPeer(remote, local netip.AddrPort, hosts []int) (string, error) {
	pfs, err := procfs.NewDefaultFS()
	if err != nil {
		return "", err
	}
	inode, found, err := tcpInode(pfs, remote, local)
	if err != nil || !found {
		return "", err
	}
	procs, err := pfs.AllProcs()
	if err != nil {
		return "", err
	}
	t := tree{fs: pfs, hosts: hosts, stats: make(map[int]procfs.ProcStat, len(procs))}
	want := fmt.Sprintf("socket:[%d]", inode)
	for _, p := range procs {
		st, err := t.stat(p.PID)
		if err != nil {
			continue // gone since AllProcs
		}
		why := t.why(p.PID, st)
		if why == "" {
			continue
		}
		targets, err := p.FileDescriptorTargets()
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return fmt.Sprintf("pid %d (%s) hides its file descriptors (%v), so it may hold the connection", p.PID, why, err), nil
		case slices.Contains(targets, want):
			return fmt.Sprintf("pid %d holds the connection: %s", p.PID, why), nil
		}
	}
	return "", nil
}

// tcpInode finds the socket of the connection's far end — local address
// remote, peer local — in this network namespace's TCP tables.
func tcpInode(pfs procfs.FS, remote, local netip.AddrPort) (uint64, bool, error) {
	var lastErr error
	// procfs marks its /proc/net/tcp readers deprecated in favour of a
	// sock_diag netlink client; the tables are this namespace's, which is
	// what the check needs, and no served library speaks inet_diag.
	//lint:ignore SA1019 /proc/net/tcp{,6} are the namespace's tables; see above.
	for _, table := range []func() (procfs.NetTCP, error){pfs.NetTCP, pfs.NetTCP6} {
		lines, err := table()
		if err != nil {
			lastErr = err
			continue
		}
		for _, l := range lines {
			if l.LocalPort == uint64(remote.Port()) && l.RemPort == uint64(local.Port()) &&
				sameAddr(l.LocalAddr, remote.Addr()) && sameAddr(l.RemAddr, local.Addr()) {
				return l.Inode, true, nil
			}
		}
	}
	if lastErr != nil && !errors.Is(lastErr, fs.ErrNotExist) {
		return 0, false, lastErr
	}
	return 0, false, nil
}

func sameAddr(ip net.IP, a netip.Addr) bool {
	return ip.Equal(net.IP(a.Unmap().AsSlice())) || ip.Equal(net.IP(a.AsSlice()))
}

// tree answers questions about one snapshot's processes, reading each
// /proc/<pid>/stat once.
type tree struct {
	fs    procfs.FS
	hosts []int
	stats map[int]procfs.ProcStat
}

func (t *tree) stat(pid int) (procfs.ProcStat, error) {
	if st, ok := t.stats[pid]; ok {
		return st, nil
	}
	p, err := t.fs.Proc(pid)
	if err != nil {
		return procfs.ProcStat{}, err
	}
	st, err := p.Stat()
	if err != nil {
		return procfs.ProcStat{}, err
	}
	t.stats[pid] = st
	return st, nil
}

// why says why pid (whose stat is st) is a host's process, or "".
func (t *tree) why(pid int, st procfs.ProcStat) string {
	if h := t.hostAbove(pid); h != 0 {
		return fmt.Sprintf("it descends from the mcpvisor host pid %d", h)
	}
	if st.PGRP > 0 && st.PGRP != pid {
		if h := t.hostAbove(st.PGRP); h != 0 {
			return fmt.Sprintf("its process group %d descends from the mcpvisor host pid %d", st.PGRP, h)
		}
	}
	if st.Session > 0 && st.Session != pid && st.Session != st.PGRP {
		if h := t.hostAbove(st.Session); h != 0 {
			return fmt.Sprintf("its session %d descends from the mcpvisor host pid %d", st.Session, h)
		}
	}
	if cg := t.serverCgroup(pid); cg != "" {
		return fmt.Sprintf("it is in the server cgroup %s", cg)
	}
	return ""
}

// hostAbove is the host among pid's strict ancestors, or 0.
func (t *tree) hostAbove(pid int) int {
	for range maxDepth {
		st, err := t.stat(pid)
		if err != nil || st.PPID <= 0 {
			return 0
		}
		if slices.Contains(t.hosts, st.PPID) {
			return st.PPID
		}
		pid = st.PPID
	}
	return 0
}

// serverCgroup is the cgroup path of pid that is a server's (a child of an
// "mcpvisor" cgroup, resources' subtree), or "".
func (t *tree) serverCgroup(pid int) string {
	p, err := t.fs.Proc(pid)
	if err != nil {
		return ""
	}
	cgs, err := p.Cgroups()
	if err != nil {
		return ""
	}
	for _, cg := range cgs {
		parts := strings.Split(strings.Trim(cg.Path, "/"), "/")
		for i, part := range parts[:max(len(parts)-1, 0)] {
			if part == "mcpvisor" && parts[i+1] != "" {
				return cg.Path
			}
		}
	}
	return ""
}
