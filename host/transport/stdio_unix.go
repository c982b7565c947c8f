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

// pollableStdout returns a non-blocking duplicate of fd 1 when fd 1 is a
// pipe or a socket, and os.Stdout (never closed) otherwise; see
// pollableStdin. Closing the duplicate puts the descriptor back in
// blocking mode first: O_NONBLOCK is shared with fd 1, which the process
// may still write to as it exits.
func pollableStdout() io.WriteCloser {
	var st syscall.Stat_t
	if err := syscall.Fstat(1, &st); err != nil {
		return nopWriteCloser{os.Stdout}
	}
	if m := st.Mode & syscall.S_IFMT; m != syscall.S_IFIFO && m != syscall.S_IFSOCK {
		return nopWriteCloser{os.Stdout}
	}
	fd, err := syscall.Dup(1)
	if err != nil {
		return nopWriteCloser{os.Stdout}
	}
	syscall.CloseOnExec(fd)
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nopWriteCloser{os.Stdout}
	}
	return &stdoutDup{File: os.NewFile(uintptr(fd), "/dev/stdout")}
}

// stdoutDup is fd 1's non-blocking duplicate.
type stdoutDup struct{ *os.File }

func (d *stdoutDup) Close() error {
	if rc, err := d.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { syscall.SetNonblock(int(fd), false) })
	}
	return d.File.Close()
}
