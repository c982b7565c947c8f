//go:build unix

package secrets

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// private refuses a store file or directory that group or others may
// read or write, or that another user owns.
func private(path string, fi fs.FileInfo) error {
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("the secret store %s is accessible by group or others (mode %04o); if it is yours, run chmod go-rwx %s and set its secrets again, since others may have read them", path, fi.Mode().Perm(), path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("the secret store %s belongs to uid %d, not to you (uid %d); move it away", path, st.Uid, os.Geteuid())
	}
	return nil
}
