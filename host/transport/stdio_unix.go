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
	fd, ok := nonblockingDup(0)
	if !ok {
		return nopReadCloser{os.Stdin}
	}
	// NewFile sees O_NONBLOCK and registers fd with the poller.
	return os.NewFile(uintptr(fd), "/dev/stdin")
}

// nonblockingDup returns a close-on-exec duplicate of fd in non-blocking
// mode when fd is a pipe or a socket.
func nonblockingDup(fd int) (int, bool) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return -1, false
	}
	if m := st.Mode & syscall.S_IFMT; m != syscall.S_IFIFO && m != syscall.S_IFSOCK {
		return -1, false
	}
	dup, err := syscall.Dup(fd)
	if err != nil {
		return -1, false
	}
	syscall.CloseOnExec(dup)
	if err := syscall.SetNonblock(dup, true); err != nil {
		syscall.Close(dup)
		return -1, false
	}
	return dup, true
}

// pollableStdout returns a non-blocking duplicate of fd 1 when fd 1 is a
// pipe or a socket, and os.Stdout (never closed) otherwise; see
// pollableStdin. Closing the duplicate puts the descriptor back in
// blocking mode first: O_NONBLOCK is shared with fd 1, which the process
// may still write to as it exits.
func pollableStdout() io.WriteCloser {
	fd, ok := nonblockingDup(1)
	if !ok {
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
