package bench_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// Targets of issue 2 item 9.
const (
	// maxAddedP50 is the most a call through mcpvisor may add to the
	// median latency of the same call made directly (loopback, c=1).
	maxAddedP50 = 100 * time.Microsecond
	// minThroughputRatio is the least share of direct throughput the
	// proxied path must keep at concurrency 32.
	minThroughputRatio = 0.70
)

// overheadConcurrency is the number of goroutines sharing one client
// session in the parallel rows.
const overheadConcurrency = 32

// chunkPerWorker is how many calls each goroutine makes per timed chunk in
// the parallel rows. Chunks alternate between the direct and the proxied
// side, so drift (CPU frequency, GC, a noisy neighbour) hits both; a chunk
// is long enough that its ragged end, when some goroutines are done and
// others are not, is a few percent of it.
const chunkPerWorker = 8

// caller makes one call on one side of a comparison.
type caller func(context.Context) error

// sessionCaller calls the echo tool by name over cs: "echo" directly,
// "echo__echo" through mcpvisor.
func sessionCaller(cs *mcp.ClientSession, tool string) caller {
	params := echoParams(tool)
	return func(ctx context.Context) error {
		res, err := cs.CallTool(ctx, params)
		if err == nil && res.IsError {
			err = fmt.Errorf("tool error: %v", res.Content)
		}
		return err
	}
}

// BenchmarkCallOverhead is issue 2 item 9: a tools/call echo {"text":"x"}
// made directly to the echo upstream and the same call through mcpvisor,
// in one run, with the downstream client on stdio and on streamable HTTP,
// at concurrency 1 and 32 (goroutines sharing one client session).
//
// Each side talks to its upstream the way the client talks to mcpvisor:
// stdio rows spawn `echo` directly versus `mcpvisor run --stdio` whose
// upstream is a stdio `echo`; HTTP rows call an `echo -http` process
// directly versus `mcpvisor run` (HTTP on loopback) whose upstream is that
// same process. The difference is therefore exactly the hop mcpvisor adds.
//
// The library rows split that cost: the proxied side is Host.CallTool in
// the benchmark's own process (no downstream hop, stdio upstream), so what
// they add over direct is mcpvisor's own per-call work — registry lookup,
// supervision, recovery wrapper, argument encoding — without the second
// MCP round trip that any proxy pays.
func BenchmarkCallOverhead(b *testing.B) {
	setups := []struct {
		name      string
		setup     func(*testing.B) (direct, proxied caller)
		reference bool
	}{
		{"stdio", stdioPair, false},
		{"http", httpPair, false},
		{"library", libraryPair, false},
		{"refproxy-stdio", refStdioPair, true},
		{"refproxy-http", refHTTPPair, true},
		{"refproxy-tcp", refTCPPair, true},
	}
	for _, s := range setups {
		for _, conc := range []int{1, overheadConcurrency} {
			b.Run(fmt.Sprintf("%s/c%d", s.name, conc), func(b *testing.B) {
				direct, proxied := s.setup(b)
				measureOverhead(b, conc, direct, proxied, s.reference)
			})
		}
	}
}

// refStdioPair is stdioPair with refproxy -stdio (a byte relay, no MCP) in
// mcpvisor's place: the least a second process on the path adds here.
func refStdioPair(b *testing.B) (direct, proxied caller) {
	direct = sessionCaller(connect(b, &mcp.CommandTransport{Command: exec.Command(bins["echo"])}), "echo")
	relay := exec.Command(bins["refproxy"], "-stdio", "--", bins["echo"])
	proxied = sessionCaller(connect(b, &mcp.CommandTransport{Command: relay}), "echo")
	return direct, proxied
}

// refHTTPPair is httpPair with refproxy -http (net/http's reverse proxy,
// no MCP) in mcpvisor's place.
func refHTTPPair(b *testing.B) (direct, proxied caller) {
	return refHTTPLike(b)
}

// refTCPPair is httpPair with refproxy -http -tcp (a byte relay per
// connection, no HTTP, no MCP) in mcpvisor's place: the least a second
// process on a TCP path adds here.
func refTCPPair(b *testing.B) (direct, proxied caller) {
	return refHTTPLike(b, "-tcp")
}

func refHTTPLike(b *testing.B, flags ...string) (direct, proxied caller) {
	up := testutil.StartServer(b, bins["echo"], "-http", "127.0.0.1:0")
	hc := httpClient(b)
	direct = sessionCaller(connect(b, &mcp.StreamableClientTransport{Endpoint: up.URL, HTTPClient: hc}), "echo")
	base := strings.TrimSuffix(up.URL, "/mcp")
	args := append([]string{"-http", "127.0.0.1:0", "-to", base}, flags...)
	ref := testutil.StartServer(b, bins["refproxy"], args...)
	proxied = sessionCaller(connect(b, &mcp.StreamableClientTransport{Endpoint: ref.URL + "/mcp", HTTPClient: hc}), "echo")
	return direct, proxied
}

// stdioPair starts echo over stdio for the direct side and `mcpvisor run
// --stdio` (upstream: echo over stdio) for the proxied side.
func stdioPair(b *testing.B) (direct, proxied caller) {
	direct = sessionCaller(connect(b, &mcp.CommandTransport{Command: exec.Command(bins["echo"])}), "echo")
	path := writeConfig(b, fmt.Sprintf(`host {
  log_level = "warn"
}
server "echo" {
  command = %q
}
`, bins["echo"]))
	proxied = sessionCaller(mcpvisorStdio(b, path), "echo__echo")
	return direct, proxied
}

// httpPair starts one `echo -http` process; the direct side calls it, and
// `mcpvisor run` on a loopback port, whose upstream it is, serves the
// proxied side.
func httpPair(b *testing.B) (direct, proxied caller) {
	up := testutil.StartServer(b, bins["echo"], "-http", "127.0.0.1:0")
	hc := httpClient(b)
	direct = sessionCaller(connect(b, &mcp.StreamableClientTransport{Endpoint: up.URL, HTTPClient: hc}), "echo")
	addr := freeAddr(b)
	path := writeConfig(b, fmt.Sprintf(`host {
  listen    = %q
  log_level = "warn"
}
server "echo" {
  url = %q
}
`, addr, up.URL))
	mcpvisorHTTP(b, path, addr)
	proxied = sessionCaller(connect(b, &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: hc}), "echo__echo")
	return direct, proxied
}

// libraryPair starts echo over stdio for the direct side and a host (the
// library, in this process) supervising echo over stdio for the proxied
// side.
func libraryPair(b *testing.B) (direct, proxied caller) {
	direct = sessionCaller(connect(b, &mcp.CommandTransport{Command: exec.Command(bins["echo"])}), "echo")
	h := libraryHost(b, fmt.Sprintf(`server "echo" {
  command = %q
}
`, bins["echo"]))
	args := map[string]any{"text": "x"}
	proxied = func(ctx context.Context) error {
		res, err := h.CallTool(ctx, "echo__echo", args)
		if err == nil && res.IsError {
			err = fmt.Errorf("tool error: %v", res.Content)
		}
		return err
	}
	return direct, proxied
}

// measureOverhead times direct and proxied calls in alternation and
// reports per-side µs/op (wall time per call: mean latency at c=1, inverse
// throughput at c=32), per-side p50, the added p50 and the throughput
// ratio proxied/direct. ns/op is suppressed: one iteration is a pair of
// chunks, which says nothing by itself.
//
// A reference row (reference true) has a bare relay in mcpvisor's place: it
// has no target and says so.
func measureOverhead(b *testing.B, conc int, direct, proxied caller, reference bool) {
	ctx := context.Background()
	// Warm both paths: connections, buffers, the first-call costs of the
	// SDK and the registry.
	for _, c := range []caller{direct, proxied} {
		if _, _, err := runChunk(ctx, c, conc, 10*conc); err != nil {
			b.Fatal(err)
		}
	}

	chunk := 1
	if conc > 1 {
		chunk = conc * chunkPerWorker
	}
	var sides [2]struct {
		wall  time.Duration
		calls int
		lat   []time.Duration
	}
	callers := [2]caller{direct, proxied}
	i := 0
	for b.Loop() {
		// Alternate which side goes first, so neither always follows the
		// other's GC or scheduling debris.
		for k := range 2 {
			side := (i + k) % 2
			wall, lat, err := runChunk(ctx, callers[side], conc, chunk)
			if err != nil {
				b.Fatal(err)
			}
			sides[side].wall += wall
			sides[side].calls += chunk
			sides[side].lat = append(sides[side].lat, lat...)
		}
		i++
	}

	d, p := sides[0], sides[1]
	directOp := d.wall / time.Duration(d.calls)
	proxiedOp := p.wall / time.Duration(p.calls)
	directP50, proxiedP50 := quantile(d.lat, 0.5), quantile(p.lat, 0.5)
	added := proxiedP50 - directP50
	ratio := (float64(p.calls) / p.wall.Seconds()) / (float64(d.calls) / d.wall.Seconds())

	b.ReportMetric(0, "ns/op")
	b.ReportMetric(micros(directOp), "direct-µs/op")
	b.ReportMetric(micros(proxiedOp), "proxied-µs/op")
	b.ReportMetric(micros(directP50), "direct-p50-µs")
	b.ReportMetric(micros(proxiedP50), "proxied-p50-µs")
	b.ReportMetric(micros(added), "added-p50-µs")
	b.ReportMetric(ratio, "throughput-ratio")

	switch {
	case reference && conc == 1:
		b.Logf("reference (no target): a bare relay adds %.1f µs p50; %d calls per side", micros(added), d.calls)
	case reference:
		b.Logf("reference (no target): throughput through a bare relay %.0f%% of direct at c=%d; %d calls per side", 100*ratio, conc, d.calls)
	case conc == 1:
		b.Logf("%s: added p50 %.1f µs (target ≤ %d µs); %d calls per side",
			verdict(added <= maxAddedP50), micros(added), maxAddedP50.Microseconds(), d.calls)
	default:
		b.Logf("%s: throughput through mcpvisor %.0f%% of direct at c=%d (target ≥ %.0f%%); added p50 %.1f µs; %d calls per side",
			verdict(ratio >= minThroughputRatio), 100*ratio, conc, 100*minThroughputRatio, micros(added), d.calls)
	}
}

// runChunk makes n calls with conc goroutines sharing c's session and
// returns the wall time and every call's latency.
func runChunk(ctx context.Context, c caller, conc, n int) (time.Duration, []time.Duration, error) {
	lat := make([]time.Duration, n)
	if conc == 1 {
		start := time.Now()
		for i := range n {
			t0 := time.Now()
			if err := c(ctx); err != nil {
				return 0, nil, err
			}
			lat[i] = time.Since(t0)
		}
		return time.Since(start), lat, nil
	}
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				if err := c(ctx); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	return time.Since(start), lat, firstErr
}
