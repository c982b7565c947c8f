package gateway_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/discovery"
	"github.com/mcpvisor/mcpvisor/host/internal/gateway"
)

// TestDiscoveryFollowsRegistry: the index is built from the tools already
// registered when search is turned on, and follows the registry after:
// a server's tools withdrawn (parked) are not found, and found again when
// it is back. mcpvisor__call_tool reaches the upstream under the tool's
// original name with the request's _meta, and tools/list is the meta-tools
// and the pinned tool.
func TestDiscoveryFollowsRegistry(t *testing.T) {
	settings := discovery.New(&config.Config{
		Host:    config.Host{Discovery: config.Discovery{Mode: config.DiscoverySearch, Pin: []string{"alpha__content"}}},
		Servers: []*config.Server{{Name: "alpha"}, {Name: "beta"}},
	})
	e := newEnv(t, gateway.Options{Discovery: func() *discovery.Settings { return settings }})
	t.Cleanup(func() { e.gw.Close() })
	if err := e.gw.EnableSearch(); err != nil {
		t.Fatal(err)
	}
	opts, changed := listChangedOptions()
	cs := e.connect(t, opts)
	ctx := testCtx(t)

	if got, want := toolNames(t, ctx, cs), []string{"mcpvisor__search_tools", "mcpvisor__call_tool", "alpha__content"}; !slices.Equal(got, want) {
		t.Errorf("tools/list in search mode: %v, want %v", got, want)
	}
	search := func(query string) []string {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "mcpvisor__search_tools", Arguments: map[string]any{"query": query, "limit": 50}})
		if err != nil || res.IsError {
			t.Fatalf("search %q: %v %v", query, err, res)
		}
		var out struct {
			Tools []struct{ Name string } `json:"tools"`
		}
		if err := json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &out); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tool := range out.Tools {
			names = append(names, tool.Name)
		}
		return names
	}
	if got := search("fail"); !slices.Contains(got, "alpha__fail") || !slices.Contains(got, "beta__fail") {
		t.Fatalf("search fail: %v, want both servers' fail", got)
	}

	e.reg.Update("beta", nil) // beta parks: its tools are withdrawn
	waitFor(t, ctx, changed, "tools")
	if got := search("fail"); slices.Contains(got, "beta__fail") || !slices.Contains(got, "alpha__fail") {
		t.Errorf("search fail with beta parked: %v, want alpha__fail only", got)
	}
	e.sync(t, "beta") // beta is back
	if got := search("fail"); !slices.Contains(got, "beta__fail") {
		t.Errorf("search fail with beta back: %v", got)
	}

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{
		Name:      "mcpvisor__call_tool",
		Arguments: map[string]any{"name": "beta__echo_args", "arguments": map[string]any{"x": 1}},
		Meta:      mcp.Meta{"trace": "t1"},
	})
	if err != nil || res.IsError {
		t.Fatalf("mcpvisor__call_tool beta__echo_args: %v %v", err, res)
	}
	if got := res.Content[0].(*mcp.TextContent).Text; got != `{"x":1}` {
		t.Errorf("arguments the upstream got: %s", got)
	}
	if res.Meta["trace"] != "t1" {
		t.Errorf("_meta the upstream got: %v, want the request's", res.Meta)
	}
	var names []string
	e.rec["beta"].add(func() { names = slices.Clone(e.rec["beta"].toolNames) })
	if !slices.Equal(names, []string{"echo args"}) {
		t.Errorf("beta's tool calls: %v, want its original name once", names)
	}
	// Bad arguments are tool errors a model can act on.
	for args, want := range map[string]string{
		`{}`:                 "needs {\"name\"",
		`{"name":"nope__x"}`: "mcpvisor__search_tools",
		`{"name":"beta__echo_args","arguments":[1]}`: "must be an object",
	} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "mcpvisor__call_tool", Arguments: json.RawMessage(args)})
		if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, want) {
			t.Errorf("mcpvisor__call_tool %s: %v %v; want a tool error saying %q", args, err, res, want)
		}
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "mcpvisor__search_tools", Arguments: map[string]any{"query": " "}})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "query is empty") {
		t.Errorf("an empty query: %v %v; want a tool error", err, res)
	}
	if got := search("the"); len(got) != 0 {
		t.Errorf("a query of stop words found %v; want nothing", got)
	}
}
