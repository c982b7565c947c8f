package hardening_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// countingUDP is a loopback UDP listener that counts the datagrams that
// reached it: a refusal the probe reports is real only if none did.
type countingUDP struct {
	net.PacketConn
	received atomic.Int64
}

func listenUDP(t *testing.T) *countingUDP {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &countingUDP{PacketConn: pc}
	t.Cleanup(func() { pc.Close() })
	go func() {
		b := make([]byte, 64)
		for {
			if _, _, err := pc.ReadFrom(b); err != nil {
				return
			}
			l.received.Add(1)
		}
	}()
	return l
}

// countingUnix is a Unix socket listener anyone may connect to, standing
// for mcpvisor's control socket or an ssh-agent.
type countingUnix struct {
	path     string
	accepted atomic.Int64
}

func listenUnix(t *testing.T, dir string) *countingUnix {
	t.Helper()
	l := &countingUnix{path: filepath.Join(dir, "agent.sock")}
	ln, err := net.Listen("unix", l.path)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(l.path, 0o777)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.accepted.Add(1)
			c.Close()
		}
	}()
	return l
}

// openDir is a temporary directory that nobody may use too.
func openDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestSeccompEscapes: the hostile example server, run by the real binary
// as root and as nobody, tries the escapes of issue #32 — a Unix socket
// outside its sandbox, a device node in its write folder, a BPF map, the
// host name, UDP past connect, a user namespace, its capabilities. The
// same probes in an unsandboxed server are the controls: where one
// escapes there, the sandbox's refusal is the sandbox's doing. The
// listeners count what reached them.
func TestSeccompEscapes(t *testing.T) {
	for _, as := range []string{"root", "nobody"} {
		t.Run(as, func(t *testing.T) {
			if os.Geteuid() != 0 {
				t.Skip("the test needs root (and runs the binary as nobody from there)")
			}
			testSeccompEscapes(t, as)
		})
	}
}

func testSeccompEscapes(t *testing.T, as string) {
	dir := openDir(t)
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o777); err != nil || os.Chmod(work, 0o777) != nil {
		t.Fatal(err)
	}
	agent := listenUnix(t, dir)
	udp := listenUDP(t)
	tcp := listenCounting(t)
	hostile := hclString(bins["hostile"])
	servers := fmt.Sprintf(`server "free" {
  command = %[1]s
}
server "boxed" {
  command = %[1]s
  sandbox {
    write   = [%[2]s]
    connect = [%[3]d]
  }
}
server "dns" {
  command = %[1]s
  sandbox {
    connect = [%[3]d]
    udp     = true
  }
}
server "agent" {
  command = %[1]s
  sandbox {
    connect_unix = [%[4]s]
  }
}
`, hostile, hclString(work), tcp.port(), hclString(agent.path))
	var mv *mcpvisor
	if as == "root" {
		mv = startMcpvisor(t, servers)
	} else {
		mv, _ = startMcpvisorAsUser(t, "", servers)
	}
	cs := connectClient(t, mv)
	for _, s := range []string{"free", "boxed", "dns", "agent"} {
		waitTool(t, cs, s+"__probe")
	}
	call := func(server, name, arg string) string { return probe(t, cs, server+"__probe", name, arg) }
	escaped := func(server, name, arg string) {
		t.Helper()
		if got := call(server, name, arg); !strings.HasPrefix(got, "escaped: ") {
			t.Errorf("%s %s %s: want it to work (a control); got %s", server, name, arg, got)
		}
	}
	// refused wants the probe refused with one of wants in the error.
	refused := func(server, name, arg string, wants ...string) {
		t.Helper()
		got := call(server, name, arg)
		if strings.HasPrefix(got, "refused: ") && slices.ContainsFunc(wants, func(w string) bool { return strings.Contains(got, w) }) {
			return
		}
		t.Errorf("%s %s %s: want refused with %q; got %s", server, name, arg, strings.Join(wants, `" or "`), got)
	}

	// A Unix socket outside: reached unsandboxed and with connect_unix,
	// refused at socket() otherwise.
	escaped("free", "unix-connect", agent.path)
	testutil.Eventually(t, 10*time.Second, "the control's connection", func() bool { return agent.accepted.Load() >= 1 })
	refused("boxed", "unix-connect", agent.path, "socket: permission denied")
	escaped("agent", "unix-connect", agent.path)
	escaped("boxed", "socketpair", "")
	testutil.Eventually(t, 10*time.Second, "the connect_unix connection", func() bool { return agent.accepted.Load() >= 2 })

	// UDP under connect: refused, unless udp = true; TCP to the port works.
	escaped("free", "udp-send", udp.LocalAddr().String())
	refused("boxed", "udp-send", udp.LocalAddr().String(), "socket: permission denied")
	escaped("dns", "udp-send", udp.LocalAddr().String())
	testutil.Eventually(t, 10*time.Second, "the 2 allowed datagrams", func() bool { return udp.received.Load() >= 2 })

	// A user namespace, in which it would hold every capability.
	escaped("free", "unshare-user", "")
	refused("boxed", "unshare-user", "", "operation not permitted")

	// Capabilities: none in any set, as root too.
	if as == "root" {
		escaped("free", "capabilities", "")
	}
	none := "no capability: CapInh:0000000000000000 CapPrm:0000000000000000 CapEff:0000000000000000 CapBnd:"
	refused("boxed", "capabilities", "", none)
	if as == "root" {
		// Root empties the bounding set too.
		refused("boxed", "capabilities", "", none+"0000000000000000 CapAmb:0000000000000000")
	}

	// What only root could do unsandboxed: the controls exist as root.
	if as == "root" {
		escaped("free", "mknod", work)
		escaped("free", "bpf", "")
		escaped("free", "sethostname", "")
	}
	refused("boxed", "mknod", work, "mknod: ")
	refused("boxed", "bpf", "", "operation not permitted")
	refused("boxed", "sethostname", "", "operation not permitted")
	if _, err := os.Lstat(filepath.Join(work, "kmsg")); err == nil {
		t.Error("a device node was left in the write folder")
	}
	// Another process's environment (mcpvisor's own, with its secrets):
	// readable unsandboxed by the same user, refused in the sandbox. The
	// server's pid namespace has no such pid (ENOENT, docs/sandbox.md
	// "What the server sees"); without the view, Landlock's ptrace
	// scoping refuses it (EACCES; ptrace itself is filtered).
	environ := fmt.Sprintf("/proc/%d/environ", mv.pid)
	escaped("free", "read-file", environ)
	refused("boxed", "read-file", environ, "no such file or directory", "permission denied")

	// The write folder is still writable: the sandbox refused the device,
	// not the folder.
	escaped("boxed", "write-file", filepath.Join(work, "ok"))

	if n := udp.received.Load(); n != 2 {
		t.Errorf("the UDP listener got %d datagrams, want the 2 allowed ones", n)
	}
	if n := agent.accepted.Load(); n != 2 {
		t.Errorf("the Unix socket accepted %d connections, want the 2 allowed ones", n)
	}
}

// TestSandboxUser: as root, user = "nobody" runs the server as nobody:
// what it writes is nobody's, it holds no capability, and a folder only
// root may write is closed to it.
func TestSandboxUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching users needs root")
	}
	if err := os.Chmod(filepath.Dir(bins["hostile"]), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := openDir(t)
	open, closed := filepath.Join(dir, "open"), filepath.Join(dir, "closed")
	os.Mkdir(open, 0o777)
	os.Mkdir(closed, 0o755)
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	mv := startMcpvisor(t, fmt.Sprintf(`server "hostile" {
  command = %s
  sandbox {
    write = [%s, %s]
    user  = "nobody"
  }
}
`, hclString(bins["hostile"]), hclString(open), hclString(closed)))
	cs := connectClient(t, mv)
	waitTool(t, cs, "hostile__probe")
	file := filepath.Join(open, "out")
	if got := probe(t, cs, "hostile__probe", "write-file", file); !strings.HasPrefix(got, "escaped: wrote") {
		t.Fatalf("write-file in an open folder: %s", got)
	}
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != nobodyUID || st.Gid != nobodyGID {
		t.Errorf("the file is owned by %d:%d, want nobody's %d:%d", st.Uid, st.Gid, nobodyUID, nobodyGID)
	}
	if got := probe(t, cs, "hostile__probe", "write-file", filepath.Join(closed, "out")); !strings.Contains(got, "refused: ") || !strings.Contains(got, "permission denied") {
		t.Errorf("write-file in root's folder as nobody: %s", got)
	}
	if got := probe(t, cs, "hostile__probe", "capabilities", ""); !strings.HasPrefix(got, "refused: no capability") {
		t.Errorf("capabilities as nobody: %s", got)
	}
}
