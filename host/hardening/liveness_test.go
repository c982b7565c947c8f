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
		// A failed call here timed out (or met the breaker its timeouts
		// opened): while the stopped process serves, status must not
		// say ready, with an error or without (#33: suspect).
		if st := mv.failureStatus(t, "stuck"); st.State == "ready" && st.Pid == old && !seenReady {
			seenReady = true
			t.Errorf("status says ready while calls time out: %+v", st)
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

// Regression (#33, item 1, as checked from outside): with the shipped
// defaults (a 300 s call timeout, no health block) a client whose calls
// give up after a few seconds meets a stopped server; each abandoned
// call is followed by a ping, and the unanswered ping replaces the
// process (reason unresponsive), so the client's calls succeed again with
// no manual action. Before, nothing counted a caller's shorter deadline:
// the server stayed stopped behind two 300 s timeouts.
func TestStoppedServerIsReplacedForShortDeadlines(t *testing.T) {
	mv := startMcpvisor(t, fmt.Sprintf("server \"stuck\" {\n  command = %s\n}\n", hclString(bins["echo"])))
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
	failed := 0
	deadline := time.Now().Add(120 * time.Second)
	for {
		_, err := callText(cs, "stuck__echo", map[string]any{"text": "alive?"}, 3*time.Second)
		if err == nil {
			break
		}
		failed++
		if time.Now().After(deadline) {
			t.Fatalf("no call succeeded in 120s after SIGSTOP; %d failed, the last: %v", failed, err)
		}
	}
	if failed == 0 {
		t.Fatal("no call failed: the stopped server answered")
	}
	if st := mv.failureStatus(t, "stuck"); st.Pid == old || st.State != "ready" {
		t.Errorf("after the replacement: %+v; want ready on a new pid", st)
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

// Issue #33 (the health block): with no call made at all, a stdio server
// under SIGSTOP and a remote server whose process is stopped (it accepts
// connections and answers nothing) are found by their health pings. The
// stdio server's process is replaced and a client's call succeeds again
// without anyone acting; the remote server gets a new session once it
// answers again. Each replacement is in the audit log (event
// unresponsive, with the pid replaced) and in
// mcpvisor_server_restarts_total{reason="unresponsive"}.
func TestHealthPingReplacesHungServersThroughTheBinary(t *testing.T) {
	up := testutil.StartServer(t, bins["echo"], "-http", "127.0.0.1:0")
	dir := t.TempDir()
	auditPath := filepath.Join(dir, "audit.jsonl")
	env := append(os.Environ(), "XDG_STATE_HOME="+filepath.Join(dir, "state"))
	health := "  health {\n    interval = \"2s\"\n    timeout  = \"1s\"\n  }\n"
	servers := fmt.Sprintf("server \"stuck\" {\n  command = %s\n%s}\n", hclString(bins["echo"]), health) +
		fmt.Sprintf("server \"remote\" {\n  url = %s\n  connect_timeout = \"2s\"\n%s}\n", hclString(up.URL), health)
	mv := startMcpvisorEnv(t, env, fmt.Sprintf("  audit {\n    path = %s\n  }\n", hclString(auditPath)), servers)
	cs := connectClient(t, mv)
	waitTool(t, cs, "stuck__echo")
	waitTool(t, cs, "remote__echo")
	old := mv.failureStatus(t, "stuck").Pid
	if old <= 0 {
		t.Fatalf("no pid in status")
	}
	remotePid := up.Cmd.Process.Pid
	for _, pid := range []int{old, remotePid} {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { syscall.Kill(old, syscall.SIGKILL); syscall.Kill(remotePid, syscall.SIGCONT) })

	// No call: only the health pings can find them.
	unresponsive := func(server string) map[string]any {
		for _, r := range auditRecords(t, auditPath) {
			if r["event"] == "unresponsive" && r["server"] == server {
				return r
			}
		}
		return nil
	}
	testutil.Eventually(t, 60*time.Second, "the stopped stdio server replaced", func() bool {
		st := mv.failureStatus(t, "stuck")
		return st.State == "ready" && st.Pid > 0 && st.Pid != old
	})
	rec := unresponsive("stuck")
	if rec == nil {
		t.Fatalf("no unresponsive event for stuck in the audit log: %v", auditRecords(t, auditPath))
	}
	if pid, _ := rec["pid"].(float64); int(pid) != old {
		t.Errorf("audit event %v names pid %v, want the replaced process %d", rec, rec["pid"], old)
	}
	if text, err := callText(cs, "stuck__echo", map[string]any{"text": "back"}, 30*time.Second); err != nil || !strings.Contains(text, "back") {
		t.Errorf("call after the replacement: %q, %v", text, err)
	}
	if st := mv.failureStatus(t, "stuck"); st.LastError != "" {
		t.Errorf("ready again with a last error: %+v", st)
	}

	testutil.Eventually(t, 60*time.Second, "the hung remote session given up", func() bool { return unresponsive("remote") != nil })
	if err := syscall.Kill(remotePid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "a call to the remote server answered", func() bool {
		text, err := callText(cs, "remote__echo", map[string]any{"text": "again"}, 10*time.Second)
		return err == nil && strings.Contains(text, "again")
	})
	for _, server := range []string{"stuck", "remote"} {
		if v := mv.labeledMetric(t, "mcpvisor_server_restarts_total", `reason="unresponsive"`, `server="`+server+`"`); v < 1 {
			t.Errorf(`mcpvisor_server_restarts_total{reason="unresponsive",server=%q} = %v, want ≥ 1`, server, v)
		}
	}
}
