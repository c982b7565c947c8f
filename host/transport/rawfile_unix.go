//go:build unix

package transport

/*
Design note: pipe I/O without the runtime's system-call entry.

A read or write through os.File enters the system call the way a
blocking one does (entersyscall), and that entry wakes the runtime's
sysmon thread whenever it sleeps because every processor was idle — which
between two calls on a stdio hop is always. Woken, sysmon polls every
20 µs while anything runs: a quarter of mcpvisor's CPU in the stdio c=1
benchmark, on a machine whose two cores the client and the upstream need
too. The pipes mcpvisor reads and writes on the per-call path (its own
stdin and stdout under `run --stdio`, and every stdio upstream's) are
non-blocking and registered with Go's poller, so their reads and writes
never block: rawFile makes them with RawSyscall inside the poller's
RawConn, waiting in the poller on EAGAIN as os.File does. Blocking files
(a terminal, a regular file) are left as they are.
*/

import (
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// rawFile reads and writes a non-blocking, poller-registered file with
// raw system calls.
type rawFile struct {
	f  file
	rc syscall.RawConn
}

// file is an *os.File, or one wrapped for its Close (stdoutDup).
type file interface {
	syscall.Conn
	io.Closer
	Name() string
}

// rawIO returns x as a rawFile when it is a non-blocking file, and x
// unchanged otherwise.
func rawIO(x any) any {
	f, ok := x.(file)
	if !ok {
		return x
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return x
	}
	nonblock := false
	rc.Control(func(fd uintptr) {
		fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
		nonblock = err == nil && fl&unix.O_NONBLOCK != 0
	})
	if !nonblock {
		return x
	}
	return &rawFile{f: f, rc: rc}
}

func (r *rawFile) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno error
	err := r.rc.Read(func(fd uintptr) bool {
		for {
			m, e := rawRead(fd, p)
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait in the poller
			}
			n, errno = m, e
			return true
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno != nil:
		return 0, &os.PathError{Op: "read", Path: r.f.Name(), Err: errno}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (r *rawFile) Write(p []byte) (int, error) {
	w := 0
	var errno error
	err := r.rc.Write(func(fd uintptr) bool {
		for w < len(p) {
			m, e := rawWrite(fd, p[w:])
			switch e {
			case nil:
				w += m
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false // wait in the poller
			default:
				errno = e
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return w, err
	case errno != nil:
		return w, &os.PathError{Op: "write", Path: r.f.Name(), Err: errno}
	}
	return w, nil
}

func (r *rawFile) Close() error { return r.f.Close() }
