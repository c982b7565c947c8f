package proctree_test

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/internal/proctree"
)

// A child of a host is a server's process; the host itself, and a
// process outside its tree, are not.
func TestServer(t *testing.T) {
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	self := os.Getpid()
	if why, err := proctree.Server(child.Process.Pid, []int{self}); err != nil || !strings.Contains(why, "descends from the mcpvisor host") {
		t.Errorf("a child of the host: %q, %v; want it found", why, err)
	}
	if why, err := proctree.Server(self, []int{self}); err != nil || why != "" {
		t.Errorf("the host itself: %q, %v; want none", why, err)
	}
	if why, err := proctree.Server(child.Process.Pid, []int{os.Getppid() + 1<<22}); err != nil || why != "" {
		t.Errorf("a child of no host: %q, %v; want none", why, err)
	}
	if _, err := proctree.Server(1<<22+7, []int{self}); err == nil {
		t.Error("a pid that does not exist: no error")
	}
}

// The far end of a loopback connection is found in the kernel's tables,
// and its holder judged.
func TestTCPPeer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	child := exec.Command("bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/"+strconv.Itoa(port)+"; sleep 60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(30 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	remote := netip.MustParseAddrPort(c.RemoteAddr().String())
	local := netip.MustParseAddrPort(c.LocalAddr().String())
	if why, err := proctree.TCPPeer(remote, local, []int{os.Getpid()}); err != nil || !strings.Contains(why, "holds the connection") {
		t.Errorf("a connection from the host's child: %q, %v; want it found", why, err)
	}
	// From the host itself: not a server's.
	mine, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	c2, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	remote = netip.MustParseAddrPort(c2.RemoteAddr().String())
	if why, err := proctree.TCPPeer(remote, local, []int{os.Getpid()}); err != nil || why != "" {
		t.Errorf("a connection from the host itself: %q, %v; want none", why, err)
	}
}
