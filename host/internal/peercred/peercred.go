// Package peercred tells who is at the other end of a unix socket: the
// effective uid the kernel recorded for the peer when it connected. The
// control socket uses it both ways (docs/security.md, "Local trust"): the
// CLI checks the host that listens, the host checks the CLI that connects.
package peercred

import (
	"errors"
	"net"
)

// ErrUnsupported is returned where the platform does not tell a unix
// socket's peer.
var ErrUnsupported = errors.New("this platform does not tell a unix socket's peer")

// UID returns the effective uid of the process at the other end of c, as
// it was when it connected.
func UID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var uid int
	var credErr error
	if err := raw.Control(func(fd uintptr) { uid, credErr = peerUID(int(fd)) }); err != nil {
		return 0, err
	}
	return uid, credErr
}
