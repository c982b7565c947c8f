//go:build unix

package hardening_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// runCLIHome runs `mcpvisor ARGS…` with HOME and XDG_CONFIG_HOME in home
// (a fresh user's), the rest of the environment the test's own, so it
// finds the test's running hosts.
func runCLIHome(t *testing.T, home string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins[testutil.Mcpvisor], args...)
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("mcpvisor %s did not return within 60s", strings.Join(args, " "))
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running mcpvisor %s: %v", strings.Join(args, " "), err)
	}
	return code, out.String(), errb.String()
}

// `client install -http CLIENT` writes, into a fresh user's file of each
// client that speaks streamable HTTP, that client's own shape of an HTTP
// entry (Claude Code and VS Code: type http + url; Cursor: url; Windsurf:
// serverUrl) pointing at the running host, with the host's bearer token
// as an Authorization header; the entry read back from the file reaches
// the host and lists its tools; the token is never printed, not even by
// -print. Claude Desktop (stdio only) is refused, and so is a config no
// host runs. status then lists the connected client with its clientInfo.
func TestClientInstallHTTP(t *testing.T) {
	mv := consoleHost(t, "")
	home := t.TempDir()
	cases := []struct {
		client, file, serversKey, urlKey, typ string
	}{
		{"claude-code", ".claude.json", "mcpServers", "url", "http"},
		{"cursor", ".cursor/mcp.json", "mcpServers", "url", ""},
		{"vscode", ".config/Code/User/mcp.json", "servers", "url", "http"},
		{"windsurf", ".codeium/windsurf/mcp_config.json", "mcpServers", "serverUrl", ""},
	}
	for _, tc := range cases {
		code, out, errOut := runCLIHome(t, home, "client", "install", "-http", "-config", mv.config, tc.client)
		if code != 0 {
			t.Fatalf("client install -http %s: exit %d\n%s%s", tc.client, code, out, errOut)
		}
		if strings.Contains(out+errOut, consoleToken) {
			t.Errorf("client install -http %s printed the token:\n%s%s", tc.client, out, errOut)
		}
		path := filepath.Join(home, tc.file)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (install said: %s)", tc.client, err, errOut)
		}
		if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %04o, want 0600 for a file holding the token", path, st.Mode().Perm())
		}
		var doc map[string]map[string]map[string]any
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatalf("%s: not JSON: %v\n%s", path, err, data)
		}
		entry := doc[tc.serversKey]["mcpvisor"]
		if entry == nil {
			t.Fatalf("%s: no %s.mcpvisor entry:\n%s", path, tc.serversKey, data)
		}
		want := map[string]bool{tc.urlKey: true, "headers": true}
		if tc.typ != "" {
			want["type"] = true
		}
		for k := range entry {
			if !want[k] {
				t.Errorf("%s: entry has %q, which %s does not read for an HTTP server:\n%s", tc.client, k, tc.client, data)
			}
		}
		if tc.typ != "" && entry["type"] != tc.typ {
			t.Errorf("%s: type %v, want %q", tc.client, entry["type"], tc.typ)
		}
		endpoint, _ := entry[tc.urlKey].(string)
		if endpoint != "http://"+mv.addr+"/mcp" {
			t.Errorf("%s: %s %q, want the running host's http://%s/mcp", tc.client, tc.urlKey, endpoint, mv.addr)
		}
		headers, _ := entry["headers"].(map[string]any)
		auth, _ := headers["Authorization"].(string)
		if auth != "Bearer "+consoleToken {
			t.Errorf("%s: Authorization header %q, want the host's bearer token", tc.client, auth)
		}
		// What the file says reaches the host, as the client would.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		t.Cleanup(tr.CloseIdleConnections)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: tc.client + "-test", Version: "9.8.7"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearerTransport{tr, strings.TrimPrefix(auth, "Bearer ")}}, MaxRetries: -1},
			&mcp.ClientSessionOptions{ProtocolVersion: sessionProtocol})
		cancel()
		if err != nil {
			t.Fatalf("%s: connecting with the entry's url and headers: %v", tc.client, err)
		}
		t.Cleanup(func() { cs.Close() })
		waitTool(t, cs, "web__greet")
	}

	// -print shows the entry without the token.
	code, out, errOut := runCLIHome(t, home, "client", "install", "-http", "-print", "-config", mv.config, "cursor")
	if code != 0 || strings.Contains(out+errOut, consoleToken) || !strings.Contains(out, "not shown") {
		t.Errorf("client install -http -print: exit %d, want the file with the token masked:\n%s%s", code, out, errOut)
	}
	// Claude Desktop's file holds stdio servers only.
	code, _, errOut = runCLIHome(t, home, "client", "install", "-http", "-config", mv.config, "claude-desktop")
	if code != 2 || !strings.Contains(errOut, "stdio") {
		t.Errorf("client install -http claude-desktop: exit %d %q, want 2 saying it takes stdio only", code, errOut)
	}
	// A config no host runs has no endpoint.
	idle := filepath.Join(t.TempDir(), "config.hcl")
	os.WriteFile(idle, []byte("host {\n  listen = \"127.0.0.1:1\"\n}\n"), 0o600)
	code, _, errOut = runCLIHome(t, home, "client", "install", "-http", "-config", idle, "cursor")
	if code != 1 || !strings.Contains(errOut, "no running host serves") {
		t.Errorf("client install -http for a config no host runs: exit %d %q, want 1 saying so", code, errOut)
	}

	// The operator's status lists the clients with their clientInfo.
	code, out, errOut = runCLIHome(t, home, "status", "-config", mv.config)
	if code != 0 || !strings.Contains(out, "windsurf-test") || !strings.Contains(out, "9.8.7") || !strings.Contains(out, "4 client(s) connected") {
		t.Errorf("status: exit %d, want the 4 connected clients with name and version:\n%s%s", code, out, errOut)
	}
	code, out, _ = runCLIHome(t, home, "status", "-json", "-config", mv.config)
	var rep struct {
		HTTP    string `json:"http"`
		Clients []struct {
			Name, Version, Transport, Session string
			Since                             time.Time
		} `json:"clients"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
		t.Fatalf("status -json: exit %d %v\n%s", code, err, out)
	}
	if rep.HTTP != "http://"+mv.addr+"/mcp" || len(rep.Clients) != 4 {
		t.Fatalf("status -json: http %q and %d clients, want the endpoint and 4", rep.HTTP, len(rep.Clients))
	}
	for _, c := range rep.Clients {
		if c.Transport != "streamable-http" || len(c.Session) == 0 || len(c.Session) > 12 || c.Since.IsZero() || c.Version != "9.8.7" {
			t.Errorf("status -json client %+v: want transport, a shortened session id, since and version", c)
		}
	}
}
