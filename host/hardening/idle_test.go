//go:build unix

package hardening_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// failureStatus is what a failure leaves in one /status entry.
type failureStatus struct {
	State           string `json:"state"`
	Pid             int    `json:"pid"`
	Generation      uint64 `json:"generation"`
	Retries         int    `json:"retries"`
	Breaker         string `json:"breaker"`
	BreakerFailures int    `json:"breaker_failures"`
	LastError       string `json:"last_error"`
	ExposedTools    int    `json:"exposed_tools"`
}

// failureStatus returns server's /status entry, as an operator sees it
// (operatorStatus: with its pid), or as any caller does where mv has no
// control socket.
func (mv *mcpvisor) failureStatus(t *testing.T, server string) failureStatus {
	t.Helper()
	resp := mv.statusResponse(t)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /status: %s", resp.Status)
	}
	var doc struct {
		Servers []struct {
			Name string `json:"name"`
			failureStatus
		} `json:"servers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatalf("GET /status: %v", err)
	}
	for _, s := range doc.Servers {
		if s.Name == server {
			return s.failureStatus
		}
	}
	t.Fatalf("GET /status has no server %q", server)
	return failureStatus{}
}

// labeledMetric is the value of the series of /metrics named name whose
// labels include every label of want ("k=\"v\"" as Prometheus writes
// them), or -1 when there is none.
func (mv *mcpvisor) labeledMetric(t *testing.T, name string, want ...string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\{([^}]*)\} (\S+)$`)
next:
	for _, m := range re.FindAllStringSubmatch(mv.metricsText(t), -1) {
		labels := strings.Split(m[1], ",")
		for _, w := range want {
			if !slices.Contains(labels, w) {
				continue next
			}
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("metric %s: %v", name, err)
		}
		return v
	}
	return -1
}

// Issue #26 (idle stop): with idle_timeout the server's process is gone
// after it; a fresh client still lists its tools (without starting it);
// the next call starts it and succeeds; the restart is counted with
// reason idle, and nothing counts as a failure.
func TestIdleServerStopsStaysListedAndColdStarts(t *testing.T) {
	mv := startMcpvisor(t, fmt.Sprintf("server \"echo\" {\n  command = %s\n  idle_timeout = \"1s\"\n}\n", hclString(bins["echo"])))
	cs := connectClient(t, mv)
	waitTool(t, cs, "echo__pid")
	text, err := callText(cs, "echo__pid", nil, 30*time.Second)
	if err != nil {
		t.Fatalf("first call: %v", err)
	}
	old, _ := strconv.Atoi(strings.Trim(text, "\" \n"))
	if old == 0 {
		t.Fatalf("pid tool said %q", text)
	}
	// On a loaded machine the server may have gone idle once already
	// before the first call: count from the generation that answered it.
	gen := mv.failureStatus(t, "echo").Generation

	testutil.Eventually(t, 30*time.Second, "the server to go idle", func() bool { return mv.failureStatus(t, "echo").State == "idle" })
	testutil.Eventually(t, 10*time.Second, "the idle server's process to exit", func() bool { return !testutil.Alive(old) })
	if v := mv.labeledMetric(t, "mcpvisor_server_state", `server="echo"`, `state="idle"`); v != 1 {
		t.Errorf("state gauge idle = %v, want 1", v)
	}

	fresh := connectClient(t, mv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := fresh.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list while idle: %v", err)
	}
	listed := map[string]bool{}
	for _, tool := range list.Tools {
		listed[tool.Name] = true
	}
	if !listed["echo__pid"] || !listed["echo__echo"] {
		t.Fatalf("tools/list of a fresh client while the server is idle: %v", list.Tools)
	}
	st := mv.failureStatus(t, "echo")
	if st.State != "idle" || st.Pid != 0 || st.ExposedTools == 0 {
		t.Fatalf("after tools/list: %+v, want still idle with its tools exposed", st)
	}

	text, err = callText(fresh, "echo__pid", nil, 60*time.Second)
	if err != nil {
		t.Fatalf("call to the idle server: %v", err)
	}
	now, _ := strconv.Atoi(strings.Trim(text, "\" \n"))
	if now == 0 || now == old {
		t.Fatalf("call after the idle stop answered by pid %q (old %d)", text, old)
	}
	st = mv.failureStatus(t, "echo")
	if st.Generation != gen+1 || st.Retries != 0 || st.Breaker != "closed" || st.BreakerFailures != 0 || st.LastError != "" {
		t.Errorf("status after the cold start: %+v; want generation %d and no failure", st, gen+1)
	}
	if v := mv.labeledMetric(t, "mcpvisor_server_restarts_total", `reason="idle"`, `server="echo"`); v != float64(gen) {
		t.Errorf("restarts with reason idle = %v, want %d", v, gen)
	}
	if v := mv.labeledMetric(t, "mcpvisor_server_restarts_total", `reason="exit"`, `server="echo"`); v != 0 {
		t.Errorf("restarts with reason exit = %v, want 0", v)
	}
}

// Issue #26 (max_lifetime): a call in flight when the process reaches
// max_lifetime completes; then the process is replaced (new pid) and later
// calls succeed; no failure is counted.
func TestMaxLifetimeReplacesTheProcessBetweenCalls(t *testing.T) {
	mv := startMcpvisor(t, fmt.Sprintf("server \"echo\" {\n  command = %s\n  max_lifetime = \"2s\"\n}\n", hclString(bins["echo"])))
	cs := connectClient(t, mv)
	waitTool(t, cs, "echo__sleep")
	text, err := callText(cs, "echo__pid", nil, 30*time.Second)
	if err != nil {
		t.Fatalf("first call: %v", err)
	}
	old, _ := strconv.Atoi(strings.Trim(text, "\" \n"))
	if old == 0 {
		t.Fatalf("pid tool said %q", text)
	}
	// Longer than max_lifetime: the process is that old while it runs.
	if _, err := callText(cs, "echo__sleep", map[string]any{"ms": 3000}, 60*time.Second); err != nil {
		t.Fatalf("the call in flight across max_lifetime: %v", err)
	}
	testutil.Eventually(t, 30*time.Second, "the process to be replaced", func() bool {
		st := mv.failureStatus(t, "echo")
		return st.State == "ready" && st.Pid != 0 && st.Pid != old
	})
	testutil.Eventually(t, 10*time.Second, "the old process to exit", func() bool { return !testutil.Alive(old) })
	text, err = callText(cs, "echo__pid", nil, 60*time.Second)
	if err != nil {
		t.Fatalf("call after the replacement: %v", err)
	}
	if now, _ := strconv.Atoi(strings.Trim(text, "\" \n")); now == old {
		t.Fatalf("call after max_lifetime answered by the old process %d", old)
	}
	st := mv.failureStatus(t, "echo")
	if st.Generation < 2 || st.Retries != 0 || st.Breaker != "closed" || st.BreakerFailures != 0 || st.LastError != "" {
		t.Errorf("status after max_lifetime: %+v; want a new generation and no failure", st)
	}
	if v := mv.labeledMetric(t, "mcpvisor_server_restarts_total", `reason="lifetime"`, `server="echo"`); v < 1 {
		t.Errorf("restarts with reason lifetime = %v, want ≥ 1", v)
	}
	for _, r := range []string{"exit", "transport", "idle"} {
		if v := mv.labeledMetric(t, "mcpvisor_server_restarts_total", fmt.Sprintf("reason=%q", r), `server="echo"`); v != 0 {
			t.Errorf("restarts with reason %s = %v, want 0", r, v)
		}
	}
}

// A client that subscribes to a resource and goes away without
// unsubscribing releases the upstream subscription, so an idle_timeout
// server is idle-stopped (a held subscription would keep it awake).
func TestSubscriberThatLeavesLetsTheServerIdle(t *testing.T) {
	mv := startMcpvisor(t, fmt.Sprintf("server \"every\" {\n  command = %s\n  idle_timeout = \"1s\"\n}\n", hclString(bins["everything"])))
	cs := connectClient(t, mv)
	waitTool(t, cs, "every__json_schema_2020_12_tool")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "test://watched-resource"}); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	if st := mv.failureStatus(t, "every"); st.State == "idle" {
		t.Fatalf("server idle while a client holds its subscription: %+v", st)
	}
	// The client ends its session (DELETE) without unsubscribing.
	if err := cs.Close(); err != nil {
		t.Fatalf("closing the client: %v", err)
	}
	testutil.Eventually(t, 30*time.Second, "the server to go idle after its only subscriber left", func() bool {
		return mv.failureStatus(t, "every").State == "idle"
	})
}
