//go:build unix

package hardening_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// Regression (#33, item 1): a stdio server that stays alive but stops
// answering (SIGSTOP) is replaced, reason unresponsive in the metrics,
// and calls succeed again; status never says ready with no error while
// its calls time out. Before, it was lost for good: every call timed out
// or met the open breaker, forever.
func TestStoppedServerIsReplacedThroughTheBinary(t *testing.T) {
	mv := startMcpvisor(t, fmt.Sprintf("server \"stuck\" {\n  command = %s\n  timeout = \"3s\"\n}\n", hclString(bins["echo"])))
	cs := connectClient(t, mv)
	waitTool(t, cs, "stuck__echo")
	old := mv.failureStatus(t, "stuck").Pid
	if old <= 0 {
		t.Fatalf("no pid in status")
	}
	if err := syscall.Kill(old, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(old, syscall.SIGKILL) })

	failed, seenReady := 0, false
	deadline := time.Now().Add(120 * time.Second)
	for {
		_, err := callText(cs, "stuck__echo", map[string]any{"text": "alive?"}, 60*time.Second)
		if err == nil {
			break
		}
		failed++
		if st := mv.failureStatus(t, "stuck"); st.State == "ready" && st.Pid == old && st.LastError == "" && !seenReady {
			seenReady = true
			t.Errorf("status says ready with no error while calls time out: %+v", st)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no call succeeded in 120s after SIGSTOP; %d failed, the last: %v", failed, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if failed == 0 {
		t.Fatal("no call failed: the stopped server answered")
	}
	st := mv.failureStatus(t, "stuck")
	if st.Pid == old || st.State != "ready" || st.LastError != "" {
		t.Errorf("after the replacement: %+v; want ready on a new pid with no last error", st)
	}
	if v := mv.labeledMetric(t, "mcpvisor_server_restarts_total", `reason="unresponsive"`, `server="stuck"`); v < 1 {
		t.Errorf(`mcpvisor_server_restarts_total{reason="unresponsive"} = %v, want ≥ 1`, v)
	}
}

// Regression (#33, items 3 and 4): a server that parked at its first
// start never listed its tools, so clients do not see them; a call to
// NAME__tool still reaches it and succeeds within its deadline once the
// server can run (its own timer is an hour away), a call to a tool it
// does not have says unknown tool, and status shows no old error once it
// is ready.
func TestNeverStartedServerIsReachedByACall(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "ok")
	script := fmt.Sprintf("if [ -f %q ]; then exec %q; fi; echo 'dependency missing' >&2; exit 3", gate, bins["echo"])
	mv := startMcpvisor(t, fmt.Sprintf("server \"late\" {\n  command = \"sh\"\n  args = [\"-c\", %s]\n  reconnect {\n    max_retries = 0\n    parked_retry = \"1h\"\n  }\n  breaker { cooldown = \"1h\" }\n}\n", hclString(script)))
	testutil.Eventually(t, readyTimeout, "late parked", func() bool { return mv.failureStatus(t, "late").State == "parked" })
	if st := mv.failureStatus(t, "late"); !strings.Contains(st.LastError, "exit status 3") {
		t.Fatalf("parked without its error: %+v", st)
	}
	cs := connectClient(t, mv)

	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	text, err := callText(cs, "late__echo", map[string]any{"text": "reached"}, 60*time.Second)
	if err != nil || !strings.Contains(text, "reached") {
		t.Fatalf("call to a never-started server that can run now: %q, %v; want it started and answered", text, err)
	}
	if _, err := callText(cs, "late__nosuchtool", nil, 60*time.Second); err == nil || !strings.Contains(strings.ToLower(err.Error()), "unknown tool") {
		t.Errorf("call to a tool the server lacks: %v, want unknown tool", err)
	}
	if st := mv.failureStatus(t, "late"); st.State != "ready" || st.LastError != "" {
		t.Errorf("ready again, status: %+v; want no last error", st)
	}
}
