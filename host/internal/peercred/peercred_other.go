//go:build !linux && !darwin && !freebsd

package peercred

func peerOf(int) (Peer, error) { return Peer{}, ErrUnsupported }
