//go:build unix

package hardening_test

// The operator endpoints (docs/auth.md, "The operator endpoints") against
// the real binary and a real OpenID provider: an OIDC subject that no
// policy with operator = true applies to gets 403 from /control/* and the
// console, with no cookie and no restart; the shared token and the
// control socket keep their access; once a reloaded policy makes the
// subject an operator, its restart works.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// operatorAgents lets every caller use the echo tools and makes nobody an
// operator.
const operatorAgents = `
policy "agents" {
  subjects = ["*"]
  tools    = ["echo__*"]
}
`

// echoStatus waits until the echo server is ready with a process and
// returns its pid and generation, asking /status with the shared token.
func echoStatus(t *testing.T, mv *mcpvisor, token string) (int, uint64) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for {
		var resp *http.Response
		var body string
		if token == "" {
			// Without a token: as the local operator (an anonymous
			// /status shows readiness only).
			resp = mv.statusResponse(t)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
		} else {
			resp, body = consoleRequest(t, mv, "GET", "/status", http.Header{"Authorization": {"Bearer " + token}})
		}
		var doc struct {
			Servers []serverStatus `json:"servers"`
		}
		if resp.StatusCode == http.StatusOK && json.Unmarshal([]byte(body), &doc) == nil {
			for _, s := range doc.Servers {
				if s.Name == "echo" && s.State == "ready" && s.Pid != 0 {
					return s.Pid, s.Generation
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("echo not ready with a pid within %s: %s %s", readyTimeout, resp.Status, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// echoReady waits until the echo server is ready, as /status shows it to
// token's caller (operator or not).
func echoReady(t *testing.T, mv *mcpvisor, token string) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for {
		resp, body := consoleRequest(t, mv, "GET", "/status", http.Header{"Authorization": {"Bearer " + token}})
		var doc struct {
			Servers []serverStatus `json:"servers"`
		}
		if resp.StatusCode == http.StatusOK && json.Unmarshal([]byte(body), &doc) == nil {
			for _, s := range doc.Servers {
				if s.Name == "echo" && s.State == "ready" {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("echo not ready within %s: %s %s", readyTimeout, resp.Status, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestOperatorEndpoints: see the note at the top of this file.
func TestOperatorEndpoints(t *testing.T) {
	const shared = "shared-secret-for-the-operator-test"
	p := startProvider(t, "")
	mv := startMcpvisorWith(t, oidcHost(p.issuer, fmt.Sprintf("    token = %s\n", hclString(shared)), ""), echoBlock()+operatorAgents)
	p.audience = "http://" + mv.addr + "/mcp"
	jwt := p.token(t, clientGood)
	asJWT := http.Header{"Authorization": {"Bearer " + jwt}}
	asToken := http.Header{"Authorization": {"Bearer " + shared}}
	pid, _ := echoStatus(t, mv, shared)

	// The subject may use its tools: it is admitted, just not an operator.
	cs, err := connectWithToken(t, mv, jwt)
	if err != nil {
		t.Fatalf("connecting with the provider's token: %v", err)
	}
	callEcho(t, cs, "an agent's call")

	// Not an operator: 403 saying what is missing, and nothing restarts.
	refusals := 0
	for _, path := range []string{"/control/restart?server=echo", "/control/revive?server=echo", "/control/reload"} {
		resp, body := consoleRequest(t, mv, "POST", path, asJWT)
		refusals++
		var ref struct{ Error, Rule string }
		if resp.StatusCode != http.StatusForbidden || json.Unmarshal([]byte(body), &ref) != nil ||
			!strings.Contains(ref.Error, "the caller sub:user-"+clientGood+" is not an operator: add operator = true to a policy whose subjects include it") ||
			!strings.Contains(ref.Rule, `the policies that apply to it: "agents"`) {
			t.Errorf("POST %s as a subject that is not an operator: %s %s; want 403 with a JSON error naming the subject and operator = true", path, resp.Status, body)
		}
	}
	// The console: no page, no stream, and no cookie even with the
	// shared token in the query beside the subject's own token.
	for _, path := range []string{"/ui", "/ui/events", "/ui?token=" + shared} {
		resp, body := consoleRequest(t, mv, "GET", path, asJWT)
		refusals++
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "is not an operator") || len(resp.Cookies()) != 0 {
			t.Errorf("GET %s as a subject that is not an operator: %s, cookies %q: %s; want 403 without a cookie", path, resp.Status, resp.Header.Values("Set-Cookie"), tail(body, 500))
		}
	}
	// Read-only endpoints stay open to it.
	if resp, body := consoleRequest(t, mv, "GET", "/status", asJWT); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"echo"`) {
		t.Errorf("GET /status as a subject that is not an operator: %s; want 200", resp.Status)
	}
	if got, _ := echoStatus(t, mv, shared); got != pid {
		t.Fatalf("the echo server's pid went from %d to %d after refused restarts", pid, got)
	}
	if !strings.Contains(mv.stderr.String(), "operator endpoint refused: the caller is not an operator") {
		t.Error("the refusals are not in the host's log")
	}
	if got := mv.metricValue(t, shared, `mcpvisor_policy_decisions_total{decision="operator_denied",policy=""}`); got != float64(refusals) {
		t.Errorf(`mcpvisor_policy_decisions_total{decision="operator_denied"} = %v; want %d`, got, refusals)
	}

	// The CLI over the control socket with the config's token (the
	// shared one): an operator.
	code, stdout, stderr := runCLI(t, "restart", "-config", mv.config, "echo")
	if code != 0 || !strings.Contains(stdout, "restarted") {
		t.Fatalf("mcpvisor restart echo through the control socket: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	next, _ := echoStatus(t, mv, shared)
	if next == pid {
		t.Fatalf("mcpvisor restart echo: the pid is still %d", pid)
	}
	pid = next
	// With the subject's token it is the subject, over the socket as over
	// TCP: the socket makes no operator (docs/security.md, "The
	// operator's door").
	code, _, stderr = runCLI(t, "restart", "-config", mv.config, "-token", jwt, "echo")
	if code != 1 || !strings.Contains(stderr, "is not an operator") {
		t.Fatalf("mcpvisor restart echo through the control socket with the subject's token: exit %d\nstderr: %s; want 1, not an operator", code, stderr)
	}
	// The same token over TCP is the subject's, not the local user's.
	code, _, stderr = runCLI(t, "restart", "-addr", mv.addr, "-token", jwt, "echo")
	if code != 1 || !strings.Contains(stderr, "is not an operator") {
		t.Errorf("mcpvisor restart -addr with the subject's token: exit %d, stderr %q; want 1 saying it is not an operator", code, stderr)
	}

	// The shared token keeps today's access.
	if resp, body := consoleRequest(t, mv, "POST", "/control/restart?server=echo", asToken); resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /control/restart with the shared token: %s %s", resp.Status, body)
	}
	if next, _ = echoStatus(t, mv, shared); next == pid {
		t.Fatalf("restart with the shared token: the pid is still %d", pid)
	}
	pid = next
	if resp, _ := consoleRequest(t, mv, "GET", "/ui", asToken); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /ui with the shared token: %s; want 200", resp.Status)
	}

	// A policy with operator = true for the subject, reloaded through the
	// control endpoint with the shared token: now its restart works.
	cfg, err := os.ReadFile(mv.config)
	if err != nil {
		t.Fatal(err)
	}
	cfg = append(cfg, fmt.Sprintf("\npolicy \"oncall\" {\n  subjects = [\"sub:user-%s\"]\n  operator = true\n}\n", clientGood)...)
	if err := os.WriteFile(mv.config, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	if resp, body := consoleRequest(t, mv, "POST", "/control/reload", asToken); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"policies_changed":true`) {
		t.Fatalf("POST /control/reload with the shared token: %s %s; want 200 with the policies changed", resp.Status, body)
	}
	if resp, body := consoleRequest(t, mv, "POST", "/control/restart?server=echo", asJWT); resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /control/restart as an operator: %s %s; want 200", resp.Status, body)
	}
	if next, _ = echoStatus(t, mv, shared); next == pid {
		t.Errorf("restart as an operator: the pid is still %d", pid)
	}
	if resp, body := consoleRequest(t, mv, "GET", "/ui", asJWT); resp.StatusCode != http.StatusOK || !strings.Contains(body, "echo") {
		t.Errorf("GET /ui as an operator: %s; want 200 and the page", resp.Status)
	}
	if code, stdout, _ := runCLI(t, "policy", "check", "-config", mv.config, "-operator", "sub:user-"+clientGood); code != 0 || !strings.Contains(stdout, `policy "oncall" operator = true`) {
		t.Errorf("policy check -operator for the subject: exit %d: %s; want 0 naming the policy", code, stdout)
	}
}

// TestPolicyCheckOperatorCLI: `mcpvisor policy check -operator` says
// whether a caller may use the operator endpoints (exit 0 yes, 1 no), and
// every decision on a tool ends with the caller's operator line.
func TestPolicyCheckOperatorCLI(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.hcl")
	if err := os.WriteFile(path, []byte(operatorAgents+`
policy "oncall" {
  subjects = ["group:oncall"]
  operator = true
}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"-operator", "sub:bob", "group:oncall"}, 0, []string{"allow: the operator endpoints (/control/*, the console /ui) for a token with sub:bob group:oncall", `decided by: policy "oncall" operator = true`, "policies that apply: agents, oncall"}},
		{[]string{"-operator", "sub:alice", "group:analysts"}, 1, []string{"deny: the operator endpoints", `no policy that applies to subject "alice" has operator = true (the policies that apply to it: "agents")`, "to allow: add operator = true"}},
		{[]string{"-operator", "token"}, 0, []string{"allow: the operator endpoints (/control/*, the console /ui) for the shared token's caller"}},
		{[]string{"sub:alice", "echo__echo"}, 0, []string{`allow: tool "echo__echo"`, "operator: no, /control/* and the console refuse it"}},
		{[]string{"sub:bob", "group:oncall", "gh__read"}, 1, []string{`deny: tool "gh__read"`, `operator: yes, it may use /control/* and the console (policy "oncall" operator = true)`}},
		{[]string{"-operator", "-prompt", "sub:alice"}, 2, nil},
		{[]string{"-operator"}, 2, nil},
	} {
		code, stdout, stderr := runCLI(t, append([]string{"policy", "check", "-config", path}, tc.args...)...)
		if code != tc.code {
			t.Errorf("policy check %v: exit %d; want %d\nstdout: %s\nstderr: %s", tc.args, code, tc.code, stdout, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(stdout, w) {
				t.Errorf("policy check %v: output lacks %q:\n%s", tc.args, w, stdout)
			}
		}
	}
}
