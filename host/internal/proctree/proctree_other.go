//go:build !linux

package proctree

import "net/netip"

// Server reports why pid is a process one of hosts started ("" when it is
// not).
func Server(pid int, hosts []int) (string, error) { return "", ErrUnsupported }

// TCPPeer reports why the local end of the TCP connection from remote to
// local belongs to a process one of hosts started ("" when it does not,
// or the connection comes from another machine).
func TCPPeer(remote, local netip.AddrPort, hosts []int) (string, error) {
	return "", ErrUnsupported
}
