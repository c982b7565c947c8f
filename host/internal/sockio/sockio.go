// Package sockio runs a TCP connection outside Go's network poller: its
// reads and writes are blocking system calls on the calling goroutine's
// thread, and the kernel wakes that thread itself when data arrives.
//
// A proxy that answers one request at a time on a connection pays, with
// the poller, for a wake-up of the poller's thread and a hand-over of the
// goroutine to another thread on every message in and out; on a small or
// virtualised machine those dominate a loopback round trip. A detached
// connection costs one thread while a call blocks on it, so mcpvisor
// detaches only a bounded number of connections (see the callers).
//
// Detach is available on Linux; elsewhere it reports false and callers
// keep the net.Conn.
package sockio

import (
	"errors"
	"net"
	"os"
	"runtime"
)

// MaxDetached bounds the connections detached at once: four per
// processor (GOMAXPROCS). Detach refuses more. The bound is what keeps
// detaching a win: with a few busy connections a thread each is the
// cheapest way to wait, but with many the poller, which hands any number
// of ready sockets to a few threads, gives more calls per second (at 32
// concurrent calls on 2 cores, all detached lost about 10 points of
// throughput).
func MaxDetached() int32 { return int32(4 * runtime.GOMAXPROCS(0)) }

// ErrWoken is returned by WaitReadable when Wake interrupted it.
var ErrWoken = errors.New("sockio: wait interrupted")

func opError(op string, c *Conn, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.local, Addr: c.remote, Err: err}
}

// timeoutError is what a read or write past its deadline returns, as on a
// net.Conn.
var timeoutError = os.ErrDeadlineExceeded
