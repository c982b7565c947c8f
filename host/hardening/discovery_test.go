//go:build unix

package hardening_test

// Tool search (docs/discovery.md) against the real binary over stdio: in
// search mode tools/list is the two meta-tools and the pinned tools; obvious
// requests rank the right tool of the example servers first; a tool the
// caller's policy denies never appears in a search and mcpvisor__call_tool
// of it is refused like a direct call (-32011, audited); an allowed
// mcpvisor__call_tool reaches the upstream and is audited as the tool it
// names; a tool left out of the list is still called by its name; and a
// reload that drops a server drops its tools from search.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

func TestDiscoverySearch(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.hcl")
	auditPath := filepath.Join(dir, "audit.jsonl")
	hostBlock := "host {\n  log_level = \"debug\"\n  drain = \"0s\"\n  stdio_subject = \"tester\"\n  audit {\n    path = " + hclString(auditPath) + "\n  }\n" +
		"  discovery {\n    mode = \"search\"\n    pin  = [\"echo__echo\"]\n  }\n}\n\n"
	everything := fmt.Sprintf("server \"everything\" {\n  command = %s\n  discovery { pin = [\"test_simple_text\"] }\n}\n", hclString(bins["everything"]))
	policy := `
policy "me" {
  subjects = ["sub:tester"]
  tools    = ["echo__*", "everything__*"]
  deny     = ["echo__crash"]
}
`
	write := func(cfg string) {
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(hostBlock + echoBlock() + everything + policy)

	stderr := &testutil.Buffer{}
	cmd := exec.Command(bins[testutil.Mcpvisor], "run", "--stdio", "-config", path)
	cmd.Stderr = stderr
	ctx, cancel := context.WithTimeout(context.Background(), 2*readyTimeout)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "hardening-discovery", Version: "1"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: stopTimeout}, &mcp.ClientSessionOptions{ProtocolVersion: sessionProtocol})
	if err != nil {
		t.Fatalf("connecting to mcpvisor run --stdio: %v", err)
	}
	defer func() {
		cs.Close()
		if t.Failed() {
			t.Logf("mcpvisor stderr (last 8 kB):\n%s", tail(stderr.String(), 8<<10))
		}
	}()

	search := func(query, server string, limit int) []string {
		t.Helper()
		args := map[string]any{"query": query, "limit": limit}
		if server != "" {
			args["server"] = server
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "mcpvisor__search_tools", Arguments: args})
		if err != nil || res.IsError {
			t.Fatalf("mcpvisor__search_tools %q: %v %s", query, err, contentText(res))
		}
		var out struct {
			Tools []struct {
				Name        string          `json:"name"`
				InputSchema json.RawMessage `json:"inputSchema"`
			} `json:"tools"`
		}
		text := res.Content[0].(*mcp.TextContent).Text // contentText cuts it short
		if err := json.Unmarshal([]byte(text), &out); err != nil {
			t.Fatalf("mcpvisor__search_tools %q: %v in %s", query, err, contentText(res))
		}
		var names []string
		for _, tool := range out.Tools {
			if len(tool.InputSchema) == 0 || tool.InputSchema[0] != '{' {
				t.Errorf("search result %s has input schema %s; want the tool's full schema", tool.Name, tool.InputSchema)
			}
			names = append(names, tool.Name)
		}
		return names
	}
	// Both servers are up once each one's tools are found.
	deadline := time.Now().Add(readyTimeout)
	for len(search("returns text unchanged", "echo", 5)) == 0 || len(search("returns simple text content", "everything", 5)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the echo and everything tools were not searchable within %s", readyTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}

	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, tool := range list.Tools {
		listed = append(listed, tool.Name)
	}
	if want := []string{"mcpvisor__search_tools", "mcpvisor__call_tool", "echo__echo", "everything__test_simple_text"}; !slices.Equal(listed, want) {
		t.Errorf("tools/list in search mode: %v; want %v (the meta-tools, then the host's and the server's pins)", listed, want)
	}

	// Obvious requests rank the right tool first.
	for query, want := range map[string]string{
		"return my text unchanged":                 "echo__echo",
		"add two numbers":                          "echo__add",
		"send log messages while it runs":          "everything__test_tool_with_logging",
		"give me a picture (png image content)":    "everything__test_image_content",
		"elicit a form whose fields have defaults": "everything__test_elicitation_sep1034_defaults",
	} {
		if got := search(query, "", 5); len(got) == 0 || got[0] != want {
			t.Errorf("search %q: %v; want %s first", query, got, want)
		}
	}
	// The server filter keeps to one server.
	for _, name := range search("returns content", "everything", 50) {
		if !strings.HasPrefix(name, "everything__") {
			t.Errorf("search narrowed to everything returned %s", name)
		}
	}
	// The denied tool's own words do not find it.
	if got := search("exits the server process while the call is in flight crash", "", 50); slices.Contains(got, "echo__crash") {
		t.Errorf("search returned echo__crash, which the policy denies: %v", got)
	}

	call := func(name string, args any) (*mcp.CallToolResult, error) {
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: "mcpvisor__call_tool", Arguments: map[string]any{"name": name, "arguments": args}})
	}
	if res, err := call("echo__echo", map[string]any{"text": "through search"}); err != nil || res.IsError || !strings.Contains(contentText(res), "through search") {
		t.Errorf("mcpvisor__call_tool echo__echo: %v %v", err, res)
	}
	_, err = call("echo__crash", map[string]any{})
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != -32011 {
		t.Errorf("mcpvisor__call_tool echo__crash: %v; want the policy's -32011", err)
	}
	if res, err := call("echo__nonesuch", nil); err != nil || !res.IsError || !strings.Contains(contentText(res), "mcpvisor__search_tools") {
		t.Errorf("mcpvisor__call_tool of an unknown tool: %v %v; want a tool error pointing at the search", err, res)
	}
	// A tool left out of the list is still called by its exposed name.
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__add", Arguments: map[string]any{"a": 2, "b": 3}}); err != nil || res.IsError {
		t.Errorf("direct tools/call of unlisted echo__add: %v %v", err, res)
	}
	// The calls made through the meta-tool are audited as the tools they
	// named, with the caller.
	recs := waitRecords(t, auditPath, 3)
	outcomes := map[string]string{}
	for _, r := range recs {
		if sub, _ := r["subject"].(map[string]any); sub["id"] != "tester" {
			t.Errorf("audit line %v; want subject tester", r)
		}
		outcomes[fmt.Sprint(r["tool"])] = fmt.Sprint(r["outcome"])
	}
	if outcomes["echo"] != "ok" || outcomes["crash"] != "denied" || outcomes["add"] != "ok" {
		t.Errorf("audit outcomes %v; want echo ok, crash denied, add ok", outcomes)
	}

	// A reload without the everything server takes its tools out of search.
	write(hostBlock + echoBlock() + policy)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(readyTimeout)
	for slices.Contains(search("returns simple text content", "", 50), "everything__test_simple_text") {
		if time.Now().After(deadline) {
			t.Fatalf("everything__test_simple_text still found %s after the reload that removed its server", readyTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := search("return my text unchanged", "", 5); len(got) == 0 || got[0] != "echo__echo" {
		t.Errorf("search after the reload: %v; want echo__echo first", got)
	}
}
