package testutil

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// HAProxyExample is the example HAProxy configuration the scale-out tests
// and benchmarks run, relative to the repository root.
const HAProxyExample = "examples/deploy/haproxy/haproxy.cfg"

// HAProxy finds the haproxy binary (Debian installs it in /usr/sbin, which
// a non-root PATH may lack). Without it, a test fails when MCPVISOR_E2E is
// set (`make test`, whose system-tools step installs it) and skips
// otherwise, saying what to install.
func HAProxy(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("haproxy"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/haproxy"); err == nil {
		return "/usr/sbin/haproxy"
	}
	msg := "haproxy is not installed: run `make system-tools` as root, or apt-get install haproxy"
	if os.Getenv("MCPVISOR_E2E") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// RenderHAProxy rewrites the example configuration for a test: the line
// after "# test: bind" binds bind, the one after "# test: default-server"
// checks every check period (two failures take a replica out, one success
// brings it back), and the lines after "# test: servers" become one server
// line per address. It fails when a marker is missing, so the example
// cannot drift away from what the tests run.
func RenderHAProxy(example, bind string, servers []string, check time.Duration) (string, error) {
	lines := strings.Split(strings.TrimRight(example, "\n"), "\n")
	var out []string
	seen := map[string]bool{}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		marker, ok := strings.CutPrefix(strings.TrimSpace(l), "# test: ")
		if !ok {
			out = append(out, l)
			continue
		}
		seen[marker] = true
		switch marker {
		case "bind":
			out = append(out, "    bind "+bind)
			i++
		case "default-server":
			ms := check.Milliseconds()
			out = append(out, fmt.Sprintf("    default-server check inter %dms fastinter %dms downinter %dms fall 2 rise 1", ms, ms, ms))
			i++
		case "servers":
			for n, addr := range servers {
				out = append(out, fmt.Sprintf("    server mcpvisor-%d %s", n+1, addr))
			}
			for i+1 < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i+1]), "server ") {
				i++
			}
		default:
			return "", fmt.Errorf("%s: unknown test marker %q", HAProxyExample, marker)
		}
	}
	for _, m := range []string{"bind", "default-server", "servers"} {
		if !seen[m] {
			return "", fmt.Errorf("%s: the line \"# test: %s\" is missing; the tests rewrite the line after it", HAProxyExample, m)
		}
	}
	return strings.Join(out, "\n") + "\n", nil
}

// StartHAProxy runs haproxy in the foreground on the example configuration
// rendered for servers, and returns the frontend's base URL once it
// accepts connections, and its log. It is killed when the test ends.
func StartHAProxy(t testing.TB, servers []string, check time.Duration) (base string, log *Buffer) {
	t.Helper()
	bin := HAProxy(t)
	example, err := os.ReadFile(filepath.Join(RepoRoot(), HAProxyExample))
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bind := l.Addr().String()
	l.Close()
	cfg, err := RenderHAProxy(string(example), bind, servers, check)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	log = &Buffer{}
	cmd := exec.Command(bin, "-db", "-f", path)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = groupAttr()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		killGroup(cmd.Process.Pid)
		<-exited
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", bind, time.Second)
		if err == nil {
			c.Close()
			return "http://" + bind, log
		}
		select {
		case <-exited:
			t.Fatalf("haproxy exited at startup:\n%s", log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("haproxy not accepting on %s within 30s:\n%s", bind, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
