//go:build unix

package hardening_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestPolicyCheckReportsRenamedTool: an upstream's del/ete is exposed with
// a clash suffix beside its del_ete; when del_ete goes, del/ete takes the
// plain name. `mcpvisor policy check` against the running host reports the
// tool renamed since the host loaded its policies.
func TestPolicyCheckReportsRenamedTool(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "weird", Version: "1"}, nil)
	handler := func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
	}
	for _, name := range []string{"del_ete", "del/ete"} {
		srv.AddTool(&mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object"}}, handler)
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	mv := startMcpvisorWith(t, "", "server \"weird\" {\n  url = "+hclString(hs.URL)+"\n}\n"+`
policy "all" {
  subjects = ["local", "anonymous"]
  tools    = ["*"]
}
`)
	cs := connectClient(t, mv)
	waitTool(t, cs, "weird__del_ete")
	check := func() (int, string, string) {
		return runCLI(t, "policy", "check", "-config", mv.config, "local", "weird__del_ete")
	}
	if code, stdout, stderr := check(); code != 0 || strings.Contains(stdout, "renamed") {
		t.Fatalf("policy check before any rename: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	srv.RemoveTools("del_ete")
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, stdout, stderr := check()
		if code == 0 && strings.Contains(stdout, `renamed: the running host`) && strings.Contains(stdout, `tool "del/ete" of server "weird" as weird__del_ete, not weird__del_ete_`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("policy check after del/ete took del_ete's name: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
