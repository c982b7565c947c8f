package sandbox

import (
	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// writeDirRights are what a write directory grants: go-landlock's
// RWDirs without make_char and make_block, so that a server (root
// included) cannot create a device node there and read the kernel's
// memory or a disk through it. The rights stay handled, so Landlock
// denies them.
const writeDirRights = landlock.AccessFSSet(ll.AccessFSExecute | ll.AccessFSReadFile | ll.AccessFSReadDir |
	ll.AccessFSWriteFile | ll.AccessFSRemoveDir | ll.AccessFSRemoveFile | ll.AccessFSMakeDir | ll.AccessFSMakeReg |
	ll.AccessFSMakeSock | ll.AccessFSMakeFifo | ll.AccessFSMakeSym | ll.AccessFSTruncate)

// writeDir is the rule of a write directory under cfg.
func writeDir(cfg landlock.Config, p string) landlock.FSRule {
	return landlock.PathAccess(writeDirRights&cfg.HandledAccessFS, p)
}

// connectUnixRules let a server connect to the Unix sockets of the
// block's connect_unix (Landlock ABI 9). A socket that does not exist
// yet has no rule (Landlock names files, not paths).
func connectUnixRules(cfg landlock.Config, paths []string) []landlock.Rule {
	var out []landlock.Rule
	for _, p := range paths {
		if len(existing([]string{p})) == 1 {
			out = append(out, landlock.PathAccess(landlock.AccessFSSet(ll.AccessFSResolveUnix)&cfg.HandledAccessFS, p))
		}
	}
	return out
}
