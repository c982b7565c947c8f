// Package peercred tells who is at the other end of a unix socket: the
// effective uid (and, where the kernel says, the pid) it recorded for the
// peer when it connected. The control socket uses it both ways
// (docs/security.md, "Local trust"): the CLI checks the host that listens,
// the host checks the CLI that connects — its uid, and whether its pid is
// a process mcpvisor started (host/internal/proctree).
package peercred

import (
	"errors"
	"net"
)

// ErrUnsupported is returned where the platform does not tell a unix
// socket's peer.
var ErrUnsupported = errors.New("this platform does not tell a unix socket's peer")

// Peer is the process at the other end of a unix socket, as it was when it
// connected.
type Peer struct {
	// UID is its effective uid.
	UID int
	// PID is its process id in this process's pid namespace; 0 where the
	// platform does not tell, or the peer is in a pid namespace this one
	// cannot see.
	PID int
}

// UID returns the effective uid of the process at the other end of c, as
// it was when it connected.
func UID(c *net.UnixConn) (int, error) {
	p, err := Of(c)
	return p.UID, err
}

// Of returns the process at the other end of c.
func Of(c *net.UnixConn) (Peer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var p Peer
	var credErr error
	if err := raw.Control(func(fd uintptr) { p, credErr = peerOf(int(fd)) }); err != nil {
		return Peer{}, err
	}
	return p, credErr
}
