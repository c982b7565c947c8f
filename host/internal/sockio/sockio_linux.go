package sockio

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Conn is a detached TCP connection. Read and Write may be called
// concurrently with each other and with Close, Abort and Wake; like a
// net.Conn, it expects one reader and one writer at a time.
type Conn struct {
	fd            int
	local, remote net.Addr

	mu      sync.Mutex
	ops     int  // Read, Write and WaitReadable calls in progress
	closing bool // Close was called: no new operations
	closed  bool // fd is closed
	idle    *sync.Cond
	efd     int // eventfd for Wake, made by the first WaitReadable or Wake; -1 until then

	rdl, wdl atomic.Int64 // deadlines, unix nanoseconds; 0 for none
}

// detached counts the open Conns, against MaxDetached.
var detached atomic.Int32

// Detach takes c's socket out of the network poller and returns it as a
// Conn; c is closed (the socket stays open). It reports false, leaving c
// as it was, when c is not a TCP connection or the descriptor cannot be
// duplicated.
func Detach(c net.Conn) (*Conn, bool) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil, false
	}
	if detached.Add(1) > MaxDetached() {
		detached.Add(-1)
		return nil, false
	}
	fd := -1
	if raw, err := tc.SyscallConn(); err == nil {
		raw.Control(func(s uintptr) {
			if d, err := unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0); err == nil {
				fd = d
			}
		})
	}
	if fd < 0 {
		detached.Add(-1)
		return nil, false
	}
	// O_NONBLOCK belongs to the socket, shared by c's descriptor and fd;
	// nothing reads c meanwhile. Closing c then removes its descriptor
	// from the poller, and the socket lives on in fd.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		detached.Add(-1)
		return nil, false
	}
	local, remote := tc.LocalAddr(), tc.RemoteAddr()
	tc.Close()
	dc := &Conn{fd: fd, local: local, remote: remote, efd: -1}
	dc.idle = sync.NewCond(&dc.mu)
	return dc, true
}

func (c *Conn) begin() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return false
	}
	c.ops++
	return true
}

func (c *Conn) end() {
	c.mu.Lock()
	c.ops--
	if c.ops == 0 && c.closing {
		c.idle.Broadcast()
	}
	c.mu.Unlock()
}

// Read reads as a net.Conn does; it honours a read deadline set before it
// starts.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if !c.begin() {
		return 0, opError("read", c, net.ErrClosed)
	}
	defer c.end()
	for {
		if dl := c.rdl.Load(); dl != 0 {
			if err := c.poll(unix.POLLIN, dl); err != nil {
				return 0, opError("read", c, err)
			}
		}
		// syscall.Read and Write, not recv and send: the race detector
		// knows them as the synchronisation I/O is.
		n, err := syscall.Read(c.fd, p)
		switch {
		case err == syscall.EINTR || err == syscall.EAGAIN:
			continue
		case err != nil:
			return 0, opError("read", c, os.NewSyscallError("read", err))
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// Write writes all of p as a net.Conn does. A write deadline that passed
// before it starts fails it; one that passes while it blocks (the peer
// reads nothing) does not interrupt it: Abort and Close do. Writing to a
// connection the peer closed fails with EPIPE (the runtime ignores SIGPIPE
// for descriptors other than 1 and 2).
func (c *Conn) Write(p []byte) (int, error) {
	if !c.begin() {
		return 0, opError("write", c, net.ErrClosed)
	}
	defer c.end()
	w := 0
	for w < len(p) {
		if dl := c.wdl.Load(); dl != 0 {
			if err := c.poll(unix.POLLOUT, dl); err != nil {
				return w, opError("write", c, err)
			}
		}
		n, err := syscall.Write(c.fd, p[w:])
		switch {
		case err == syscall.EINTR || err == syscall.EAGAIN:
			continue
		case err != nil:
			return w, opError("write", c, os.NewSyscallError("write", err))
		}
		w += max(n, 0)
	}
	return w, nil
}

// poll waits until fd is ready for events or the deadline dl passes.
func (c *Conn) poll(events int16, dl int64) error {
	for {
		left := time.Until(time.Unix(0, dl))
		if left <= 0 {
			return timeoutError
		}
		ms := int(left.Milliseconds()) + 1
		fds := []unix.PollFd{{Fd: int32(c.fd), Events: events}}
		n, err := unix.Poll(fds, ms)
		if err == unix.EINTR || n == 0 {
			continue
		}
		if err != nil {
			return os.NewSyscallError("poll", err)
		}
		return nil // ready, or an error or hang-up the next call reports
	}
}

// Abort shuts the connection down in both directions: a blocked Read
// returns io.EOF and a blocked Write fails. The descriptor stays open
// until Close.
func (c *Conn) Abort() {
	c.mu.Lock()
	if !c.closed {
		unix.Shutdown(c.fd, unix.SHUT_RDWR)
	}
	c.mu.Unlock()
}

// Close aborts the connection, waits for the calls in progress to return
// and releases the descriptor.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return opError("close", c, net.ErrClosed)
	}
	c.closing = true
	unix.Shutdown(c.fd, unix.SHUT_RDWR)
	if c.efd >= 0 {
		eventfdWrite(c.efd)
	}
	for c.ops > 0 {
		c.idle.Wait()
	}
	return c.release()
}

// release closes the descriptors; c.mu is held.
func (c *Conn) release() error {
	c.closing, c.closed = true, true
	detached.Add(-1)
	if c.efd >= 0 {
		unix.Close(c.efd)
	}
	return unix.Close(c.fd)
}

// WaitReadable blocks until the peer sends data or closes the connection,
// or Wake is called. It reports whether the peer is gone (end of stream
// or an error); with data waiting it returns false and nil. After a Wake
// it returns ErrWoken.
func (c *Conn) WaitReadable() (gone bool, err error) {
	if !c.begin() {
		return true, opError("read", c, net.ErrClosed)
	}
	defer c.end()
	c.mu.Lock()
	err = c.makeEventfd()
	efd := c.efd
	c.mu.Unlock()
	if err != nil {
		return false, err
	}
	for {
		fds := []unix.PollFd{{Fd: int32(c.fd), Events: unix.POLLIN | unix.POLLRDHUP}, {Fd: int32(efd), Events: unix.POLLIN}}
		_, err := unix.Poll(fds, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, os.NewSyscallError("poll", err)
		}
		if fds[1].Revents != 0 {
			var b [8]byte
			unix.Read(efd, b[:])
			return false, ErrWoken
		}
		var b [1]byte
		n, err := recvPeek(c.fd, b[:])
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		return n <= 0, nil
	}
}

// makeEventfd makes the eventfd of WaitReadable and Wake unless it
// exists; c.mu is held.
func (c *Conn) makeEventfd() error {
	if c.efd >= 0 {
		return nil
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return os.NewSyscallError("eventfd", err)
	}
	c.efd = efd
	return nil
}

// Wake interrupts a WaitReadable in progress, or the next one to start
// before Unwake consumes the wake-up (a Wake may come before the waiter
// has even begun).
func (c *Conn) Wake() {
	c.mu.Lock()
	if !c.closed && c.makeEventfd() == nil {
		eventfdWrite(c.efd)
	}
	c.mu.Unlock()
}

// Unwake consumes a Wake that no WaitReadable took, so that the next one
// waits.
func (c *Conn) Unwake() {
	c.mu.Lock()
	if c.efd >= 0 && !c.closed {
		var b [8]byte
		unix.Read(c.efd, b[:])
	}
	c.mu.Unlock()
}

func eventfdWrite(efd int) {
	one := [8]byte{1}
	unix.Write(efd, one[:])
}

func recvPeek(fd int, b []byte) (int, error) {
	n, _, err := unix.Recvfrom(fd, b, unix.MSG_PEEK|unix.MSG_DONTWAIT)
	return n, err
}

// Alive reports whether an idle connection can carry another request:
// nothing is waiting to be read and the peer has not closed it.
func (c *Conn) Alive() bool {
	if !c.begin() {
		return false
	}
	defer c.end()
	var b [1]byte
	_, err := recvPeek(c.fd, b[:])
	return err == unix.EAGAIN
}

// Attach hands the socket back to the network poller as a net.Conn and
// closes c. No other call may be in progress on c.
func (c *Conn) Attach() (net.Conn, error) {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return nil, opError("attach", c, net.ErrClosed)
	}
	c.mu.Unlock()
	// net.FileConn duplicates the descriptor and registers the copy with
	// the poller; the socket must be non-blocking for that.
	if err := unix.SetNonblock(c.fd, true); err != nil {
		return nil, os.NewSyscallError("fcntl", err)
	}
	dup, err := unix.FcntlInt(uintptr(c.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("fcntl", err)
	}
	f := os.NewFile(uintptr(dup), "tcp")
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.release()
	c.mu.Unlock()
	return nc, nil
}

func (c *Conn) LocalAddr() net.Addr  { return c.local }
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// SetDeadline sets both deadlines; see SetReadDeadline.
func (c *Conn) SetDeadline(t time.Time) error {
	c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

// SetReadDeadline sets the deadline of reads that start after it; unlike
// on a net.Conn it does not affect a Read already blocked (Abort and Close
// do).
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.rdl.Store(deadline(t))
	return nil
}

// SetWriteDeadline sets the deadline of writes that start after it (see
// Write).
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.wdl.Store(deadline(t))
	return nil
}

func deadline(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	if n := t.UnixNano(); n > 0 {
		return n
	}
	return 1 // long ago
}
