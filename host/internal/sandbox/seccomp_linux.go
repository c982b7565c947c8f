package sandbox

import (
	"fmt"
	"runtime"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Socket constants the filter compares system call arguments with.
const (
	// sockFlags are the flags socket(2) takes in its type argument; the
	// kernel refuses any other bit (EINVAL), so a type is one of the
	// four combinations of a base type with them.
	sockNonblock = unix.SOCK_NONBLOCK
	sockCloexec  = unix.SOCK_CLOEXEC
	// cloneNewFlags are clone(2)'s namespace flags (CLONE_NEWTIME is
	// clone3's and unshare's only: in clone's flags it is the exit
	// signal's byte).
	cloneNewFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET
	// deviceModeBit is set in S_IFCHR (0020000) and S_IFBLK (0060000)
	// and in no other file type mknod creates (S_IFREG, S_IFIFO,
	// S_IFSOCK; S_IFLNK and S_IFDIR are EINVAL there).
	deviceModeBit = unix.S_IFCHR
)

var (
	errEPERM  = seccomp.ActionErrno | seccomp.Action(unix.EPERM)
	errEACCES = seccomp.ActionErrno | seccomp.Action(unix.EACCES)
	errENOSYS = seccomp.ActionErrno | seccomp.Action(unix.ENOSYS)
)

// seccompArch is this CPU's system call table, or an error on an
// architecture the filter does not know (it knows amd64 and arm64).
func seccompArch() (*arch.Info, error) {
	if goarch != "amd64" && goarch != "arm64" {
		return nil, fmt.Errorf("the system call filter supports amd64 and arm64, and this is %s", goarch)
	}
	return arch.GetInfo(goarch)
}

// goarch is the CPU architecture the filter is built for (a test
// pretends another).
var goarch = runtime.GOARCH

// policy is the filter for s on this architecture, as go-seccomp-bpf
// assembles it.
func (s *Seccomp) policy(info *arch.Info) seccomp.Policy {
	var names []string
	for _, g := range deniedSyscalls {
		for _, n := range g.names {
			if _, ok := info.SyscallNames[n]; ok {
				names = append(names, n)
			}
		}
	}
	var conds []seccomp.NameWithConditions
	cond := func(name string, cs ...seccomp.Condition) {
		if _, ok := info.SyscallNames[name]; ok {
			conds = append(conds, seccomp.NameWithConditions{Name: name, Conditions: cs})
		}
	}
	eq := func(arg uint32, v uint64) seccomp.Condition {
		return seccomp.Condition{Argument: arg, Operation: seccomp.Equal, Value: v}
	}
	ne := func(arg uint32, v uint64) seccomp.Condition {
		return seccomp.Condition{Argument: arg, Operation: seccomp.NotEqual, Value: v}
	}
	variants := func(t uint64) []uint64 {
		return []uint64{t, t | sockNonblock, t | sockCloexec, t | sockNonblock | sockCloexec}
	}

	cond("clone", seccomp.Condition{Argument: 0, Operation: seccomp.BitsSet, Value: cloneNewFlags})
	cond("mknod", seccomp.Condition{Argument: 1, Operation: seccomp.BitsSet, Value: deviceModeBit})
	cond("mknodat", seccomp.Condition{Argument: 2, Operation: seccomp.BitsSet, Value: deviceModeBit})

	var socket []seccomp.NameWithConditions
	sock := func(cs ...seccomp.Condition) {
		socket = append(socket, seccomp.NameWithConditions{Name: "socket", Conditions: cs})
	}
	// socket's arguments are ints: the kernel reads their low 32 bits,
	// the filter all 64. A call with bits above them set (socket(1 |
	// 1<<32, …) is AF_UNIX to the kernel, not to an Equal) is refused
	// whole; no runtime makes one (glibc and Go extend a non-negative int
	// with zeros).
	for a := uint32(0); a < 3; a++ {
		sock(seccomp.Condition{Argument: a, Operation: seccomp.GreaterThan, Value: 0xffffffff})
	}
	if !s.UnixSockets {
		sock(eq(0, unix.AF_UNIX))
	}
	if s.TCPOnly {
		for _, domain := range []uint64{unix.AF_INET, unix.AF_INET6} {
			// Neither a stream (TCP) socket nor, with udp, a datagram one.
			other := []seccomp.Condition{eq(0, domain)}
			allowed := variants(unix.SOCK_STREAM)
			if s.UDP {
				allowed = append(allowed, variants(unix.SOCK_DGRAM)...)
			}
			for _, t := range allowed {
				other = append(other, ne(1, t))
			}
			sock(other...)
			// A stream socket of another protocol than TCP (SCTP, MPTCP),
			// which Landlock's TCP rules do not see.
			for _, t := range variants(unix.SOCK_STREAM) {
				sock(eq(0, domain), eq(1, t), ne(2, 0), ne(2, unix.IPPROTO_TCP))
			}
		}
	}

	groups := []seccomp.SyscallGroup{
		{Names: names, NamesWithCondtions: conds, Action: errEPERM},
		{Names: []string{"clone3"}, Action: errENOSYS},
	}
	groups = append(groups, seccomp.SyscallGroup{NamesWithCondtions: socket, Action: errEACCES})
	return seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: groups}
}

// program assembles s for this architecture. go-seccomp-bpf's program
// allows every call made with another architecture's convention (a
// 32-bit int 0x80 call of an amd64 process, an arm32 call of an arm64
// one), whose numbers its table does not hold: the guard in front fails
// them all with ENOSYS, so the filter cannot be stepped around.
func (s *Seccomp) program() ([]unix.SockFilter, error) {
	info, err := seccompArch()
	if err != nil {
		return nil, err
	}
	p := s.policy(info)
	insts, err := p.Assemble()
	if err != nil {
		return nil, fmt.Errorf("assembling the system call filter: %w", err)
	}
	const archOffset = 4 // seccomp_data.arch
	guard := []bpf.Instruction{
		bpf.LoadAbsolute{Off: archOffset, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(errENOSYS)},
	}
	raw, err := bpf.Assemble(append(guard, insts...))
	if err != nil {
		return nil, fmt.Errorf("assembling the system call filter: %w", err)
	}
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}

// loadSeccomp sets no_new_privs (a filter needs it without
// CAP_SYS_ADMIN, and it is what makes the filter stick across the exec)
// and loads s on this thread, the one that execs the server. Nil loads
// nothing.
func loadSeccomp(s *Seccomp) error {
	if s == nil {
		return nil
	}
	prog, err := s.program()
	if err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("setting no_new_privs: %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return fmt.Errorf("loading the system call filter (seccomp): %w", e)
	}
	return nil
}

// checkSeccomp fails closed like checkABI: on an architecture the filter
// does not know, a server starts without it only with best_effort, and
// then with a warning.
func checkSeccomp(s *Seccomp, server string, bestEffort bool) (_ *Seccomp, warning string, err error) {
	if _, err := s.program(); err != nil {
		if bestEffort {
			return nil, fmt.Sprintf("the sandbox of %q has no system call filter: %v; best_effort = true: starting it without one", server, err), nil
		}
		return nil, "", fmt.Errorf("the sandbox of %q needs a system call filter: %w; set best_effort = true in the sandbox block to start it without one", server, err)
	}
	return s, "", nil
}
