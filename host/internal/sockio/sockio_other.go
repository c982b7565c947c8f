//go:build !linux

package sockio

import (
	"net"
	"time"
)

// Conn is a detached TCP connection; on this system Detach never makes
// one.
type Conn struct {
	local, remote net.Addr
}

// Detach reports false: connections stay with the network poller here.
func Detach(c net.Conn) (*Conn, bool) { return nil, false }

func (c *Conn) Read(p []byte) (int, error)         { return 0, net.ErrClosed }
func (c *Conn) Write(p []byte) (int, error)        { return 0, net.ErrClosed }
func (c *Conn) Close() error                       { return nil }
func (c *Conn) Abort()                             {}
func (c *Conn) WaitReadable() (bool, error)        { return true, net.ErrClosed }
func (c *Conn) Wake()                              {}
func (c *Conn) Unwake()                            {}
func (c *Conn) Alive() bool                        { return false }
func (c *Conn) Attach() (net.Conn, error)          { return nil, net.ErrClosed }
func (c *Conn) LocalAddr() net.Addr                { return c.local }
func (c *Conn) RemoteAddr() net.Addr               { return c.remote }
func (c *Conn) SetDeadline(t time.Time) error      { return nil }
func (c *Conn) SetReadDeadline(t time.Time) error  { return nil }
func (c *Conn) SetWriteDeadline(t time.Time) error { return nil }
