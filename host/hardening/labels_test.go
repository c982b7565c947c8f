//go:build unix

package hardening_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const (
	// churnTools is how many tools the churning upstream lists at a time;
	// churnRounds how many times it replaces them all with new names.
	churnTools  = 100
	churnRounds = 3
)

// metricsText returns mcpvisor's /metrics.
func (mv *mcpvisor) metricsText(t *testing.T) string {
	t.Helper()
	hc := newHTTPClient(t, healthzTimeout)
	resp, err := hc.Get("http://" + mv.addr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	return string(body)
}

// callSeries counts the mcpvisor_calls_total series of server in
// mcpvisor's /metrics.
func (mv *mcpvisor) callSeries(t *testing.T, server string) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(mv.metricsText(t), "\n") {
		if strings.HasPrefix(line, "mcpvisor_calls_total{") && strings.Contains(line, `server="`+server+`"`) {
			n++
		}
	}
	return n
}

// TestCatalogChurnFreesMetricSeries runs an upstream that replaces all
// its tools with new names, over and over (each change a list_changed):
// the call series of tools that left its catalog are deleted, so
// mcpvisor's /metrics holds the current catalog's series only.
func TestCatalogChurnFreesMetricSeries(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "churn", Version: "1"}, nil)
	addRound := func(round int) []string {
		var names []string
		for i := range churnTools {
			name := fmt.Sprintf("r%d_t%03d", round, i)
			names = append(names, name)
			srv.AddTool(&mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object"}},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil
				})
		}
		return names
	}
	names := addRound(0)
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)

	mv := startMcpvisor(t, fmt.Sprintf("server \"churn\" {\n  url = %s\n}\n", hclString(hs.URL)))
	cs := connectClient(t, mv)
	for round := range churnRounds {
		if round > 0 {
			srv.RemoveTools(names...)
			names = addRound(round)
		}
		waitTool(t, cs, "churn__"+names[len(names)-1])
		for _, name := range names {
			ctx, cancel := context.WithTimeout(context.Background(), callBound)
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "churn__" + name, Arguments: map[string]any{}})
			cancel()
			if err != nil || res.IsError {
				t.Fatalf("round %d: calling churn__%s: %v %+v", round, name, err, res)
			}
		}
		n := mv.callSeries(t, "churn")
		t.Logf("round %d: %d mcpvisor_calls_total series for the churning server", round, n)
		if n != churnTools {
			t.Errorf("round %d: %d mcpvisor_calls_total series, want %d (one per tool it lists now)", round, n, churnTools)
		}
	}
	mv.alive(t)
}

// limitHits reads mcpvisor_limit_hits_total{limit="name"} from mcpvisor's
// /metrics: how often that bound refused something (docs/security.md).
func (mv *mcpvisor) limitHits(t *testing.T, name string) int {
	t.Helper()
	prefix := `mcpvisor_limit_hits_total{limit="` + name + `"`
	for _, line := range strings.Split(mv.metricsText(t), "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		f := strings.Fields(line)
		n, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("/metrics: %q: %v", line, err)
		}
		return int(n)
	}
	t.Fatalf("/metrics has no %s series", prefix)
	return 0
}
