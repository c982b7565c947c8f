//go:build darwin || freebsd

package peercred

import (
	"fmt"

	"golang.org/x/sys/unix"
)

func peerUID(fd int) (int, error) {
	cred, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return 0, fmt.Errorf("LOCAL_PEERCRED: %w", err)
	}
	return int(cred.Uid), nil
}
