package hardening_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// The view (docs/sandbox.md "What the server sees", docs/design.md §18.1):
// the hostile example server, sandboxed, run by the real binary as root
// and as nobody, tries to read other processes' environments and command
// lines (mcpvisor's, an unsandboxed sibling's with a secret in its env),
// to list /proc, to connect to a Unix socket outside its grants (an
// ssh-agent's, mcpvisor's control socket), to read /etc/shadow and the
// configuration file. Every one is refused; the same probes from an
// unsandboxed twin escape (the controls: each probe can succeed), and the
// sandboxed one still reads its read folder and writes its write folder.
// A third server grants the whole temporary directory (and, as nobody,
// its home): mcpvisor's runtime directory, where its control socket is,
// is hidden from it all the same.
func TestViewEscapes(t *testing.T) {
	for _, who := range []string{"root", "nobody"} {
		t.Run(who, func(t *testing.T) {
			if os.Geteuid() != 0 {
				t.Skip("the test runs as root and as nobody: it needs root")
			}
			testViewEscapes(t, who == "nobody")
		})
	}
}

func testViewEscapes(t *testing.T, asNobody bool) {
	read, write, agentDir := t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(read, "f"), []byte("readable"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Dir(read), read, agentDir} {
		os.Chmod(d, 0o755)
	}
	// The write folder is the server's user's (0700): as nobody, nobody's;
	// as root, root's. A sandboxed server holds no capability, so root's
	// server cannot write a folder of nobody's (docs/sandbox.md
	// "Capabilities and the server's user").
	ownWriteFolder(t, write, asNobody)
	agent := listenUnixCounting(t, filepath.Join(agentDir, "agent.sock"))

	const secret = "sibling-secret-4f1c2a"
	hostile := hclString(bins["hostile"])
	servers := func(wide string) string {
		return `server "free" {
  command = ` + hostile + `
  env     = { SIBLING_TOKEN = "` + secret + `" }
}
server "boxed" {
  command = ` + hostile + `
  sandbox {
    read  = [` + hclString(read) + `]
    write = [` + hclString(write) + `]
  }
}
server "wide" {
  command = ` + hostile + `
  sandbox {
    write = [` + wide + `]
  }
}
`
	}
	var mv *mcpvisor
	runtimeDir := os.Getenv("XDG_RUNTIME_DIR")
	if asNobody {
		// As nobody: its runtime directory is $HOME/run
		// (startMcpvisorAsUser), in the temporary directory too.
		var home string
		mv, home = startMcpvisorAsUser(t, "", servers(hclString(os.TempDir())))
		runtimeDir = filepath.Join(home, "run")
	} else {
		mv = startMcpvisor(t, servers(hclString(os.TempDir())))
	}
	cs := connectClient(t, mv)
	for _, s := range []string{"free", "boxed", "wide"} {
		waitTool(t, cs, s+"__probe")
	}
	var sock string
	testutil.Eventually(t, 10*time.Second, "mcpvisor's control socket", func() bool {
		sock = controlSocket(runtimeDir, mv.pid)
		return sock != ""
	})
	st := mv.status(t)
	free := strconv.Itoa(st["free"].Pid)
	self := strconv.Itoa(mv.pid)

	// The controls: unsandboxed, every probe escapes.
	for _, p := range [][2]string{
		{"read-environ", free},
		{"read-environ", self},
		{"read-cmdline", self},
		{"list-procs", ""},
		{"connect-unix", agent.path},
		{"connect-unix", sock},
		{"read-file", mv.config},
	} {
		if got := probe(t, cs, "free__probe", p[0], p[1]); !strings.HasPrefix(got, "escaped: ") {
			t.Errorf("control: unsandboxed probe %s %s: %s; want it to escape", p[0], p[1], got)
		}
	}
	if got := probe(t, cs, "free__probe", "read-environ", free); !strings.Contains(got, secret) {
		t.Errorf("control: the sibling's environment does not show its secret: %s", got)
	}
	agentSeen := agent.accepted.Load()

	// Sandboxed: refused.
	for _, p := range [][2]string{
		{"read-environ", free},
		{"read-cmdline", free},
		{"read-environ", self},
		{"read-cmdline", self},
		{"list-procs", ""},
		{"connect-unix", agent.path},
		{"connect-unix", sock},
		{"read-file", "/etc/shadow"},
		{"read-file", mv.config},
	} {
		if got := probe(t, cs, "boxed__probe", p[0], p[1]); !strings.HasPrefix(got, "refused: ") {
			t.Errorf("sandboxed probe %s %s: %s; want it refused", p[0], p[1], got)
		}
	}
	// Its parent is its init, whose environment and command line hold
	// nothing of mcpvisor's or a sibling's (and as nobody its environment
	// cannot even be read: the init is not dumpable).
	for _, p := range []string{"1", "ppid"} {
		for _, f := range []string{"read-environ", "read-cmdline"} {
			got := probe(t, cs, "boxed__probe", f, p)
			if strings.Contains(got, secret) || strings.Contains(got, mv.config) {
				t.Errorf("sandboxed probe %s %s shows mcpvisor's or a sibling's: %s", f, p, got)
			}
			if asNobody && f == "read-environ" && !strings.HasPrefix(got, "refused: ") {
				t.Errorf("sandboxed probe %s %s as nobody: %s; want it refused", f, p, got)
			}
		}
	}
	if n := agent.accepted.Load(); n != agentSeen {
		t.Errorf("the agent's socket accepted %d connections from the sandboxed server", n-agentSeen)
	}
	// Granted the whole temporary directory, it still does not find the
	// control socket.
	if got := probe(t, cs, "wide__probe", "connect-unix", sock); !strings.HasPrefix(got, "refused: ") {
		t.Errorf("a server granted %s connects to the control socket %s: %s", os.TempDir(), sock, got)
	}
	if got := probe(t, cs, "wide__probe", "list-procs", ""); !strings.HasPrefix(got, "refused: ") {
		t.Errorf("wide: list-procs: %s; want it refused", got)
	}

	// The positive controls: it still does its job.
	if got := probe(t, cs, "boxed__probe", "read-file", filepath.Join(read, "f")); !strings.Contains(got, "readable") {
		t.Errorf("read-file in its read folder: %s", got)
	}
	out := filepath.Join(write, "out")
	if got := probe(t, cs, "boxed__probe", "write-file", out); !strings.HasPrefix(got, "escaped: wrote") {
		t.Errorf("write-file in its write folder: %s", got)
	}
	if _, err := os.Stat(out); err != nil {
		t.Errorf("the file written in its write folder is not there on the host: %v", err)
	}
}

// ownWriteFolder gives dir to nobody for a host run as nobody; as root it
// stays root's.
func ownWriteFolder(t *testing.T, dir string, asNobody bool) {
	t.Helper()
	if !asNobody {
		return
	}
	if err := os.Chown(dir, nobodyUID, nobodyGID); err != nil {
		t.Fatal(err)
	}
}

// controlSocket is mcpvisor pid's control socket, found where
// host/cli/instances.go puts it; "" when there is none yet.
func controlSocket(runtimeDir string, pid int) string {
	dirs := []string{filepath.Join(os.TempDir(), fmt.Sprintf("mcpvisor-%d", os.Getuid()))}
	if runtimeDir != "" {
		dirs = append([]string{filepath.Join(runtimeDir, "mcpvisor")}, dirs...)
	}
	for _, d := range dirs {
		m, _ := filepath.Glob(filepath.Join(d, fmt.Sprintf("*-%d.sock", pid)))
		if len(m) > 0 {
			return m[0]
		}
	}
	return ""
}

// unixCounting is a Unix socket listener, connectable by anyone, that
// counts what it accepted: an ssh-agent, for the test.
type unixCounting struct {
	path     string
	accepted atomic.Int64
}

func listenUnixCounting(t *testing.T, path string) *unixCounting {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o777)
	u := &unixCounting{path: path}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.accepted.Add(1)
			c.Close()
		}
	}()
	return u
}

// TestViewDaemonDies: a daemon that a sandboxed server starts the
// classic way (setsid and a second fork, ignoring SIGTERM and SIGHUP)
// does not outlive the server, whichever way the server ends: a restart,
// a crash, an idle stop, max_lifetime, a SIGTERM and a SIGKILL of
// mcpvisor (docs/sandbox.md "What the server sees"). As root and as nobody (no cgroup then: the pid namespace alone
// does it).
func TestViewDaemonDies(t *testing.T) {
	for _, who := range []string{"root", "nobody"} {
		t.Run(who, func(t *testing.T) {
			if os.Geteuid() != 0 {
				t.Skip("the test runs as root and as nobody: it needs root")
			}
			testViewDaemonDies(t, who == "nobody")
		})
	}
}

func testViewDaemonDies(t *testing.T, asNobody bool) {
	write := t.TempDir()
	os.Chmod(filepath.Dir(write), 0o755)
	ownWriteFolder(t, write, asNobody)
	hostile := hclString(bins["hostile"])
	servers := `server "boxed" {
  command = ` + hostile + `
  sandbox {
    write = [` + hclString(write) + `]
  }
}
server "aged" {
  command      = ` + hostile + `
  max_lifetime = "3s"
  sandbox {
    write = [` + hclString(write) + `]
  }
}
server "idler" {
  command      = ` + hostile + `
  idle_timeout = "1s"
  sandbox {
    write = [` + hclString(write) + `]
  }
}
`
	// The CLI runs as the host's user, in its environment, so it finds
	// the host's control socket and operator credential.
	var cliCred *syscall.Credential
	var cliEnv []string
	start := func() (*mcpvisor, *mcp.ClientSession) {
		var mv *mcpvisor
		if asNobody {
			var home string
			mv, home = startMcpvisorAsUser(t, "", servers)
			cliCred = &syscall.Credential{Uid: nobodyUID, Gid: nobodyGID}
			cliEnv = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "XDG_RUNTIME_DIR=" + filepath.Join(home, "run")}
		} else {
			mv = startMcpvisor(t, servers)
		}
		cs := connectClient(t, mv)
		for _, s := range []string{"boxed", "aged", "idler"} {
			waitTool(t, cs, s+"__probe")
		}
		return mv, cs
	}
	mv, cs := start()

	daemon := func(server, name string) int {
		t.Helper()
		pidfile := filepath.Join(write, name)
		if got := probe(t, cs, server+"__probe", "daemon", pidfile); !strings.HasPrefix(got, "escaped: daemon running") {
			t.Fatalf("%s: starting a daemon: %s", server, got)
		}
		pid := findByCmdline(pidfile)
		if pid == 0 {
			t.Fatalf("%s: no process on the host has %s on its command line", server, pidfile)
		}
		return pid
	}
	gone := func(pid int, after string) {
		t.Helper()
		testutil.Eventually(t, 15*time.Second, "the daemon (pid "+strconv.Itoa(pid)+") gone after "+after, func() bool { return !testutil.Alive(pid) })
	}

	// A restart.
	pid := daemon("boxed", "restart.pid")
	if code, stdout, stderr := runCLIAs(t, cliCred, cliEnv, "restart", "-config", mv.config, "boxed"); code != 0 {
		t.Fatalf("mcpvisor restart boxed: exit %d\n%s\n%s", code, stdout, stderr)
	}
	gone(pid, "a restart")
	waitTool(t, cs, "boxed__probe")

	// A crash.
	pid = daemon("boxed", "crash.pid")
	if got := probe(t, cs, "boxed__probe", "exit", "3"); !strings.HasPrefix(got, "escaped: exiting") {
		t.Fatalf("exit: %s", got)
	}
	gone(pid, "a crash")
	waitTool(t, cs, "boxed__probe")

	// max_lifetime.
	pid = daemon("aged", "aged.pid")
	gone(pid, "max_lifetime")

	// An idle stop.
	pid = daemon("idler", "idle.pid")
	gone(pid, "an idle stop")
	testutil.Eventually(t, 15*time.Second, "idler idle", func() bool { return mv.status(t)["idler"].State == "idle" })

	// A SIGTERM of mcpvisor.
	pid = daemon("boxed", "term.pid")
	if err := syscall.Kill(mv.pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-mv.done
	gone(pid, "a SIGTERM of mcpvisor")

	// A SIGKILL of mcpvisor.
	mv, cs = start()
	pid = daemon("boxed", "kill.pid")
	if err := syscall.Kill(mv.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-mv.done
	gone(pid, "a SIGKILL of mcpvisor")
}

// findByCmdline is the pid of a live process whose command line holds s,
// 0 for none.
func findByCmdline(s string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), s) && testutil.Alive(pid) {
			return pid
		}
	}
	return 0
}
