package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// moreHelpers are the helpers of the filter, capability and user tests
// (helper in launcher_linux_test.go runs them): each prints "ok: …" or
// "error: <errno text>" and exits 0 or 1.
var moreHelpers = map[string]func(arg string) int{
	// syscall NAME: the raw system call with every argument -1, which as
	// root without the filter fails with EINVAL, EFAULT, ESRCH or EBADF
	// (or succeeds as a no-op), never EPERM; the filter's refusal is
	// EPERM.
	"syscall": func(name string) int {
		info, _ := arch.GetInfo("")
		nr, ok := info.SyscallNames[name]
		if !ok {
			fmt.Println("error: no such system call here")
			return 2
		}
		m := ^uintptr(0)
		_, _, e := unix.Syscall6(uintptr(nr), m, m, m, m, m, m)
		return outcome(errnoOrNil(e), "called")
	},
	"unix": func(path string) int {
		c, err := net.Dial("unix", path)
		if err == nil {
			c.Close()
		}
		return outcome(err, "connected")
	},
	"socketpair": func(string) int {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			unix.Write(fds[0], []byte("x"))
			b := make([]byte, 1)
			_, err = unix.Read(fds[1], b)
		}
		return outcome(err, "paired")
	},
	"udp": func(addr string) int {
		c, err := net.Dial("udp", addr)
		if err == nil {
			_, err = c.Write([]byte("escaped"))
			c.Close()
		}
		return outcome(err, "sent")
	},
	// socket-high: socket(AF_UNIX | 1<<32, SOCK_STREAM, 0), which the
	// kernel reads as AF_UNIX.
	"socket-high": func(string) int {
		fd, _, e := unix.RawSyscall(unix.SYS_SOCKET, unix.AF_UNIX|1<<32, unix.SOCK_STREAM, 0)
		if e == 0 {
			unix.Close(int(fd))
		}
		return outcome(errnoOrNil(e), "made")
	},
	"sctp": func(string) int {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_SCTP)
		if err == nil {
			unix.Close(fd)
		}
		return outcome(err, "made")
	},
	// mknod DIR: a character device (/dev/null's numbers) in DIR.
	"mknod": func(dir string) int {
		return outcome(unix.Mknod(filepath.Join(dir, "null"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))), "made")
	},
	"mkfifo": func(dir string) int {
		return outcome(unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600), "made")
	},
	"clone-newuser": func(string) int {
		pid, _, e := unix.RawSyscall6(unix.SYS_CLONE, uintptr(unix.CLONE_NEWUSER|unix.SIGCHLD), 0, 0, 0, 0, 0)
		if e == 0 && pid == 0 {
			unix.RawSyscall(unix.SYS_EXIT, 0, 0, 0)
		}
		return outcome(errnoOrNil(e), "cloned")
	},
	"clone3": func(string) int {
		_, _, e := unix.Syscall(unix.SYS_CLONE3, 0, 0, 0)
		return outcome(errnoOrNil(e), "called")
	},
	"ids": func(string) int {
		groups, _ := unix.Getgroups()
		fmt.Printf("uid=%d gid=%d groups=%v\n", unix.Getuid(), unix.Getgid(), groups)
		return 0
	},
}

func errnoOrNil(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func outcome(err error, ok string) int {
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("ok:", ok)
	return 0
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the test needs root: the refusals must be the filter's, not a missing capability's")
	}
}

// filtered is a Spec that runs helper h under the filter f alone (no
// Landlock, the capabilities kept): what refuses a call there is the
// filter.
func filtered(t *testing.T, f *Seccomp, h string) *Spec {
	return &Spec{Path: mustSelf(t), Args: []string{"helper"}, Env: []string{helperEnv + "=" + h}, Seccomp: f}
}

// TestSeccompRefusesEachDeniedSyscall runs each denied system call as root
// with its capabilities, once without the filter (it is not refused with
// EPERM: the test can fail) and once with it (EPERM).
func TestSeccompRefusesEachDeniedSyscall(t *testing.T) {
	needRoot(t)
	info, err := seccompArch()
	if err != nil {
		t.Skip(err)
	}
	skip := map[string]bool{
		"vhangup": true, // hangs up the test's terminal, if it has one
	}
	checked := 0
	for _, g := range deniedSyscalls {
		for _, name := range g.names {
			if _, ok := info.SyscallNames[name]; !ok || skip[name] {
				continue
			}
			plain, _, _ := run(t, filtered(t, nil, "syscall "+name))
			if strings.Contains(plain, "operation not permitted") {
				t.Logf("%s: refused with EPERM without the filter too (%s); not conclusive here", name, strings.TrimSpace(plain))
				continue
			}
			out, stderr, err := run(t, filtered(t, &Seccomp{}, "syscall "+name))
			if err == nil || out != "error: operation not permitted\n" {
				t.Errorf("%s under the filter: want EPERM; got %v, stdout %q, stderr %q (without it: %q)", name, err, out, stderr, plain)
			}
			checked++
		}
	}
	if checked < 40 {
		t.Fatalf("only %d denied system calls were conclusive", checked)
	}
}

func TestSeccompNamesExist(t *testing.T) {
	for _, g := range deniedSyscalls {
		for _, n := range g.names {
			_, amd := arch.X86_64.SyscallNames[n]
			_, arm := arch.AARCH64.SyscallNames[n]
			if !amd && !arm {
				t.Errorf("%s is a system call of neither amd64 nor arm64: a typo is left out silently", n)
			}
		}
	}
	// go-seccomp-bpf assembles for the running architecture only.
	if info, err := seccompArch(); err == nil {
		for _, s := range []*Seccomp{{}, {TCPOnly: true}, {TCPOnly: true, UDP: true, UnixSockets: true}} {
			p := s.policy(info)
			if _, err := p.Assemble(); err != nil {
				t.Errorf("%s, %+v: %v", info.Name, s, err)
			}
		}
	}
}

func TestSeccompUnixSockets(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "control.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	// The control: without the filter the helper reaches the socket.
	if out, stderr, err := run(t, filtered(t, nil, "unix "+path)); err != nil || out != "ok: connected\n" {
		t.Fatalf("without the filter: %v, %q, %q", err, out, stderr)
	}
	out, stderr, err := run(t, filtered(t, &Seccomp{}, "unix "+path))
	if err == nil || out != "error: dial unix "+path+": socket: permission denied\n" {
		t.Fatalf("a Unix socket under the filter: want EACCES from socket; got %v, %q, %q", err, out, stderr)
	}
	// Abstract sockets are Unix sockets too.
	if out, _, err := run(t, filtered(t, &Seccomp{}, "unix @mcpvisor-test")); err == nil || !strings.Contains(out, "permission denied") {
		t.Fatalf("an abstract Unix socket under the filter: %v, %q", err, out)
	}
	// An int argument with high bits set is the kernel's AF_UNIX still.
	if out, stderr, err := run(t, filtered(t, nil, "socket-high")); err != nil || out != "ok: made\n" {
		t.Fatalf("the control, socket(AF_UNIX|1<<32) without the filter: %v, %q, %q", err, out, stderr)
	}
	if out, _, err := run(t, filtered(t, &Seccomp{}, "socket-high")); err == nil || out != "error: permission denied\n" {
		t.Fatalf("socket(AF_UNIX|1<<32) under the filter: want EACCES; got %v, %q", err, out)
	}
	if out, stderr, err := run(t, filtered(t, &Seccomp{}, "socketpair")); err != nil || out != "ok: paired\n" {
		t.Fatalf("socketpair under the filter: %v, %q, %q", err, out, stderr)
	}
	if out, stderr, err := run(t, filtered(t, &Seccomp{UnixSockets: true}, "unix "+path)); err != nil || out != "ok: connected\n" {
		t.Fatalf("a Unix socket with connect_unix: %v, %q, %q", err, out, stderr)
	}
}

// udpListener counts the datagrams that reach it.
func udpListener(t *testing.T) (addr string, received func() int) {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	got := make(chan struct{}, 16)
	go func() {
		b := make([]byte, 64)
		for {
			if _, _, err := pc.ReadFrom(b); err != nil {
				return
			}
			got <- struct{}{}
		}
	}()
	return pc.LocalAddr().String(), func() int { return len(got) }
}

// Under connect, UDP is refused unless udp = true; the listener proves
// the refused datagram did not leave (it gets the allowed ones).
func TestSeccompUDPUnderConnect(t *testing.T) {
	addr, received := udpListener(t)
	out, stderr, err := run(t, filtered(t, &Seccomp{TCPOnly: true}, "udp "+addr))
	if err == nil || !strings.Contains(out, "socket: permission denied") {
		t.Fatalf("UDP under connect: want EACCES; got %v, %q, %q", err, out, stderr)
	}
	if out, stderr, err := run(t, filtered(t, &Seccomp{TCPOnly: true, UDP: true}, "udp "+addr)); err != nil || out != "ok: sent\n" {
		t.Fatalf("UDP under connect with udp: %v, %q, %q", err, out, stderr)
	}
	// Without connect there is nothing to hold: UDP goes.
	if out, stderr, err := run(t, filtered(t, &Seccomp{}, "udp "+addr)); err != nil || out != "ok: sent\n" {
		t.Fatalf("UDP without connect: %v, %q, %q", err, out, stderr)
	}
	// Datagrams on loopback are delivered before the send returns.
	if n := received(); n != 2 {
		t.Fatalf("the listener got %d datagrams, want the 2 allowed ones", n)
	}
	if out, _, err := run(t, filtered(t, &Seccomp{TCPOnly: true, UDP: true}, "sctp")); err == nil || !strings.Contains(out, "permission denied") {
		t.Fatalf("an SCTP socket under connect (Landlock's TCP rules do not see it): %v, %q", err, out)
	}
}

// Through Prepare: connect allows TCP to its port and refuses UDP, with
// Landlock, the capabilities dropped and the filter together.
func TestSandboxConnectTCPAllowedUDPRefused(t *testing.T) {
	needLandlock(t, 4)
	tcp, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	udp, received := udpListener(t)
	sb := &config.Sandbox{Network: config.NetworkAny, Connect: []int{tcp.Addr().(*net.TCPAddr).Port}}
	if out, stderr, err := run(t, helperSpec(t, sb, "dial "+tcp.Addr().String())); err != nil || out != "connected\n" {
		t.Fatalf("TCP to the allowed port: %v, %q, %q", err, out, stderr)
	}
	if out, _, err := run(t, helperSpec(t, sb, "udp "+udp)); err == nil || !strings.Contains(out, "permission denied") {
		t.Fatalf("UDP under connect: %v, %q", err, out)
	}
	sb.UDP = true
	if out, stderr, err := run(t, helperSpec(t, sb, "udp "+udp)); err != nil || out != "ok: sent\n" {
		t.Fatalf("UDP under connect with udp: %v, %q, %q", err, out, stderr)
	}
	if n := received(); n != 1 {
		t.Fatalf("the listener got %d datagrams, want 1", n)
	}
}

// A device node: as root, the filter refuses it alone, Landlock refuses
// it alone (write grants no make_char), and a FIFO is still made.
func TestDeviceNodesRefused(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	if out, stderr, err := run(t, filtered(t, nil, "mknod "+dir)); err != nil || out != "ok: made\n" {
		t.Fatalf("the control, mknod as root without the filter: %v, %q, %q", err, out, stderr)
	}
	os.Remove(filepath.Join(dir, "null"))
	if out, _, err := run(t, filtered(t, &Seccomp{}, "mknod "+dir)); err == nil || out != "error: operation not permitted\n" {
		t.Fatalf("mknod under the filter: want EPERM; got %v, %q", err, out)
	}
	if out, stderr, err := run(t, filtered(t, &Seccomp{}, "mkfifo "+dir)); err != nil || out != "ok: made\n" {
		t.Fatalf("mkfifo under the filter: %v, %q, %q", err, out, stderr)
	}
	needLandlock(t, 3)
	spec := helperSpec(t, &config.Sandbox{Write: []string{dir}}, "mknod "+dir)
	spec.Seccomp, spec.NoCapabilities = nil, false
	if out, _, err := run(t, spec); err == nil || out != "error: permission denied\n" {
		t.Fatalf("mknod in a write directory under Landlock alone: want EACCES; got %v, %q", err, out)
	}
	if _, err := os.Lstat(filepath.Join(dir, "null")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the device node exists: %v", err)
	}
}

func TestSeccompNamespaces(t *testing.T) {
	needRoot(t)
	if out, stderr, err := run(t, filtered(t, nil, "clone-newuser")); err != nil || out != "ok: cloned\n" {
		t.Fatalf("the control, clone(CLONE_NEWUSER) without the filter: %v, %q, %q", err, out, stderr)
	}
	if out, _, err := run(t, filtered(t, &Seccomp{}, "clone-newuser")); err == nil || out != "error: operation not permitted\n" {
		t.Fatalf("clone(CLONE_NEWUSER) under the filter: %v, %q", err, out)
	}
	if out, _, err := run(t, filtered(t, &Seccomp{}, "clone3")); err == nil || out != "error: function not implemented\n" {
		t.Fatalf("clone3 under the filter: want ENOSYS; got %v, %q", err, out)
	}
}

// A system call made with another architecture's convention (int 0x80
// on amd64) carries that architecture in seccomp_data: the guard fails
// it with ENOSYS instead of letting it past the native rules. Run in
// x/net/bpf's VM, which loads words big-endian: the data is laid out so.
func TestSeccompForeignArchitectureRefused(t *testing.T) {
	info, err := seccompArch()
	if err != nil {
		t.Skip(err)
	}
	prog, err := (&Seccomp{}).program()
	if err != nil {
		t.Fatal(err)
	}
	raw := make([]bpf.RawInstruction, len(prog))
	for i, p := range prog {
		raw[i] = bpf.RawInstruction{Op: p.Code, Jt: p.Jt, Jf: p.Jf, K: p.K}
	}
	insts, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("the program does not disassemble")
	}
	vm, err := bpf.NewVM(insts)
	if err != nil {
		t.Fatal(err)
	}
	data := func(nr int, auditArch uint32) []byte {
		b := make([]byte, 64)
		binary.BigEndian.PutUint32(b[0:], uint32(nr))
		binary.BigEndian.PutUint32(b[4:], auditArch)
		return b
	}
	action := func(b []byte) uint32 {
		v, err := vm.Run(b)
		if err != nil {
			t.Fatal(err)
		}
		return uint32(v)
	}
	native := uint32(info.ID)
	if got := action(data(info.SyscallNames["getpid"], native)); got != unix.SECCOMP_RET_ALLOW {
		t.Fatalf("getpid: %#x, want allow", got)
	}
	if got := action(data(info.SyscallNames["bpf"], native)); got != uint32(errEPERM) {
		t.Fatalf("bpf: %#x, want EPERM", got)
	}
	foreign := uint32(arch.I386.ID)
	if info.Name == "aarch64" {
		foreign = uint32(arch.ARM.ID)
	}
	if got := action(data(74, foreign)); got != uint32(errENOSYS) {
		t.Fatalf("a foreign-architecture call: %#x, want ENOSYS", got)
	}
}

// TestCapabilitiesAllZero: a sandboxed server holds no capability in any
// set, as root too.
func TestCapabilitiesAllZero(t *testing.T) {
	needLandlock(t, 3)
	needRoot(t)
	// The control: without NoCapabilities root keeps its sets.
	spec := helperSpec(t, &config.Sandbox{}, "caps")
	spec.NoCapabilities = false
	if out, _, _ := run(t, spec); !strings.Contains(out, "CapEff:\t000001ff") && !strings.Contains(out, "CapBnd:\t000001ff") {
		t.Fatalf("the control, root without dropping: %q", out)
	}
	out, stderr, err := run(t, helperSpec(t, &config.Sandbox{}, "caps"))
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	seen := 0
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		seen++
		if strings.Trim(f[1], "0") != "" {
			t.Errorf("the server has capabilities: %s", l)
		}
	}
	if seen != 5 {
		t.Fatalf("want CapInh, CapPrm, CapEff, CapBnd, CapAmb; got %q", out)
	}
}

// TestUserSwitch: user and group run the server as that user, with no
// supplementary group and no capability; its temporary directory is its
// own.
func TestUserSwitch(t *testing.T) {
	needLandlock(t, 3)
	needRoot(t)
	spec := helperSpec(t, &config.Sandbox{User: "65534", Group: "65534"}, "ids")
	if spec.Credential == nil || spec.Credential.UID != 65534 || spec.Credential.GID != 65534 {
		t.Fatalf("Credential = %+v", spec.Credential)
	}
	// The test binary must be reachable by nobody: run a copy in an open
	// directory.
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	b, err := os.ReadFile(mustSelf(t))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sandbox.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	spec.Path = bin
	spec.Landlock.Read = append(spec.Landlock.Read, dir)
	if spec.View != nil {
		spec.View.Read = append(spec.View.Read, dir) // and in the view
	}
	out, stderr, err := run(t, spec)
	if err != nil || out != "uid=65534 gid=65534 groups=[]\n" {
		t.Fatalf("ids as the block's user: %v, %q, %q", err, out, stderr)
	}
	tmp := envValue(spec.Env, "TMPDIR")
	st, err := os.Stat(tmp)
	if err != nil || st.Sys().(*syscall.Stat_t).Uid != 65534 {
		t.Fatalf("the private temporary directory is not the user's: %v", err)
	}
	spec.Env = setEnv(spec.Env, helperEnv, "caps")
	out, _, _ = run(t, spec)
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(l); len(f) == 2 && strings.Trim(f[1], "0") != "" {
			t.Errorf("the user's server has capabilities: %s", l)
		}
	}
	if _, err := ResolveUser(&config.Sandbox{User: "no-such-user-" + strconv.Itoa(os.Getpid())}, "notes"); err == nil || !strings.Contains(err.Error(), "not a user on this machine") {
		t.Fatalf("an unknown user: %v", err)
	}
}

// On a CPU without a filter a start fails closed, unless best_effort,
// which warns; Summary names the block's socket rules and user.
func TestSeccompUnsupportedArchitecture(t *testing.T) {
	saved := goarch
	t.Cleanup(func() { goarch = saved })
	goarch = "riscv64"
	_, _, _, err := Prepare(&config.Sandbox{}, "notes", "/bin/cat", "/bin/cat", nil, nil, "")
	if err == nil || !strings.Contains(err.Error(), "riscv64") || !strings.Contains(err.Error(), "best_effort") {
		t.Fatalf("want a refusal naming the architecture; got %v", err)
	}
	spec, tmp, warning, err := Prepare(&config.Sandbox{BestEffort: true}, "notes", "/bin/cat", "/bin/cat", nil, nil, "")
	if err != nil || spec.Seccomp != nil || !strings.Contains(warning, "no system call filter") {
		t.Fatalf("best effort: want a warning and no filter; got %v, %q", err, warning)
	}
	os.RemoveAll(tmp)
}

func TestSummaryNamesSocketRulesAndUser(t *testing.T) {
	got := Summary(&config.Sandbox{Network: config.NetworkAny, Connect: []int{443}, UDP: true, ConnectUnix: []string{"/run/a.sock"}, User: "mcp"})
	if want := "landlock: read 0, write 0; net any, connect 443, udp, unix 1; user mcp"; got != want {
		t.Fatalf("Summary = %q, want %q", got, want)
	}
}
