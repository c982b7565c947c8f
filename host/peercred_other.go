//go:build !linux && !darwin && !freebsd

package host

import (
	"errors"
	"net"
)

// peerUID cannot learn the peer's uid on this platform: a token-less
// request over the control socket is then not the local user (localsock.go).
func peerUID(*net.UnixConn) (int, error) {
	return 0, errors.New("this platform does not tell a unix socket's peer")
}
