package hardening_test

import (
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// countingListener is a loopback TCP listener that counts the
// connections it accepted.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func listenCounting(t *testing.T) *countingListener {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &countingListener{Listener: ln}
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

func (l *countingListener) port() int { return l.Addr().(*net.TCPAddr).Port }

// waitAccepted waits until the listener has accepted n connections: a
// dial returns before the accept loop counts it.
func (l *countingListener) waitAccepted(t *testing.T, n int64) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("%d accepted connections", n), func() bool { return l.accepted.Load() >= n })
}

// TestSandboxNetworkRules: the netprobe example server, run by the real
// mcpvisor binary, tries to reach loopback listeners of this test
// (docs/sandbox.md). Unsandboxed it reaches them (the control); under
// network = "none" it reaches no host listener — its own namespace's
// loopback refuses; under connect = [X] it reaches X and the kernel
// refuses Y. The listeners count what reached them, so a refusal that
// only looked like one fails the test. Status shows each sandbox.
func TestSandboxNetworkRules(t *testing.T) {
	x, y, z := listenCounting(t), listenCounting(t), listenCounting(t)
	probe := hclString(bins["netprobe"])
	mv := startMcpvisor(t, fmt.Sprintf(`server "free" {
  command = %s
}
server "none" {
  command = %s
  sandbox {
    network = "none"
  }
}
server "ports" {
  command = %s
  sandbox {
    connect = [%d]
  }
}
`, probe, probe, probe, x.port()))
	cs := connectClient(t, mv)
	for _, tool := range []string{"free__dial", "none__dial", "ports__dial"} {
		waitTool(t, cs, tool)
	}
	dial := func(tool string, l *countingListener) (string, error) {
		return callText(cs, tool, map[string]any{"address": l.Addr().String()}, 30*time.Second)
	}

	if text, err := dial("free__dial", z); err != nil {
		t.Fatalf("unsandboxed dial: %q, %v", text, err)
	}
	z.waitAccepted(t, 1)
	_, err := dial("none__dial", z)
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("network none: want its own loopback's connection refused; got %v", err)
	}
	if n := z.accepted.Load(); n != 1 {
		t.Errorf("network none: the host's listener accepted %d connections, want only the control's", n-1)
	}

	if text, err := dial("ports__dial", x); err != nil {
		t.Errorf("connect = [X]: dial X: %q, %v", text, err)
	} else {
		x.waitAccepted(t, 1)
	}
	_, err = dial("ports__dial", y)
	if err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("connect = [X]: dial Y: want the kernel's permission denied; got %v", err)
	}
	if n := y.accepted.Load(); n != 0 {
		t.Errorf("connect = [X]: Y accepted %d connections", n)
	}

	st := mv.status(t)
	for name, want := range map[string]string{
		"free":  "",
		"none":  "landlock: read 0, write 0; net none",
		"ports": fmt.Sprintf("landlock: read 0, write 0; net any, connect %d", x.port()),
	} {
		if got := st[name].Sandbox; got != want {
			t.Errorf("status of %s: sandbox %q, want %q", name, got, want)
		}
	}
}
