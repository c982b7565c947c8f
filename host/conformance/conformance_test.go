//go:build unix

package conformance_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// expectation is a scenario outcome other than passed, and why.
type expectation struct {
	outcome outcome
	reason  string
}

// expectedDirect lists the scenarios that cannot pass against the everything
// server directly. The test fails if one of them does better or worse than
// listed, so the list cannot go stale.
var expectedDirect = map[string]expectation{
	"server-sse-polling": {warned, "go-sdk v1.8.0 writes an SSE priming event (event id + retry) only with an " +
		"EventStore and only for requests of protocol 2025-11-25 or later; the scenario's raw POST says " +
		"mcp-protocol-version 2025-03-26 and the example servers configure no EventStore, so it reports " +
		"two WARNINGs (no priming event, no retry field) and no FAILURE. test_reconnection answers on the " +
		"open stream instead of closing it (see examples/servers/everything/tools.go)."},
}

// mcpvisorReadyTool is an everything tool whose presence at mcpvisor's /mcp
// shows the upstream has connected and its tools are listed.
const mcpvisorReadyTool = "test_simple_text"

// TestConformance runs the suite against the everything server directly,
// then through mcpvisor, and checks both: directly every scenario passes
// unless expectedDirect says otherwise; through mcpvisor nothing does worse
// than directly.
func TestConformance(t *testing.T) {
	requireTools(t)
	direct := runSuite(t, startEverything(t))

	t.Run("direct", func(t *testing.T) {
		checkOutcomes(t, direct, expectedDirect)
	})
	t.Run("through_mcpvisor", func(t *testing.T) {
		// At cleanup, after mcpvisor has stopped, the upstream must be gone.
		// (Registered first, so it runs after mcpvisor's own cleanup.)
		var pid int
		t.Cleanup(func() {
			if pid > 0 {
				checkGone(t, pid)
			}
		})
		url := startMcpvisor(t, fmt.Sprintf("command = %s", strconv.Quote(everythingBin)), mcpvisorReadyTool)
		pid = upstreamPID(t, url)
		via := runSuite(t, url)
		checkParity(t, direct, via, nil)
	})
}

// notificationRepeats is how often TestNotificationScenariosThroughRemoteUpstreams
// runs each notification scenario: before mcpvisor ordered an HTTP
// upstream's notifications, tools-call-with-progress failed most runs.
const notificationRepeats = 5

// TestNotificationScenariosThroughRemoteUpstreams runs the scenarios that
// count notifications sent during a call (progress, logging) repeatedly
// through mcpvisor fronting the everything example over streamable HTTP
// and over legacy SSE. Each run must pass: a notification that reaches the
// client after the call's result, or not at all, fails it.
func TestNotificationScenariosThroughRemoteUpstreams(t *testing.T) {
	requireTools(t)
	for _, mode := range []string{"http", "sse"} {
		t.Run(mode, func(t *testing.T) {
			p := startProcess(t, "everything", exec.Command(everythingBin, "-"+mode, "127.0.0.1:0"))
			line := p.waitLine(t, "listening on ")
			upURL := strings.TrimSpace(line[strings.Index(line, "listening on ")+len("listening on "):])
			attrs := fmt.Sprintf("url = %s", strconv.Quote(upURL))
			if mode == "sse" {
				attrs += "\n  transport = \"sse\""
			}
			url := startMcpvisor(t, attrs, mcpvisorReadyTool)
			for _, scenario := range []string{"tools-call-with-progress", "tools-call-with-logging"} {
				for i := 1; i <= notificationRepeats; i++ {
					if r := runScenario(t, url, scenario); r.Outcome != passed {
						t.Errorf("%s, run %d of %d: %s:\n%s", scenario, i, notificationRepeats, r.Outcome, r.problems())
					}
				}
			}
		})
	}
}

// nameArtifacts are scenarios npm's server-everything passes directly only
// because it answers for names it does not have (the suite's test_* tools,
// test://watched-resource). mcpvisor cannot route a name no upstream has
// and answers JSON-RPC -32602, as the spec's own example for an unknown
// tool does; a difference there says nothing about forwarding.
var nameArtifacts = map[string]string{
	"tools-call-simple-text": "no upstream has test_simple_text; server-everything answers an unknown tool with a result the check accepts",
	"tools-call-error":       "no upstream has test_error_handling; server-everything's unknown-tool result passes as the expected error",
	"resources-subscribe":    "no upstream has test://watched-resource; server-everything accepts a subscription to any URI",
	"resources-unsubscribe":  "no upstream has test://watched-resource; server-everything accepts an unsubscription from any URI",
}

// TestConformanceServerEverything repeats the parity check with a
// third-party upstream: npm's @modelcontextprotocol/server-everything,
// directly on its own streamable HTTP endpoint and then as an upstream of
// mcpvisor over each of its transports: stdio, streamable HTTP and legacy
// SSE. It is not the suite's reference server and fails many scenarios
// directly; what matters is that nothing passing directly does worse
// through mcpvisor.
func TestConformanceServerEverything(t *testing.T) {
	tl := requireTools(t)
	startEverything := func(mode string) string {
		addr := freeAddr(t)
		_, port, _ := net.SplitHostPort(addr)
		cmd := exec.Command(tl.Node22, tl.NpmEverything, mode)
		cmd.Env = append(os.Environ(), "PORT="+port)
		p := startProcess(t, "server-everything "+mode, cmd)
		waitListening(t, p, addr)
		return addr
	}
	direct := runSuite(t, "http://"+startEverything("streamableHttp")+"/mcp")

	upstreams := []struct{ name, attrs string }{
		{"stdio", fmt.Sprintf("command = %s\n  args    = [%s, \"stdio\"]", strconv.Quote(tl.Node22), strconv.Quote(tl.NpmEverything))},
		{"streamable-http", fmt.Sprintf("url = %s", strconv.Quote("http://"+startEverything("streamableHttp")+"/mcp"))},
		{"sse", fmt.Sprintf("url = %s\n  transport = \"sse\"", strconv.Quote("http://"+startEverything("sse")+"/sse"))},
	}
	for _, up := range upstreams {
		t.Run(up.name, func(t *testing.T) {
			via := runSuite(t, startMcpvisor(t, up.attrs, "echo"))
			checkParity(t, direct, via, nameArtifacts)
		})
	}
}

// checkOutcomes fails the test for every scenario whose outcome is not
// passed or, for a listed one, not the listed outcome.
func checkOutcomes(t *testing.T, results map[string]result, expected map[string]expectation) {
	t.Helper()
	for _, name := range sortedNames(results) {
		r := results[name]
		want, listed := expected[name]
		switch {
		case !listed && r.Outcome != passed:
			t.Errorf("scenario %s: %s, want pass:\n%s", name, r.Outcome, r.problems())
		case listed && r.Outcome != want.outcome:
			t.Errorf("scenario %s: %s, but the expected-outcome list says %s (%s); update the list:\n%s",
				name, r.Outcome, want.outcome, want.reason, r.problems())
		case listed:
			t.Logf("scenario %s: %s as expected: %s", name, r.Outcome, want.reason)
		}
	}
	for name := range expected {
		if _, ok := results[name]; !ok {
			t.Errorf("scenario %s is in the expected-outcome list but the suite no longer has it", name)
		}
	}
}

// checkParity fails the test for every scenario that does worse through
// mcpvisor than directly (pass → warn or fail, warn → fail), quoting what
// the suite said, and logs the whole comparison. Scenarios in exempt are
// reported with their reason instead.
func checkParity(t *testing.T, direct, via map[string]result, exempt map[string]string) {
	t.Helper()
	var table strings.Builder
	for _, name := range sortedNames(direct, via) {
		d, ok := direct[name]
		if !ok {
			d = result{Outcome: failed}
		}
		v, ok := via[name]
		if !ok {
			v = result{Outcome: failed, Checks: []check{{ID: name, Status: "FAILURE", ErrorMessage: "no result through mcpvisor"}}}
		}
		fmt.Fprintf(&table, "\n  %-32s direct %-4s  mcpvisor %s", name, d.Outcome, v.Outcome)
		if why, ok := exempt[name]; ok && v.Outcome.rank() < d.Outcome.rank() {
			fmt.Fprintf(&table, " (expected: %s)", why)
			continue
		}
		if v.Outcome.rank() < d.Outcome.rank() {
			t.Errorf("scenario %s: %s directly but %s through mcpvisor:\n%s", name, d.Outcome, v.Outcome, v.problems())
		}
	}
	t.Logf("conformance scenarios, directly vs through mcpvisor:%s", table.String())
}

// startEverything starts the everything server on streamable HTTP at a free
// loopback port and returns its /mcp URL.
func startEverything(t *testing.T) string {
	t.Helper()
	p := startProcess(t, "everything", exec.Command(everythingBin, "-http", "127.0.0.1:0"))
	line := p.waitLine(t, "listening on ")
	return strings.TrimSpace(line[strings.Index(line, "listening on ")+len("listening on "):])
}

// startMcpvisor runs `mcpvisor run` with one upstream, server "upstream"
// with prefix = "" (names unchanged) and the given HCL attributes, and
// returns its /mcp URL once readyTool is listed there, so the suite does
// not race the upstream's first connect.
func startMcpvisor(t *testing.T, attrs, readyTool string) string {
	t.Helper()
	bin := requireMcpvisor(t)
	addr := freeAddr(t)
	cfg := filepath.Join(t.TempDir(), "mcpvisor.hcl")
	config := fmt.Sprintf("host {\n  listen = %s\n  drain  = \"0s\"\n}\n\nserver \"upstream\" {\n  %s\n  prefix  = \"\"\n}\n",
		strconv.Quote(addr), attrs)
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, "mcpvisor", exec.Command(bin, "run", "-config", cfg))
	waitHealthy(t, p, "http://"+addr+"/healthz")
	url := "http://" + addr + "/mcp"
	waitTool(t, url, readyTool)
	return url
}

// waitListening waits until something accepts connections on addr,
// failing the test if p exits or startTimeout passes first.
func waitListening(t *testing.T, p *process, addr string) {
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if !p.running() {
			t.Fatalf("%s exited (%v) before it listened on %s", p.name, p.err, addr)
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listened on %s within %v", addr, startTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitHealthy polls url until it answers 200, failing the test if p exits
// or startTimeout passes first.
func waitHealthy(t *testing.T, p *process, url string) {
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if !p.running() {
			t.Fatalf("mcpvisor exited (%v) before %s answered", p.err, url)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer 200 within %v (last: %v)", url, startTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitTool lists tools at url with the go-sdk client until name is there.
func waitTool(t *testing.T, url, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), startTimeout)
	defer cancel()
	cs := connectTo(t, ctx, url)
	defer cs.Close()
	for {
		res, err := cs.ListTools(ctx, nil)
		if err == nil && slices.ContainsFunc(res.Tools, func(tool *mcp.Tool) bool { return tool.Name == name }) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("mcpvisor at %s does not list %s after %v (last: %v)", url, name, startTimeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// upstreamPID asks the everything server behind mcpvisor for its pid.
func upstreamPID(t *testing.T, url string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), startTimeout)
	defer cancel()
	cs := connectTo(t, ctx, url)
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "pid"})
	if err != nil || res.IsError || len(res.Content) == 0 {
		t.Fatalf("call pid through mcpvisor: %v %+v", err, res)
	}
	text, _ := res.Content[0].(*mcp.TextContent)
	pid, err := strconv.Atoi(text.Text)
	if err != nil {
		t.Fatalf("pid through mcpvisor: %q", text.Text)
	}
	return pid
}

func connectTo(t *testing.T, ctx context.Context, url string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "mcpvisor-conformance-test", Version: "0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatalf("connect to mcpvisor at %s: %v", url, err)
	}
	return cs
}

// checkGone fails the test if the process pid still exists, and kills it.
func checkGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(stopGrace)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("upstream everything server (pid %d) still running after mcpvisor stopped; killed", pid)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
