package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// dropPrivileges is the launcher's step before the filter: a sandboxed
// server keeps no capability, in any set, even when mcpvisor is root
// (root with its capabilities could create device nodes, load BPF, set
// the host name), and runs as spec.Credential's user when set. The
// bounding set goes first, while the launcher still holds CAP_SETPCAP;
// the switch of user next, while it holds CAP_SETUID and CAP_SETGID;
// the other sets last. With an empty bounding set and no_new_privs, no
// exec (a set-user-ID root program, file capabilities) gives any back.
func dropPrivileges(spec *Spec) error {
	if !spec.NoCapabilities && spec.Credential == nil {
		return nil
	}
	if err := dropBoundingSet(); err != nil {
		return fmt.Errorf("dropping the capability bounding set: %w", err)
	}
	if err := becomeUser(spec.Credential); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clearing the ambient capabilities: %w", err)
	}
	var none [2]unix.CapUserData
	if err := unix.Capset(&unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}, &none[0]); err != nil {
		return fmt.Errorf("clearing the capabilities: %w", err)
	}
	return nil
}

// dropBoundingSet removes every capability from this thread's bounding
// set. Without CAP_SETPCAP (a user other than root, outside a user
// namespace) it cannot, and need not: such a process holds no
// capability and, under no_new_privs, can gain none.
func dropBoundingSet() error {
	if !hasCapability(unix.CAP_SETPCAP) {
		return nil
	}
	for c := 0; c <= lastCapability(); c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("capability %d: %w", c, err)
		}
	}
	return nil
}

// hasCapability reports whether c is in this thread's effective set.
func hasCapability(c int) bool {
	var data [2]unix.CapUserData
	if err := unix.Capget(&unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}, &data[0]); err != nil {
		return false
	}
	return data[c/32].Effective&(1<<(uint(c)%32)) != 0
}

// lastCapability is the kernel's highest capability number: a kernel
// newer than x/sys may know more than unix.CAP_LAST_CAP.
func lastCapability() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= 0 && n < 64 {
			return n
		}
	}
	return unix.CAP_LAST_CAP
}
