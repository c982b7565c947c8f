//go:build unix

package audit

import (
	"io/fs"
	"syscall"
)

// permBitsArePrivate: on Unix, a file's group and other permission bits
// say who else can read it, so the key file must have none.
const permBitsArePrivate = true

// fileOwner is the uid that owns fi (ok false when the platform has none).
func fileOwner(fi fs.FileInfo) (uid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
