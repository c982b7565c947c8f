//go:build unix

package hardening_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// clashingNames are upstream tool names that sanitise alike: the first
// three to "a_b", the last two to "__".
var clashingNames = []string{"a_b", "a/b", "a b", "工具", "数据"}

// exposedRoutes lists mcpvisor's tools, calls each, and returns which
// upstream tool (its original name, as the tool answers it) each exposed
// name reaches.
func exposedRoutes(t *testing.T, mv *mcpvisor) map[string]string {
	t.Helper()
	cs := connectClient(t, mv)
	waitTool(t, cs, "s__a_b")
	ctx, cancel := context.WithTimeout(context.Background(), callBound)
	defer cancel()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	routes := map[string]string{}
	for _, tool := range res.Tools {
		out, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool.Name, Arguments: map[string]any{}})
		if err != nil || out.IsError || len(out.Content) != 1 {
			t.Fatalf("calling %s: %v %+v", tool.Name, err, out)
		}
		routes[tool.Name] = out.Content[0].(*mcp.TextContent).Text
	}
	return routes
}

// TestClashingNamesStayReachable runs an upstream whose tool names clash
// once sanitised: every one is listed under its own name, a call to that
// name reaches that tool, the clash is logged with both original names,
// and a restarted mcpvisor exposes the same names.
func TestClashingNamesStayReachable(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "clash", Version: "1"}, nil)
	for _, name := range clashingNames {
		srv.AddTool(&mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil
			})
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	block := fmt.Sprintf("server \"s\" {\n  url = %s\n}\n", hclString(hs.URL))

	mv := startMcpvisor(t, block)
	routes := exposedRoutes(t, mv)
	t.Logf("exposed → upstream: %v", routes)
	reached := slices.Sorted(maps.Values(routes))
	if want := slices.Sorted(slices.Values(clashingNames)); !slices.Equal(reached, want) {
		t.Errorf("the exposed tools reach %q, want each of %q exactly once", reached, want)
	}
	if routes["s__a_b"] != "a_b" {
		t.Errorf("s__a_b reaches %q, want a_b (the name that sanitises to itself keeps it)", routes["s__a_b"])
	}
	log := mv.stderr.String()
	if !strings.Contains(log, "names clash once sanitised") || !strings.Contains(log, "a/b") || !strings.Contains(log, "数据") {
		t.Errorf("no warning naming the clashing originals in the log")
	}

	// A restart (a second mcpvisor on the same config) exposes the same
	// names.
	again := exposedRoutes(t, startMcpvisor(t, block))
	if d := cmp.Diff(routes, again); d != "" {
		t.Errorf("names differ after a restart (-first +second):\n%s", d)
	}
}
