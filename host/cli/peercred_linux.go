package cli

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// checkPeer verifies that the process at the other end of c runs as our
// effective uid (SO_PEERCRED): a socket file could be ours while the
// process that listens on it is not.
func checkPeer(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if credErr != nil {
		return fmt.Errorf("cannot tell who listens on it: %w", credErr)
	}
	if int(cred.Uid) != os.Geteuid() {
		return fmt.Errorf("the process listening on it (pid %d) runs as uid %d, not as you (uid %d)", cred.Pid, cred.Uid, os.Geteuid())
	}
	return nil
}
