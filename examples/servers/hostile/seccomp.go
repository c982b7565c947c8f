//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The system call probes (docs/sandbox.md "System calls"): what a server
// running as root, or as any user, could ask the kernel for.
func init() {
	// unix-connect ARG: connects to the Unix socket at path ARG
	// (mcpvisor's control socket, an ssh-agent).
	register("unix-connect", func(_ context.Context, path string) (string, error) {
		c, err := net.Dial("unix", path)
		if err != nil {
			return "", err
		}
		c.Close()
		return "connected to " + path, nil
	})
	// socketpair: a connected pair of Unix sockets (node and Python
	// use them for their children's stdio): the positive control.
	register("socketpair", func(context.Context, string) (string, error) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		unix.Close(fds[0])
		unix.Close(fds[1])
		return "a socket pair", nil
	})
	// mknod ARG: creates a character device with /dev/kmsg's numbers in
	// the directory ARG and reads a record of the kernel log through it.
	register("mknod", func(_ context.Context, dir string) (string, error) {
		path := filepath.Join(dir, "kmsg")
		if err := unix.Mknod(path, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 11))); err != nil {
			return "", fmt.Errorf("mknod: %w", err)
		}
		defer os.Remove(path)
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			return "", fmt.Errorf("made %s, open: %w", path, err)
		}
		defer unix.Close(fd)
		b := make([]byte, 512)
		n, err := unix.Read(fd, b)
		if err != nil {
			return "", fmt.Errorf("made %s, read: %w", path, err)
		}
		return fmt.Sprintf("the kernel log: %q", strings.SplitN(string(b[:n]), "\n", 2)[0]), nil
	})
	// bpf: creates a BPF array map (the first step of loading a program).
	register("bpf", func(context.Context, string) (string, error) {
		// union bpf_attr for BPF_MAP_CREATE: map_type, key_size,
		// value_size, max_entries.
		attr := [16]uint32{unix.BPF_MAP_TYPE_ARRAY, 4, 4, 1}
		fd, _, e := unix.Syscall(unix.SYS_BPF, unix.BPF_MAP_CREATE, uintptr(unsafe.Pointer(&attr)), 64)
		if e != 0 {
			return "", e
		}
		unix.Close(int(fd))
		return "a BPF map", nil
	})
	// sethostname ARG: sets the host name of the server's UTS namespace
	// (the host's, without one) to its own, unchanged: the call, not
	// the name, is the escape.
	register("sethostname", func(context.Context, string) (string, error) {
		name, err := os.Hostname()
		if err != nil {
			return "", err
		}
		if err := unix.Sethostname([]byte(name)); err != nil {
			return "", err
		}
		return "set the host name to " + name, nil
	})
	// udp-send ARG: sends one datagram to host:port ARG.
	register("udp-send", func(_ context.Context, addr string) (string, error) {
		c, err := net.Dial("udp", addr)
		if err != nil {
			return "", err
		}
		defer c.Close()
		if _, err := c.Write([]byte("hostile")); err != nil {
			return "", err
		}
		return "sent a datagram to " + addr, nil
	})
	// capabilities: the capability sets of /proc/self/status; escaped
	// when the process holds one (inheritable, permitted, effective or
	// ambient). The bounding set is listed, not counted: it is only a
	// ceiling, and a user other than root cannot empty it (no_new_privs
	// keeps it from mattering).
	register("capabilities", func(context.Context, string) (string, error) {
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			return "", err
		}
		var sets []string
		held := false
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 2 && strings.HasPrefix(f[0], "Cap") {
				sets = append(sets, f[0]+f[1])
				held = held || (f[0] != "CapBnd:" && strings.Trim(f[1], "0") != "")
			}
		}
		if !held {
			return "", errors.New("no capability: " + strings.Join(sets, " "))
		}
		return strings.Join(sets, " "), nil
	})
	// unshare-user: a child in a user namespace of its own, in which it
	// would hold every capability. A child, because the kernel refuses
	// unshare(CLONE_NEWUSER) to a multi-threaded process (every Go
	// program): clone(CLONE_NEWUSER) is the call a runtime would make.
	register("unshare-user", func(ctx context.Context, _ string) (string, error) {
		cmd := exec.CommandContext(ctx, "/bin/true")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
		if err := cmd.Run(); err != nil {
			return "", err
		}
		return "a child in a user namespace of its own", nil
	})
}
