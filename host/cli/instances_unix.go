//go:build unix

package cli

import (
	"io/fs"
	"syscall"
)

// permBitsArePrivate: on Unix, a file's group and other permission bits
// say who else can reach it, so checkRuntimeDir refuses any.
const permBitsArePrivate = true

// fileOwner is the uid that owns fi (ok false when the platform has none).
func fileOwner(fi fs.FileInfo) (uid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

// processAlive reports whether a process of ours with this pid runs.
func processAlive(pid int) bool { return syscall.Kill(pid, 0) == nil }
