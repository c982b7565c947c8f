//go:build unix

package transport

import (
	"io"
	"os"
	"syscall"
)

// pollableStdin returns a non-blocking duplicate of fd 0 when fd 0 is a
// pipe or a socket, and os.Stdin otherwise. O_NONBLOCK belongs to the open
// file description, which the client's end of a pipe does not share; a
// terminal's would be shared with the shell, so terminals are left alone.
func pollableStdin() io.ReadCloser {
	var st syscall.Stat_t
	if err := syscall.Fstat(0, &st); err != nil {
		return nopReadCloser{os.Stdin}
	}
	if m := st.Mode & syscall.S_IFMT; m != syscall.S_IFIFO && m != syscall.S_IFSOCK {
		return nopReadCloser{os.Stdin}
	}
	fd, err := syscall.Dup(0)
	if err != nil {
		return nopReadCloser{os.Stdin}
	}
	syscall.CloseOnExec(fd)
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nopReadCloser{os.Stdin}
	}
	// NewFile sees O_NONBLOCK and registers fd with the poller.
	return os.NewFile(uintptr(fd), "/dev/stdin")
}
