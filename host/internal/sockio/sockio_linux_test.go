package sockio

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

func TestMain(m *testing.M) {
	os.Exit(testutil.RunWithLeakCheck(m))
}

// pair returns a detached client connection and the server's end of it
// (still on the poller).
func pair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer := <-accepted
	if peer == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { peer.Close() })
	dc, ok := Detach(c)
	if !ok {
		t.Fatal("Detach refused a TCP connection")
	}
	t.Cleanup(func() { dc.Close() })
	return dc, peer
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestReadWriteAndRelease(t *testing.T) {
	before := openFDs(t)
	dc, peer := pair(t)
	if dc.LocalAddr().String() != peer.RemoteAddr().String() || dc.RemoteAddr().String() != peer.LocalAddr().String() {
		t.Errorf("addresses %v→%v, peer sees %v→%v", dc.LocalAddr(), dc.RemoteAddr(), peer.RemoteAddr(), peer.LocalAddr())
	}
	if _, err := dc.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(peer, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("peer read %q, %v", buf, err)
	}
	if _, err := peer.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(dc, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("read %q, %v", buf, err)
	}
	peer.Close()
	if n, err := dc.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("after the peer closed: %d, %v; want 0, EOF", n, err)
	}
	if _, err := dc.Write(make([]byte, 1<<20)); err == nil {
		// The first write may be accepted by the kernel; the next fails.
		if _, err := dc.Write([]byte("x")); err == nil {
			t.Error("writes to a closed peer kept succeeding")
		}
	}
	if err := dc.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := dc.Read(buf); !errors.Is(err, net.ErrClosed) {
		t.Errorf("read after Close: %v, want net.ErrClosed", err)
	}
	if err := dc.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Close: %v, want net.ErrClosed", err)
	}
	if after := openFDs(t); after > before {
		t.Errorf("%d descriptors open after, %d before", after, before)
	}
	if n := detached.Load(); n != 0 {
		t.Errorf("%d connections still counted as detached", n)
	}
}

// blockedRead starts a Read on dc and returns its result channel once the
// read is (very likely) blocked in the kernel.
func blockedRead(dc *Conn) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := dc.Read(make([]byte, 8))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	return done
}

func TestAbortAndCloseEndABlockedRead(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(*Conn)
		want error
	}{
		{"abort", (*Conn).Abort, io.EOF},
		{"close", func(dc *Conn) { dc.Close() }, io.EOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dc, _ := pair(t)
			done := blockedRead(dc)
			select {
			case err := <-done:
				t.Fatalf("read returned before %s: %v", tc.name, err)
			default:
			}
			tc.end(dc)
			select {
			case err := <-done:
				if err != tc.want {
					t.Errorf("read after %s: %v, want %v", tc.name, err, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("read still blocked after %s", tc.name)
			}
		})
	}
}

func TestReadDeadline(t *testing.T) {
	dc, peer := pair(t)
	dc.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	_, err := dc.Read(make([]byte, 8))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v, want a timeout", err)
	}
	dc.SetReadDeadline(time.Unix(1, 0))
	if _, err := dc.Read(make([]byte, 8)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read with a deadline long past: %v", err)
	}
	// Data waiting beats a deadline that has not passed; a cleared
	// deadline blocks no more.
	peer.Write([]byte("hi"))
	dc.SetReadDeadline(time.Now().Add(time.Minute))
	buf := make([]byte, 8)
	if n, err := dc.Read(buf); err != nil || string(buf[:n]) != "hi" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	dc.SetReadDeadline(time.Time{})
	peer.Write([]byte("yo"))
	if n, err := dc.Read(buf); err != nil || string(buf[:n]) != "yo" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	dc.SetWriteDeadline(time.Unix(1, 0))
	if _, err := dc.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write with a deadline long past: %v", err)
	}
}

func TestWaitReadable(t *testing.T) {
	dc, peer := pair(t)
	wait := func() (chan bool, chan error) {
		g, e := make(chan bool, 1), make(chan error, 1)
		go func() {
			gone, err := dc.WaitReadable()
			g <- gone
			e <- err
		}()
		return g, e
	}

	// A Wake before the connection's first wait is kept for that wait:
	// the front may end a watch before its goroutine has begun it.
	dc.Wake()
	g, e := wait()
	if gone, err := <-g, <-e; gone || !errors.Is(err, ErrWoken) {
		t.Fatalf("Wake before the first wait: gone %v, %v", gone, err)
	}

	// Wake interrupts it.
	g, e = wait()
	time.Sleep(20 * time.Millisecond)
	dc.Wake()
	if gone, err := <-g, <-e; gone || !errors.Is(err, ErrWoken) {
		t.Fatalf("after Wake: gone %v, %v", gone, err)
	}
	// A Wake nobody took is dropped by Unwake, so the next wait waits.
	dc.Wake()
	dc.Unwake()
	g, e = wait()
	time.Sleep(20 * time.Millisecond)
	select {
	case <-g:
		t.Fatal("WaitReadable returned with no data and no wake")
	default:
	}
	// Data: not gone, and the data is still there to read.
	peer.Write([]byte("more"))
	if gone, err := <-g, <-e; gone || err != nil {
		t.Fatalf("with data: gone %v, %v", gone, err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(dc, buf); err != nil || string(buf) != "more" {
		t.Fatalf("read %q, %v", buf, err)
	}
	// The peer closing: gone.
	g, e = wait()
	peer.Close()
	if gone, err := <-g, <-e; !gone || err != nil {
		t.Fatalf("after the peer closed: gone %v, %v", gone, err)
	}
}

func TestAlive(t *testing.T) {
	dc, peer := pair(t)
	if !dc.Alive() {
		t.Fatal("an idle connection is not alive")
	}
	peer.Write([]byte("x"))
	testutil.Eventually(t, 5*time.Second, "unread data makes it not alive", func() bool { return !dc.Alive() })
	dc.Read(make([]byte, 1))
	if !dc.Alive() {
		t.Fatal("alive again once the data was read")
	}
	peer.Close()
	testutil.Eventually(t, 5*time.Second, "a closed peer makes it not alive", func() bool { return !dc.Alive() })
}

func TestAttach(t *testing.T) {
	before := openFDs(t)
	dc, peer := pair(t)
	nc, err := dc.Attach()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if n := detached.Load(); n != 0 {
		t.Errorf("%d connections counted as detached after Attach", n)
	}
	// A poller connection again: deadlines interrupt a blocked read.
	done := make(chan error, 1)
	go func() {
		_, err := nc.Read(make([]byte, 8))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	nc.SetReadDeadline(time.Unix(1, 0))
	if err := <-done; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read on the attached connection: %v", err)
	}
	nc.SetReadDeadline(time.Time{})
	peer.Write([]byte("ok"))
	buf := make([]byte, 2)
	if _, err := io.ReadFull(nc, buf); err != nil || string(buf) != "ok" {
		t.Fatalf("read %q, %v", buf, err)
	}
	if _, err := dc.Read(buf); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the detached Conn still reads after Attach: %v", err)
	}
	nc.Close()
	peer.Close()
	if after := openFDs(t); after > before {
		t.Errorf("%d descriptors open after, %d before", after, before)
	}
}

func TestDetachIsBounded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	var conns []*Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range MaxDetached() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		dc, ok := Detach(c)
		if !ok {
			t.Fatalf("Detach refused connection %d of %d", len(conns)+1, MaxDetached())
		}
		conns = append(conns, dc)
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := Detach(c); ok {
		t.Fatalf("Detach took connection %d, over MaxDetached", MaxDetached()+1)
	}
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatalf("a refused connection is no longer usable: %v", err)
	}
	conns[0].Close()
	conns = conns[1:]
	if dc, ok := Detach(c); !ok {
		t.Fatal("Detach refused after one was closed")
	} else {
		conns = append(conns, dc)
	}
	if _, ok := Detach(&net.UnixConn{}); ok {
		t.Fatal("Detach took a non-TCP connection")
	}
}
