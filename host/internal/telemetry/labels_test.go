package telemetry_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mcpvisor/mcpvisor/host/internal/registry"
	"github.com/mcpvisor/mcpvisor/host/internal/telemetry"
	"github.com/mcpvisor/mcpvisor/host/internal/upstream"
)

func namedTools(prefix string, n int) []*mcp.Tool {
	out := make([]*mcp.Tool, n)
	for i := range out {
		out[i] = &mcp.Tool{Name: fmt.Sprintf("%s%d", prefix, i)}
	}
	return out
}

func callAll(o *telemetry.Observer, server string, tools []*mcp.Tool) {
	for _, tool := range tools {
		c := &upstream.Call{Server: server, Method: "tools/call", Name: tool.Name, Start: time.Now(), Outcome: upstream.OutcomeOK}
		o.CallFinished(o.CallStarted(context.Background(), c), c)
	}
}

// TestCatalogChurnFreesSeries checks that the call series of tools that
// left a catalog are deleted: an upstream that renames its tools over and
// over keeps a bounded number of series.
func TestCatalogChurnFreesSeries(t *testing.T) {
	o := telemetry.New(telemetry.Options{Metrics: true})
	o.AddServer("s")
	for round := range 3 {
		tools := namedTools(fmt.Sprintf("r%d_", round), 100)
		o.SetCatalog("s", &registry.Catalog{Tools: tools})
		callAll(o, "s", tools)
		if n := testutil.CollectAndCount(o.Collector(), "mcpvisor_calls_total"); n != 100 {
			t.Fatalf("round %d: %d call series, want 100 (the current catalog's)", round, n)
		}
	}
	// A parked server (nil catalog) keeps its names and series.
	o.SetCatalog("s", nil)
	if n := testutil.CollectAndCount(o.Collector(), "mcpvisor_calls_total"); n != 100 {
		t.Errorf("after park: %d call series, want 100", n)
	}
}

// TestNameLabelsBoundedInAll checks the bound on label values across
// servers: past it, calls are counted under _other.
func TestNameLabelsBoundedInAll(t *testing.T) {
	o := telemetry.New(telemetry.Options{Metrics: true, MaxNamesPerServer: 30, MaxNames: 50})
	for _, s := range []string{"a", "b", "c"} {
		o.AddServer(s)
		tools := namedTools("t", 40)
		o.SetCatalog(s, &registry.Catalog{Tools: tools})
		callAll(o, s, tools)
	}
	// a: 30 names and _other; b: the 20 left and _other; c: _other only.
	if n := testutil.CollectAndCount(o.Collector(), "mcpvisor_calls_total"); n != 30+1+20+1+1 {
		t.Errorf("%d call series, want %d", n, 30+1+20+1+1)
	}
	// The bound being hit is a metric too.
	want := `
# HELP mcpvisor_tool_label_names_over_limit Tool and prompt names of the server's catalog past the metrics block's bounds, whose calls are counted under tool="_other".
# TYPE mcpvisor_tool_label_names_over_limit gauge
mcpvisor_tool_label_names_over_limit{server="a"} 10
mcpvisor_tool_label_names_over_limit{server="b"} 20
mcpvisor_tool_label_names_over_limit{server="c"} 40
`
	if err := testutil.CollectAndCompare(o.Collector(), strings.NewReader(want), "mcpvisor_tool_label_names_over_limit"); err != nil {
		t.Error(err)
	}
}

// TestUsageGauges checks the per-server memory and CPU series: present,
// with the replica label, for a server whose status measured its process
// group, and absent for one that has none.
func TestUsageGauges(t *testing.T) {
	status := func() []upstream.Status {
		return []upstream.Status{
			{Name: "stdio", State: upstream.StateReady, RSSBytes: 42 << 20, CPUSeconds: 1.5},
			{Name: "http", State: upstream.StateReady},
		}
	}
	o := telemetry.New(telemetry.Options{Metrics: true, Status: status, Replica: "r1"})
	want := `
# HELP mcpvisor_server_memory_bytes Resident memory of a running stdio server's process group (the server and everything it started); absent where it cannot be measured.
# TYPE mcpvisor_server_memory_bytes gauge
mcpvisor_server_memory_bytes{replica="r1",server="stdio"} 4.4040192e+07
# HELP mcpvisor_server_cpu_seconds_total User and system CPU time of a running stdio server's process group since its process started; starts again from zero when it is restarted.
# TYPE mcpvisor_server_cpu_seconds_total counter
mcpvisor_server_cpu_seconds_total{replica="r1",server="stdio"} 1.5
`
	if err := testutil.CollectAndCompare(o.Collector(), strings.NewReader(want), "mcpvisor_server_memory_bytes", "mcpvisor_server_cpu_seconds_total"); err != nil {
		t.Fatal(err)
	}
}
