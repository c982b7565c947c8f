package resources

import (
	"bytes"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// pageSize is the unit of /proc/PID/stat's rss field.
var pageSize = int64(os.Getpagesize())

// procStat is what one /proc/PID/stat says about its process.
type procStat struct {
	state    byte
	pgrp     int
	cpuTicks int64 // utime + stime + cutime + cstime
	rssPages int64
}

// readProcStat reads /proc/PID/stat. ok is false when the process is gone
// or the file does not parse.
func readProcStat(pid string) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return procStat{}, false
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields that follow start after its last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state), f[2] pgrp, f[11..14] utime stime cutime
	// cstime, f[21] rss.
	if len(f) < 22 || len(f[0]) != 1 {
		return procStat{}, false
	}
	var s procStat
	s.state = f[0][0]
	var err1 error
	if s.pgrp, err1 = strconv.Atoi(string(f[2])); err1 != nil {
		return procStat{}, false
	}
	for _, j := range []int{11, 12, 13, 14} {
		n, err := strconv.ParseInt(string(f[j]), 10, 64)
		if err != nil {
			return procStat{}, false
		}
		s.cpuTicks += n
	}
	n, err := strconv.ParseInt(string(f[21]), 10, 64)
	if err != nil {
		return procStat{}, false
	}
	s.rssPages = n
	return s, true
}

// PidsUsage sums the resident memory and CPU time of the live processes
// among pids.
func PidsUsage(pids []int) Usage {
	var u Usage
	var ticks int64
	for _, pid := range pids {
		s, ok := readProcStat(strconv.Itoa(pid))
		if !ok || s.state == 'Z' || s.state == 'X' {
			continue
		}
		u.Processes++
		u.RSS += s.rssPages * pageSize
		ticks += s.cpuTicks
	}
	u.CPU = time.Duration(ticks) * time.Second / clockTicks
	return u
}

// GroupUsage sums the resident memory and CPU time of the live (not
// zombie) processes of process group pgid, leaving out the process
// except (the group's keeper; 0 for none). ok is false when /proc cannot
// be read.
//
// Finding a group's members takes one pass over /proc: its cost grows
// with the number of processes on the machine, which a server bounded by
// `processes` cannot raise much. It runs when status or /metrics is read,
// and every SampleInterval for a server whose memory limit has no cgroup.
func GroupUsage(pgid, except int) (u Usage, ok bool) {
	pids, ok := groupMembers(pgid, except)
	if !ok {
		return Usage{}, false
	}
	return PidsUsage(pids), true
}

// groupMembers lists the live processes of process group pgid but except
// (one pass over /proc). ok is false when /proc cannot be read.
func groupMembers(pgid, except int) (pids []int, ok bool) {
	if pgid <= 0 {
		return nil, false
	}
	d, err := os.Open("/proc")
	if err != nil {
		return nil, false
	}
	defer d.Close()
	for {
		names, err := d.Readdirnames(256)
		for _, name := range names {
			if name == "" || name[0] < '1' || name[0] > '9' {
				continue
			}
			pid, err := strconv.Atoi(name)
			if err != nil || pid == except {
				continue
			}
			s, ok := readProcStat(name)
			if !ok || s.pgrp != pgid || s.state == 'Z' || s.state == 'X' {
				continue
			}
			pids = append(pids, pid)
		}
		if err != nil {
			break
		}
	}
	return pids, true
}

// SampledMemory is the memory the processes pids hold, as a memory limit
// without a memory cgroup (best_effort) counts it:
//
//   - each process's proportional set size (PSS) and proportional swap
//     (SwapPss) from /proc/PID/smaps_rollup: a page shared by n processes
//     counts 1/n in each, so shared and mapped memfd or tmpfs pages count
//     once over the group, and swapped-out memory counts;
//   - the allocated size of every shared-memory file (tmpfs, hugetlbfs: a
//     memfd, a /dev/shm file) one of them holds open and none maps: a
//     memfd filled with write() is resident memory that no mapping shows.
//
// It cannot see a tmpfs file the server wrote and closed, nor the part of
// a held file beyond what a process maps: only a memory cgroup counts
// those (docs/sandbox.md, "Limits").
func SampledMemory(pids []int) int64 {
	type file struct{ dev, ino uint64 }
	var total int64
	held := map[file]int64{}
	mapped := map[file]bool{}
	for _, pid := range pids {
		p, err := procfs.NewProc(pid)
		if err != nil {
			continue
		}
		if r, err := p.ProcSMapsRollup(); err == nil {
			total += int64(r.Pss + r.SwapPss)
		}
		if maps, err := p.ProcMaps(); err == nil {
			for _, m := range maps {
				if m.Inode != 0 {
					mapped[file{m.Dev, m.Inode}] = true
				}
			}
		}
		fds, err := p.FileDescriptors()
		if err != nil {
			continue
		}
		for _, fd := range fds {
			path := "/proc/" + strconv.Itoa(pid) + "/fd/" + strconv.FormatUint(uint64(fd), 10)
			var fsst unix.Statfs_t
			if unix.Statfs(path, &fsst) != nil || (fsst.Type != unix.TMPFS_MAGIC && fsst.Type != unix.HUGETLBFS_MAGIC) {
				continue
			}
			var st unix.Stat_t
			if unix.Stat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
				continue
			}
			held[file{st.Dev, st.Ino}] = st.Blocks * 512
		}
	}
	for f, size := range held {
		if !mapped[f] {
			total += size
		}
	}
	return total
}
