//go:build unix

package hardening_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// callText calls tool with args through cs, bounded by timeout, and
// returns its text or the error (a tool error included).
func callText(cs *mcp.ClientSession, tool string, args map[string]any, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return "", err
	}
	if res.IsError {
		return "", fmt.Errorf("tool error: %s", contentText(res))
	}
	return contentText(res), nil
}

// Regression (#24, item 3): a killed HTTP upstream is a transport failure
// of that server, not the caller's error. A read-only call that meets the
// dead connection is retried once on a new session (the upstream is back
// a second later); a call that may have side effects fails with -32010
// naming the server, not the SDK's bare -32005 "rejected by transport".
func TestDeadHTTPUpstreamIsATransportFailure(t *testing.T) {
	addr := freeAddr(t)
	up := testutil.StartServer(t, bins["echo"], "-http", addr)
	mv := startMcpvisor(t, fmt.Sprintf("server \"web\" {\n  url = %s\n}\n", hclString(up.URL)))
	cs := connectClient(t, mv)
	waitTool(t, cs, "web__echo")
	if _, err := callText(cs, "web__echo", map[string]any{"text": "before"}, 30*time.Second); err != nil {
		t.Fatalf("call before the kill: %v", err)
	}

	// A read-only call made the moment the upstream dies: retried once on
	// the session made when the upstream is back.
	syscall.Kill(-up.Cmd.Process.Pid, syscall.SIGKILL)
	up.Cmd.Wait()
	type result struct {
		text string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		text, err := callText(cs, "web__echo", map[string]any{"text": "retried"}, 60*time.Second)
		got <- result{text, err}
	}()
	time.Sleep(time.Second)
	up = testutil.StartServer(t, bins["echo"], "-http", addr)
	select {
	case r := <-got:
		if r.err != nil || !strings.Contains(r.text, "retried") {
			t.Fatalf("read-only call across the upstream's restart: %q, %v; want it retried on the new session", r.text, r.err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("read-only call across the upstream's restart never returned")
	}

	// A call that may have side effects (progress declares no readOnlyHint)
	// is not retried: its error names the server and is mcpvisor's own.
	syscall.Kill(-up.Cmd.Process.Pid, syscall.SIGKILL)
	up.Cmd.Wait()
	_, err := callText(cs, "web__progress", map[string]any{"steps": 1}, 60*time.Second)
	var wire *jsonrpc.Error
	if !errors.As(err, &wire) || wire.Code != recovery.CodeUpstream || !strings.Contains(wire.Message, `server "web"`) {
		t.Fatalf("call to a dead HTTP upstream: %v; want JSON-RPC error %d naming server \"web\"", err, recovery.CodeUpstream)
	}
	t.Logf("error for a call to the dead upstream: %s", wire.Message)
}

// Regression (#24, item 1): `mcpvisor revive` and `restart` report the
// outcome of the attempt they caused. A server that fails again within
// milliseconds is parked again before any poll of its state could see it
// leave park; the command still says so and exits 1 with the error,
// without waiting out the control timeout (2 min). Once the server can
// start, revive says it is ready and exits 0.
func TestReviveAndRestartReportTheAttempt(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "ok")
	script := fmt.Sprintf("if [ -f %q ]; then exec %q; fi; echo 'dependency missing' >&2; exit 3", gate, bins["echo"])
	mv := startMcpvisor(t, fmt.Sprintf("server \"flaky\" {\n  command = \"sh\"\n  args = [\"-c\", %s]\n  reconnect { max_retries = 0 }\n}\n", hclString(script)))
	testutil.Eventually(t, readyTimeout, "flaky parked", func() bool { return mv.status(t)["flaky"].State == "parked" })

	for _, action := range []string{"revive", "restart"} {
		code, stdout, stderr := runCLI(t, action, "-config", mv.config, "flaky")
		if code != 1 || !strings.Contains(stderr, "parked again") || !strings.Contains(stderr, "exit status 3") || !strings.Contains(stderr, "flaky") {
			t.Errorf("mcpvisor %s of a server that fails at once: exit %d\nstdout: %s\nstderr: %s\nwant exit 1 saying it is parked again, with its exit status", action, code, stdout, stderr)
		}
		t.Logf("mcpvisor %s: exit %d: %s", action, code, strings.TrimSpace(stderr))
	}

	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "revive", "-config", mv.config, "flaky")
	if code != 0 || !strings.Contains(stdout, "ready") {
		t.Errorf("mcpvisor revive of a server that can start: exit %d\nstdout: %s\nstderr: %s\nwant exit 0 saying it is ready", code, stdout, stderr)
	}
}

// Regression (#24, item 5): a remote server's outage costs no more than
// the outage. A call made once an HTTP upstream is back succeeds at once,
// without waiting out the rest of a multi-second reconnect backoff (the
// call itself makes the attempt, as calls probe a parked remote server);
// and after a parked remote server's upstream returns, a new client's
// tools/list sees its tools soon, not after the breaker's cooldown (60 s).
func TestShortOutageCostsNoBackoff(t *testing.T) {
	addr := freeAddr(t)
	up := testutil.StartServer(t, bins["echo"], "-http", addr)
	mv := startMcpvisor(t, fmt.Sprintf("server \"web\" {\n  url = %s\n  reconnect {\n    max_retries = 10\n  }\n}\n", hclString(up.URL)))
	cs := connectClient(t, mv)
	waitTool(t, cs, "web__echo")

	// Down until the server waits out a backoff of several seconds.
	syscall.Kill(-up.Cmd.Process.Pid, syscall.SIGKILL)
	up.Cmd.Wait()
	testutil.Eventually(t, 60*time.Second, "a reconnect backoff of 6 s or more", func() bool {
		st := mv.status(t)["web"]
		return st.State == "reconnecting" && time.Until(st.NextAttempt) > 6*time.Second
	})
	up = testutil.StartServer(t, bins["echo"], "-http", addr)
	back := time.Now()
	text, err := callText(cs, "web__echo", map[string]any{"text": "back"}, 60*time.Second)
	took := time.Since(back)
	if err != nil || !strings.Contains(text, "back") {
		t.Fatalf("call once the upstream is back: %q, %v", text, err)
	}
	// Loose: a healthy mcpvisor answers in well under a second; without
	// the call's own attempt it waits out the backoff (over 6 s).
	if took > 3*time.Second {
		t.Errorf("the first call after the upstream came back took %s: it waited out the backoff", took.Round(time.Millisecond))
	}
	t.Logf("first call after the upstream came back took %s", took.Round(time.Millisecond))

	// Parked, with no calls: the upstream returns and a client that
	// starts then lists tools.
	mv2 := startMcpvisor(t, fmt.Sprintf("server \"web\" {\n  url = %s\n  reconnect {\n    max_retries = 0\n  }\n}\n", hclString(up.URL)))
	cs2 := connectClient(t, mv2)
	waitTool(t, cs2, "web__echo")
	syscall.Kill(-up.Cmd.Process.Pid, syscall.SIGKILL)
	up.Cmd.Wait()
	testutil.Eventually(t, 60*time.Second, "web parked", func() bool { return mv2.status(t)["web"].State == "parked" })
	testutil.StartServer(t, bins["echo"], "-http", addr)
	back = time.Now()
	fresh := connectClient(t, mv2)
	// Well before the breaker's cooldown (60 s); in practice about a second.
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := fresh.ListTools(ctx, nil)
		cancel()
		if err == nil && slices.ContainsFunc(res.Tools, func(tool *mcp.Tool) bool { return tool.Name == "web__echo" }) {
			break
		}
		if time.Since(back) > 20*time.Second {
			t.Fatalf("a new client's tools/list still lacks web__echo %s after the upstream came back (err %v)", time.Since(back).Round(time.Second), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("a new client listed the parked server's tools %s after its upstream came back", time.Since(back).Round(time.Millisecond))
}

// Regression (#24, item 2): one server block reading an unset variable
// with env() does not stop `run`. The other servers start and serve; that
// server is held in needs_config, lists no tools, and status, revive and
// validate name the variable to set.
func TestUnsetSecretHoldsOnlyItsServer(t *testing.T) {
	const unset = "MCPVISOR_TEST_NEVER_SET_KEY"
	os.Unsetenv(unset)
	mv := startMcpvisor(t, echoBlock()+fmt.Sprintf("server \"paid\" {\n  command = %s\n  env = { API_KEY = env(%q) }\n}\n", hclString(bins["echo"]), unset))
	cs := connectClient(t, mv)
	waitTool(t, cs, "echo__echo")
	if text, err := callText(cs, "echo__echo", map[string]any{"text": "still here"}, 30*time.Second); err != nil || !strings.Contains(text, "still here") {
		t.Fatalf("call to the other server: %q, %v", text, err)
	}
	st := mv.status(t)["paid"]
	if st.State != "needs_config" || !strings.Contains(st.LastError, unset) {
		t.Errorf("status of the server missing its variable: %+v; want needs_config naming %s", st, unset)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		if strings.HasPrefix(tool.Name, "paid") {
			t.Errorf("tool %s of a server that was not started is listed", tool.Name)
		}
	}

	code, stdout, stderr := runCLI(t, "status", "-config", mv.config)
	if code != 0 || !strings.Contains(stdout, "needs_config") || !strings.Contains(stdout, "set "+unset) {
		t.Errorf("mcpvisor status: exit %d\nstdout: %s\nstderr: %s\nwant needs_config and \"set %s\"", code, stdout, stderr, unset)
	}
	code, stdout, stderr = runCLI(t, "revive", "-config", mv.config, "paid")
	if code != 1 || !strings.Contains(stderr, unset) {
		t.Errorf("mcpvisor revive of it: exit %d\nstdout: %s\nstderr: %s\nwant exit 1 naming %s", code, stdout, stderr, unset)
	}
	// validate agrees with run (#37 item 1): the file is valid, run holds
	// only this server, and the warning names the variable and the fix.
	code, stdout, stderr = runCLI(t, "validate", "-config", mv.config)
	if code != 0 || !strings.Contains(stderr, unset) || !strings.Contains(stderr, "mcpvisor secret set "+unset) {
		t.Errorf("mcpvisor validate: exit %d\nstdout: %s\nstderr: %s\nwant exit 0 with a warning naming %s and `mcpvisor secret set`", code, stdout, stderr, unset)
	}
}
