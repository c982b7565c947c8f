//go:build unix

package hardening_test

// The local user over the control socket (docs/auth.md, "The control
// socket"): on a host whose auth block has only oidc, the CLI has no
// token to send, and the control socket admits it without one as the
// local user, whom the kernel vouched for when the host accepted the
// connection. TCP still wants a token.

import (
	"fmt"
	"net/http"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
)

// TestControlSocketLocalUserWithOIDCOnly: see the note at the top of this
// file.
func TestControlSocketLocalUserWithOIDCOnly(t *testing.T) {
	env := withoutXDG(shortTempDir(t))
	p := startProvider(t, "")
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	mv := startMcpvisorEnv(t, env, oidcHost(p.issuer, "", "")+fmt.Sprintf("  audit {\n    path = %s\n  }\n", hclString(auditPath)), echoBlock())
	p.audience = "http://" + mv.addr + "/mcp"
	jwt := p.token(t, clientGood)
	// The JWT's subject is no operator: /status shows it readiness, no
	// pid (operator.go); the restart below shows in the audit log.
	echoReady(t, mv, jwt)

	// TCP without a token: 401, as before.
	if resp, body := mcpPost(t, mv, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /mcp over TCP without a token: %s %q; want 401", resp.Status, body)
	}
	if resp, body := consoleRequest(t, mv, "GET", "/status", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /status over TCP without a token: %s %q; want 401", resp.Status, body)
	}

	// The CLI through the control socket, with no token anywhere.
	out, code := runCLIWithEnv(t, env, "status", "-config", mv.config)
	if code != 0 || !strings.Contains(out, "echo") || !strings.Contains(out, "ready") {
		t.Fatalf("mcpvisor status on a host with only oidc: exit %d:\n%s", code, out)
	}
	out, code = runCLIWithEnv(t, env, "tools", "-config", mv.config)
	if code != 0 || !strings.Contains(out, "echo__echo") {
		t.Errorf("mcpvisor tools on a host with only oidc: exit %d:\n%s", code, out)
	}
	out, code = runCLIWithEnv(t, env, "restart", "-config", mv.config, "echo")
	if code != 0 || !strings.Contains(out, "restarted") {
		t.Fatalf("mcpvisor restart echo on a host with only oidc: exit %d:\n%s", code, out)
	}
	if rec := waitAudit(t, auditPath, func(r map[string]any) bool { return r["operation"] == "/control/restart" }); rec["outcome"] != "ok" ||
		rec["subject"].(map[string]any)["via"] != "local" {
		t.Errorf("mcpvisor restart echo: audit line %v; want an ok restart by the local user", rec)
	}
	echoReady(t, mv, jwt)
	if !strings.Contains(mv.stderr.String(), "operator request") || !strings.Contains(mv.stderr.String(), `allowed_by="the local user is an operator"`) {
		t.Errorf("the host's log has no operator request allowed as the local user (the CLI's operator credential):\n%s", tail(mv.stderr.String(), 2000))
	}

	// The call's audit line names the local user.
	out, code = runCLIWithEnv(t, env, "call", "-config", mv.config, "echo__echo", `{"text":"from the local user"}`)
	if code != 0 || !strings.Contains(out, "from the local user") {
		t.Fatalf("mcpvisor call echo__echo on a host with only oidc: exit %d:\n%s", code, out)
	}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	recs := waitRecords(t, auditPath, 1)
	sub, _ := recs[len(recs)-1]["subject"].(map[string]any)
	if sub["via"] != "local" || sub["id"] != u.Username {
		t.Errorf("audit subject of a call over the control socket: %v; want via local, id %q", sub, u.Username)
	}
}
