package telemetry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mcpvisor/mcpvisor/host/internal/registry"
	"github.com/mcpvisor/mcpvisor/host/internal/telemetry"
	"github.com/mcpvisor/mcpvisor/host/internal/upstream"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

func newObserver() *telemetry.Observer {
	o := telemetry.New(telemetry.Options{Metrics: true})
	o.AddServer("echo")
	o.SetCatalog("echo", &registry.Catalog{Tools: []*mcp.Tool{{Name: "echo"}}})
	return o
}

// A name the catalog does not offer is counted as _other, and a parked
// catalog (nil) keeps the names it had.
func TestToolLabelBounded(t *testing.T) {
	o := newObserver()
	o.SetCatalog("echo", nil)
	for _, name := range []string{"echo", "made-up-1", "made-up-2"} {
		c := &upstream.Call{Server: "echo", Method: "tools/call", Name: name, Start: time.Now(), Outcome: upstream.OutcomeOK}
		o.CallFinished(o.CallStarted(context.Background(), c), c)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(o.Collector())
	if n := testutil.CollectAndCount(o.Collector(), "mcpvisor_calls_total"); n != 2 {
		t.Errorf("%d call series, want 2 (echo and _other)", n)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
	st := o.Stats("echo")
	if st.Calls != 3 || st.Errors != 0 {
		t.Errorf("stats %+v", st)
	}
}

// Stats count errors, not tool errors, and keep the last error redacted.
func TestStats(t *testing.T) {
	o := newObserver()
	for _, oc := range []upstream.Outcome{upstream.OutcomeToolError, upstream.OutcomeCrashedNotReplayed, upstream.OutcomeReplayed} {
		c := &upstream.Call{Server: "echo", Method: "tools/call", Name: "echo", Start: time.Now(), Outcome: oc}
		if oc == upstream.OutcomeCrashedNotReplayed {
			c.Err, c.Class = errors.New("died; Authorization: Bearer s3cr3t-value"), recovery.ProcessDied
		}
		o.CallFinished(o.CallStarted(context.Background(), c), c)
	}
	st := o.Stats("echo")
	if st.Calls != 3 || st.Errors != 1 || st.LastError == "" || st.LastErrorAt.IsZero() {
		t.Fatalf("stats %+v", st)
	}
	if want := "died; Authorization: [redacted]"; st.LastError != want {
		t.Errorf("last error %q, want %q", st.LastError, want)
	}
}

// BenchmarkObserveCall is what metrics add to one call: the two hooks
// the supervisor calls around it.
func BenchmarkObserveCall(b *testing.B) {
	o := newObserver()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		c := &upstream.Call{Server: "echo", Method: "tools/call", Name: "echo", Start: time.Now(), Outcome: upstream.OutcomeOK,
			Attempts: []upstream.Attempt{{Generation: 1}}}
		o.CallFinished(o.CallStarted(ctx, c), c)
	}
}
