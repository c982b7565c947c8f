package sandbox

// The system call filter (docs/design.md §18.1, docs/sandbox.md "System
// calls"): what a sandboxed server may not ask the kernel for, whatever
// its user. The list follows Docker's default profile
// (github.com/moby/profiles/seccomp), which refuses these unless the
// container holds the capability that guards them; a sandboxed server
// holds none, and the filter refuses them as well, so a kernel bug in a
// capability check or a process that kept a capability by accident is
// not enough. Unlike Docker's, the filter is a deny list: every other
// system call is allowed, so a new runtime's new system call never breaks
// a server. A refused call fails with EPERM (EACCES for socket), never a
// kill, so a runtime sees an error it handles.

import (
	"fmt"
	"strings"
)

// Seccomp is the system call filter part of a Spec. The fixed deny list
// (deniedSyscalls) always applies; the fields allow or deny sockets.
type Seccomp struct {
	// UnixSockets allows socket(AF_UNIX, …) (the block's connect_unix).
	// Without it a server can make Unix sockets only with socketpair,
	// which connect nowhere: Landlock before ABI 9 cannot restrict
	// which Unix socket a server connects to (mcpvisor's control socket,
	// an ssh-agent), nor abstract ones before ABI 6.
	UnixSockets bool `json:"unix_sockets,omitempty"`
	// TCPOnly refuses every Internet socket but TCP ones: under connect,
	// Landlock rules TCP only, and UDP, SCTP or MPTCP would reach any
	// port of any host.
	TCPOnly bool `json:"tcp_only,omitempty"`
	// UDP allows UDP sockets under TCPOnly (the block's udp = true).
	UDP bool `json:"udp,omitempty"`
}

// syscallGroup is a set of system calls the filter refuses, with what
// they would give a server.
type syscallGroup struct {
	what  string
	names []string
}

// deniedSyscalls are refused with EPERM. A name a CPU architecture does
// not have (mknod on arm64) is left out there.
var deniedSyscalls = []syscallGroup{
	{"kernel modules, kexec, reboot, swap, process accounting, the kernel log",
		[]string{"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "syslog"}},
	{"BPF programs and perf events", []string{"bpf", "perf_event_open"}},
	{"the kernel keyrings", []string{"keyctl", "add_key", "request_key"}},
	{"mounts and the root directory", []string{"mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "open_tree_attr", "fsopen", "fsmount", "fspick", "fsconfig", "mount_setattr"}},
	{"namespaces (also clone with a CLONE_NEW* flag; clone3 fails with ENOSYS, so runtimes fall back to clone)", []string{"unshare", "setns"}},
	{"the host name and the clock", []string{"sethostname", "setdomainname", "settimeofday", "clock_settime"}},
	{"other processes and their memory", []string{"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "process_madvise"}},
	{"I/O ports, file handles, quotas, the terminal", []string{"iopl", "ioperm", "open_by_handle_at", "lookup_dcookie", "quotactl", "quotactl_fd", "vhangup", "fanotify_init"}},
	{"userfaultfd and io_uring (whose operations a filter cannot see)", []string{"userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register"}},
}

// Describe is what the filter does, a line per rule, for `mcpvisor
// sandbox NAME`.
func (s *Seccomp) Describe() []string {
	var out []string
	for _, g := range deniedSyscalls {
		out = append(out, fmt.Sprintf("refused: %s: %s", g.what, strings.Join(g.names, ", ")))
	}
	out = append(out, "refused: mknod and mknodat of a character or block device")
	if s.UnixSockets {
		out = append(out, "allowed: Unix sockets (connect_unix; what they reach is the paths listed)")
	} else {
		out = append(out, "refused: Unix sockets (socket(AF_UNIX)); socketpair allowed; connect_unix allows them")
	}
	if s.TCPOnly {
		if s.UDP {
			out = append(out, "allowed: UDP to any host and port (udp = true); refused: other Internet sockets but TCP (SCTP, MPTCP, raw)")
		} else {
			out = append(out, "refused: Internet sockets other than TCP (UDP, SCTP, MPTCP), so connect holds; udp = true allows UDP (DNS)")
		}
	}
	return out
}
