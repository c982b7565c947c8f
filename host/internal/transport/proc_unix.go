//go:build unix && !linux

package transport

import (
	"errors"
	"syscall"
)

// errNoKeeper means the platform has no group keeper: there the child
// leads its own group, as it always did.
var errNoKeeper = errors.New("no process group keeper on this platform")

// childProcAttr puts the child into process group pgid (a new group it
// leads when pgid is 0).
func childProcAttr(pgid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
}

// groupKeeper does not exist on Unix systems other than Linux.
type groupKeeper struct{}

func startGroupKeeper() (*groupKeeper, error) { return nil, errNoKeeper }

func (k *groupKeeper) pid() int { return 0 }

func (k *groupKeeper) stop() {}

// groupHasLiveMembers reports whether any process is in process group
// pgid. except is the keeper's pid, and there is no keeper here.
func groupHasLiveMembers(pgid, except int) bool {
	return !errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}
