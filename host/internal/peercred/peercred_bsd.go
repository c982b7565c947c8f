//go:build darwin || freebsd

package peercred

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// peerOf tells the uid only: the pid (LOCAL_PEERPID on macOS) is not
// used on these platforms, where proctree cannot walk a process tree.
func peerOf(fd int) (Peer, error) {
	cred, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return Peer{}, fmt.Errorf("LOCAL_PEERCRED: %w", err)
	}
	return Peer{UID: int(cred.Uid)}, nil
}
