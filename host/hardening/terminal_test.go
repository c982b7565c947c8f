//go:build unix

package hardening_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// terminalAttack is what a hostile upstream writes to take over the
// terminal of whoever reads `mcpvisor tools` or `status`: clear the
// screen, retitle the window (OSC 0), plant a hyperlink (OSC 8), a C1 CSI
// and a bidi override, and a newline and tab that would forge a table row.
const terminalAttack = "\x1b[2J\x1b[H\x1b]0;pwned\x07\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\\u009b31m\u202eevil\nFAKE\tROW"

// escapeUpstream serves one tool whose description is terminalAttack over
// streamable HTTP: a real MCP server, hostile only in what it says.
func escapeUpstream(t *testing.T) string {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "escape", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "t", Description: terminalAttack}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL + "/mcp"
}

// noControlBytes fails the test for every control byte in out that the
// CLI did not escape: ESC, C1 controls and bidi overrides, and line breaks
// or tabs other than the ones the CLI's own layout uses.
func noControlBytes(t *testing.T, what, out string) {
	t.Helper()
	for _, bad := range []string{"\x1b", "\u009b", "\u202e", "\a", "pwned\x07", "\nFAKE"} {
		if strings.Contains(out, bad) {
			t.Errorf("%s prints the upstream's %q raw:\n%q", what, bad, out)
		}
	}
}

// An upstream's tool description and stderr reach the operator's terminal
// through `mcpvisor tools` and `mcpvisor status`: every control character
// in them is printed as a visible escape, never sent raw. JSON output is
// encoding/json's, escaped already.
func TestTerminalEscapesUpstreamText(t *testing.T) {
	// The second server dies at once, writing the attack on stderr: it
	// becomes its last error, which status shows.
	servers := fmt.Sprintf(`server "esc" {
  url = %s
}

server "noisy" {
  command = "/bin/sh"
  args    = ["-c", %s]
  reconnect {
    max_retries = 0
  }
}
`, hclString(escapeUpstream(t)), hclString(fmt.Sprintf("printf '%%s\\n' %s >&2; exit 3", shellQuote(terminalAttack))))
	mv := startMcpvisor(t, servers)

	deadline := time.Now().Add(readyTimeout)
	for mv.status(t)["noisy"].LastError == "" {
		if time.Now().After(deadline) {
			t.Fatalf("server noisy has no last error after %s: %+v", readyTimeout, mv.status(t)["noisy"])
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(mv.status(t)["noisy"].LastError, "pwned") {
		t.Fatalf("the stderr line is not in noisy's last error, so status cannot show it: %q", mv.status(t)["noisy"].LastError)
	}

	code, out, errs := runCLI(t, "tools", "-config", mv.config)
	if code != 0 || !strings.Contains(out, "esc__t") {
		t.Fatalf("tools: exit %d\nstdout: %q\nstderr: %s", code, out, errs)
	}
	noControlBytes(t, "tools", out+errs)
	if !strings.Contains(out, `\x1b]0;pwned\x07`) {
		t.Errorf("tools does not show the description's escapes visibly:\n%s", out)
	}

	code, out, errs = runCLI(t, "status", "-config", mv.config)
	if code != 0 || !strings.Contains(out, "noisy") {
		t.Fatalf("status: exit %d\nstdout: %q\nstderr: %s", code, out, errs)
	}
	noControlBytes(t, "status", out+errs)
	// Parked, noisy spends no retry budget: RETRIES says "-", not "1 of 0"
	// beside a NEXT ATTEMPT.
	if !regexp.MustCompile(`(?m)^noisy\s+parked\s+\S+\s+\S+\s+\d+\s+-\s`).MatchString(out) {
		t.Errorf("the parked server's row does not show RETRIES as -:\n%s", out)
	}

	// JSON keeps the text exactly, escaped by encoding/json.
	code, out, _ = runCLI(t, "tools", "-json", "-config", mv.config)
	noControlBytes(t, "tools -json", out)
	var rows []struct{ Name, Server, Original, Description string }
	if err := json.Unmarshal([]byte(out), &rows); err != nil || code != 0 {
		t.Fatalf("tools -json: exit %d, %v\n%s", code, err, out)
	}
	if len(rows) != 1 || rows[0].Description != terminalAttack {
		t.Errorf("tools -json: %+v, want the description exactly", rows)
	}
	// mcpvisor run logs the server's stderr lines: escaped too.
	noControlBytes(t, "mcpvisor run's log", mv.stderr.String())
}

// shellQuote single-quotes s for /bin/sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// `mcpvisor tools` through a running host says which server each tool
// comes from, in the table and in -json with the tool's original name.
func TestToolsThroughRunningHostNameTheServer(t *testing.T) {
	mv := startMcpvisor(t, echoBlock())
	code, out, errs := runCLI(t, "tools", "-json", "-config", mv.config)
	if code != 0 || !strings.Contains(errs, "using the running host") {
		t.Fatalf("tools -json: exit %d, not through the running host\nstderr: %s", code, errs)
	}
	var rows []struct{ Name, Server, Original string }
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("tools -json: %v\n%s", err, out)
	}
	found := false
	for _, r := range rows {
		if r.Name == "echo__echo" {
			found = true
			if r.Server != "echo" || r.Original != "echo" {
				t.Errorf("echo__echo: server %q, original %q; want echo and echo", r.Server, r.Original)
			}
		}
	}
	if !found {
		t.Fatalf("echo__echo not listed: %s", out)
	}
	// A mistyped tool name through the running host gets a suggestion.
	if code, _, errs := runCLI(t, "call", "-config", mv.config, "echo__ecoh", "{}"); code != 1 || !strings.Contains(errs, `did you mean "echo__echo"?`) {
		t.Errorf("call echo__ecoh through the running host: exit %d, no suggestion:\n%s", code, errs)
	}
	_, out, _ = runCLI(t, "tools", "-config", mv.config)
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "echo__echo" && f[1] != "echo" {
			t.Errorf("the table's SERVER for echo__echo is %q, want echo:\n%s", f[1], out)
		}
	}
}

// `mcpvisor status` names the host it shows, and for a config no host
// serves it says so instead of showing the host of another config that
// listens on the same address.
func TestStatusNamesItsHost(t *testing.T) {
	mv := startMcpvisor(t, echoBlock())
	code, out, errs := runCLI(t, "status", "-config", mv.config)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("pid %d", mv.pid)) || !strings.Contains(out, "config "+mv.config) {
		t.Errorf("status does not name the host (pid %d, config %s): exit %d\n%s%s", mv.pid, mv.config, code, out, errs)
	}

	// Another config on the same host.listen, with no host of its own.
	other := filepath.Join(t.TempDir(), "other.hcl")
	if err := os.WriteFile(other, []byte(hostConfig(mv.addr, "", "")), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs = runCLI(t, "status", "-config", other)
	if code == 0 || strings.Contains(out, "echo") {
		t.Errorf("status for a config no host serves shows another config's host: exit %d\n%s", code, out)
	}
	if want := "no running host serves " + other; !strings.Contains(errs, want) || !strings.Contains(errs, mv.config) {
		t.Errorf("status does not say %q and name the config the host at %s serves:\n%s", want, mv.addr, errs)
	}
	// revive and restart go by the same rule.
	if code, _, errs := runCLI(t, "restart", "-config", other, "echo"); code == 0 || !strings.Contains(errs, "no running host serves") {
		t.Errorf("restart through another config's host: exit %d\n%s", code, errs)
	}
}

// A server block with enabled = false is validated but never started: no
// process runs its command, its tools are not listed, and status shows it
// as disabled.
func TestDisabledServerIsNotStarted(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "started")
	servers := echoBlock() + fmt.Sprintf(`
server "off" {
  command = "/bin/sh"
  args    = ["-c", %s]
  enabled = false
}
`, hclString("touch "+shellQuote(marker)+"; exec sleep 600"))
	mv := startMcpvisor(t, servers)
	cs := connectClient(t, mv)
	waitTool(t, cs, "echo__echo")
	if st := mv.status(t)["off"]; st.State != "disabled" {
		t.Errorf("status of the disabled server: %+v, want state disabled", st)
	}
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		if strings.HasPrefix(tool.Name, "off__") {
			t.Errorf("the disabled server's tool %s is listed", tool.Name)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the disabled server's command ran")
	}
	for _, pid := range testutil.Descendants(mv.pid) {
		if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(cmdline), marker) {
			t.Errorf("process %d runs the disabled server: %q", pid, cmdline)
		}
	}
	code, out, _ := runCLI(t, "status", "-config", mv.config)
	if code != 0 || !regexp.MustCompile(`(?m)^off\s+disabled\s`).MatchString(out) {
		t.Errorf("status table: exit %d\n%s", code, out)
	}
	if code, _, errs := runCLI(t, "revive", "-config", mv.config, "off"); code == 0 || !strings.Contains(errs, "disabled") {
		t.Errorf("revive of a disabled server: exit %d\n%s", code, errs)
	}
}

// A server that exits the same way twice parks at once instead of
// spending its max_retries. What the log and status say about it agree:
// the log does not claim it parks "without retrying" and then give a
// next attempt, and RETRIES does not read "1 of 5" beside a NEXT ATTEMPT.
func TestParkMessagesAgree(t *testing.T) {
	// A command that does not exist is the one start failure that parks
	// at once: no retry can fix it without a config edit.
	mv := startMcpvisor(t, `server "broken" {
  command = "/nonexistent/mcp-server"
  reconnect {
    max_retries = 5
  }
}
`)
	deadline := time.Now().Add(readyTimeout)
	for mv.status(t)["broken"].State != "parked" {
		if time.Now().After(deadline) {
			t.Fatalf("server broken not parked after %s: %+v", readyTimeout, mv.status(t)["broken"])
		}
		time.Sleep(100 * time.Millisecond)
	}
	log := mv.stderr.String()
	if !strings.Contains(log, "server cannot start as configured") {
		t.Fatalf("the server did not park as one that cannot start:\n%s", log)
	}
	if strings.Contains(log, "without retrying") {
		t.Errorf("the log says the server parks without retrying, and then when it tries again:\n%s", log)
	}
	code, out, errs := runCLI(t, "status", "-config", mv.config)
	if code != 0 {
		t.Fatalf("status: exit %d\n%s", code, errs)
	}
	if !regexp.MustCompile(`(?m)^broken\s+parked\s+\S+\s+\d\d:\d\d:\d\d\s+\d+\s+-\s`).MatchString(out) {
		t.Errorf("the parked server's row should show its NEXT ATTEMPT and RETRIES -:\n%s", out)
	}
}
