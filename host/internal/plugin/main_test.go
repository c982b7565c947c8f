package plugin_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/mcpvisor/mcpvisor/shared"
)

// binDir holds the binaries TestMain builds: the first-party plugins, the
// example plugin and the test peer.
var binDir string

// testModeEnv makes the test binary act as a misbehaving plugin.
const testModeEnv = "MCPVISOR_PLUGIN_TEST_MODE"

// floodLines is how many stderr lines the "flood" plugin writes before its
// last words.
const floodLines = 5000

func TestMain(m *testing.M) {
	if mode := os.Getenv(testModeEnv); mode != "" {
		badPlugin(mode)
		return
	}
	dir, err := os.MkdirTemp("", "mcpvisor-plugin-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	builds := map[string]string{
		"mcpvisor-transport-unix":      "../../../plugins/unix",
		"mcpvisor-transport-websocket": "../../../plugins/websocket",
		"mcpvisor-transport-tcp":       "../../../examples/plugin",
		"testpeer":                     "../../../plugins/internal/testpeer",
	}
	for name, pkg := range builds {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n", pkg, err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// badPlugin is the test binary re-executed as a plugin that fails in the
// way mode names.
func badPlugin(mode string) {
	switch mode {
	case "crash":
		fmt.Fprintln(os.Stderr, "fatal: cannot read /etc/plugin.conf")
		os.Exit(2)
	case "cookie":
		goplugin.Serve(&goplugin.ServeConfig{
			HandshakeConfig: goplugin.HandshakeConfig{ProtocolVersion: 1, MagicCookieKey: "SOME_OTHER_HOST_PLUGIN", MagicCookieValue: "x"},
			Plugins:         map[string]goplugin.Plugin{shared.PluginName: &shared.TransportPlugin{Impl: &dieOnConfigure{}}},
			GRPCServer:      goplugin.DefaultGRPCServer,
		})
	case "version":
		hs := shared.Handshake
		hs.ProtocolVersion = 2
		goplugin.Serve(&goplugin.ServeConfig{
			HandshakeConfig: hs,
			Plugins:         map[string]goplugin.Plugin{shared.PluginName: &shared.TransportPlugin{Impl: &dieOnConfigure{}}},
			GRPCServer:      goplugin.DefaultGRPCServer,
		})
	case "notplugin":
		fmt.Println("hello from a program that is not a plugin")
		time.Sleep(time.Minute)
	case "hang":
		time.Sleep(time.Minute)
	case "hang-with-child":
		// A child in the plugin's process group that outlives a kill of
		// the plugin alone.
		self, _ := os.Executable()
		child := exec.Command(self)
		child.Env = append(os.Environ(), testModeEnv+"=hang")
		if err := child.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "started child %d\n", child.Process.Pid)
		time.Sleep(time.Minute)
	case "flood":
		for i := range floodLines {
			fmt.Fprintf(os.Stderr, "[INFO] flood line %d\n", i)
		}
		fmt.Fprintln(os.Stderr, "[ERROR] fatal: giving up after the flood")
		os.Exit(2)
	case "die-on-configure":
		shared.Serve(&dieOnConfigure{})
	default:
		fmt.Fprintf(os.Stderr, "unknown %s %q\n", testModeEnv, mode)
		os.Exit(1)
	}
}

// dieOnConfigure is a transport whose process dies when configured.
type dieOnConfigure struct{}

func (*dieOnConfigure) Configure(context.Context, []byte) error {
	shared.NewLogger("").Error("out of memory while parsing config")
	os.Exit(3)
	return nil
}

func (*dieOnConfigure) Open(context.Context) (shared.Conn, error) {
	return nil, errors.New("unreachable")
}

func bin(name string) string { return filepath.Join(binDir, name) }

func sha256Of(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// peer is a running test peer process.
type peer struct {
	cmd  *exec.Cmd
	addr string // socket path, host:port or ws:// URL
}

// startPeer starts the test peer with args and waits until it listens.
func startPeer(t testing.TB, args ...string) *peer {
	t.Helper()
	cmd := exec.Command(bin("testpeer"), args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &peer{cmd: cmd}
	t.Cleanup(p.kill)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("test peer %v: %v", args, err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if !ok {
		t.Fatalf("test peer said %q", line)
	}
	p.addr = addr
	go io.Copy(io.Discard, out)
	return p
}

func (p *peer) kill() {
	p.cmd.Process.Kill()
	p.cmd.Wait()
}

// testLogger collects a test's log lines and prints them if the test
// failed. Plugin goroutines may log after the test ended, so it never
// writes to t directly.
func testLogger(t testing.TB) hclog.Logger {
	buf := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() || testing.Verbose() {
			t.Logf("log:\n%s", buf.String())
		}
	})
	return hclog.New(&hclog.LoggerOptions{Name: "test", Level: hclog.Debug, Output: buf})
}

// hclogTo is a server logger at the default level, info, writing to w.
func hclogTo(w io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "test", Level: hclog.Info, Output: w})
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// processGone reports whether pid no longer exists, not even as a zombie.
func processGone(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return errors.Is(err, os.ErrNotExist)
}

// pluginProcesses lists running processes whose executable is one of the
// plugin binaries built for the tests (or the test binary acting as one).
func pluginProcesses(t *testing.T) []string {
	t.Helper()
	self, _ := os.Executable()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var found []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil {
			continue
		}
		exe = strings.TrimSuffix(exe, " (deleted)")
		if strings.HasPrefix(exe, filepath.Join(binDir, "mcpvisor-transport-")) || exe == self {
			found = append(found, fmt.Sprintf("%d %s", pid, exe))
		}
	}
	return found
}
