//go:build unix

package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// idleStatus is the part of one /status entry the idle test reads.
type idleStatus struct {
	Name            string `json:"name"`
	State           string `json:"state"`
	Pid             int    `json:"pid"`
	Generation      uint64 `json:"generation"`
	Retries         int    `json:"retries"`
	Breaker         string `json:"breaker"`
	BreakerFailures int    `json:"breaker_failures"`
	LastError       string `json:"last_error"`
}

// serverStatus returns server's entry of /status as the operator sees
// it: over h's control socket with the local operator credential, the
// CLI's way (docs/security.md, "The operator's door"); an anonymous GET
// /status shows readiness only.
func serverStatus(t *testing.T, h *hostProcess, server string) idleStatus {
	t.Helper()
	runtimeDir := ""
	for _, kv := range h.cmd.Env {
		if x, ok := strings.CutPrefix(kv, "XDG_RUNTIME_DIR="); ok && x != "" {
			runtimeDir = filepath.Join(x, "mcpvisor")
		}
		if x, ok := strings.CutPrefix(kv, "TMPDIR="); ok && x != "" && runtimeDir == "" {
			runtimeDir = filepath.Join(x, fmt.Sprintf("mcpvisor-%d", os.Getuid()))
		}
	}
	socks, _ := filepath.Glob(filepath.Join(runtimeDir, fmt.Sprintf("*-%d.sock", h.cmd.Process.Pid)))
	token, err := os.ReadFile(filepath.Join(runtimeDir, "operator-token"))
	if len(socks) != 1 || err != nil {
		t.Fatalf("no control socket of pid %d in %s (%v, %v)", h.cmd.Process.Pid, runtimeDir, socks, err)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socks[0])
	}}}
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, "http://mcpvisor/status", nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET /status over %s: %v", socks[0], err)
	}
	defer resp.Body.Close()
	var doc struct {
		Servers []idleStatus `json:"servers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatalf("GET /status: %v", err)
	}
	for _, s := range doc.Servers {
		if s.Name == server {
			return s
		}
	}
	t.Fatalf("GET /status has no server %q", server)
	return idleStatus{}
}

// restartsBy returns mcpvisor_server_restarts_total of server for reason.
func restartsBy(t *testing.T, listen, server, reason string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + listen + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	re := regexp.MustCompile(`(?m)^mcpvisor_server_restarts_total\{([^}]*)\} (\S+)$`)
	for _, m := range re.FindAllStringSubmatch(string(body), -1) {
		labels := strings.Split(m[1], ",")
		if slices.Contains(labels, fmt.Sprintf("reason=%q", reason)) && slices.Contains(labels, fmt.Sprintf("server=%q", server)) {
			v, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("/metrics has no restarts series for server %q reason %q", server, reason)
	return 0
}

// TestEverythingIdleStopAndColdStart (issue #26): server-everything (Node,
// stdio) with idle_timeout. Once idle, mcpvisor has no child process left;
// a fresh client (the inspector CLI) still lists its tools without
// starting it; the next call starts it and is answered; the restart counts
// with reason idle and nothing counts as a failure.
func TestEverythingIdleStopAndColdStart(t *testing.T) {
	t.Parallel()
	tl := requireTools(t)
	env := newTestEnv(t)
	listen := freeAddr(t)
	cfg := writeConfig(t, fmt.Sprintf(`host { listen = %s }

server "everything" {
  command      = %s
  args         = [%s, "stdio"]
  idle_timeout = "2s"
}
`, hclString(listen), hclString(tl.Node22), hclString(tl.Everything)))

	h := startHost(t, tl, env, cfg, listen)
	target := []string{"--transport", "http", "--server-url", h.URL}
	listToolsUntil(t, tl, env, exposedEchoTool, target...)

	testutil.Eventually(t, 60*time.Second, "server-everything to go idle", func() bool {
		return serverStatus(t, h, "everything").State == "idle"
	})
	testutil.Eventually(t, 10*time.Second, "mcpvisor to have no child process while the server is idle", func() bool {
		return len(h.snapshot()) == 0
	})
	gen := serverStatus(t, h, "everything").Generation

	names := listToolsUntil(t, tl, env, exposedEchoTool, target...)
	if st := serverStatus(t, h, "everything"); st.State != "idle" || st.Generation != gen {
		t.Fatalf("a fresh client's tools/list (%d tools) started the idle server: %+v", len(names), st)
	}

	callEcho(t, tl, env, exposedEchoTool, "hello after an idle stop", target...)
	st := serverStatus(t, h, "everything")
	if st.Generation != gen+1 || st.Retries != 0 || st.Breaker != "closed" || st.BreakerFailures != 0 || st.LastError != "" {
		t.Errorf("after the cold start: %+v; want generation %d and no failure", st, gen+1)
	}
	if v := restartsBy(t, listen, "everything", "idle"); v != float64(gen) {
		t.Errorf("restarts with reason idle = %v, want %d", v, gen)
	}
	for _, r := range []string{"exit", "transport"} {
		if v := restartsBy(t, listen, "everything", r); v != 0 {
			t.Errorf("restarts with reason %s = %v, want 0", r, v)
		}
	}
}
