//go:build unix

package bench_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// Targets (issue 12), each a ratio against a reference measured in the
// same run.
const (
	// maxStdioAddedRatio is the most a call through `mcpvisor run --stdio`
	// may add to the median latency of a direct call, as a multiple of
	// what a byte relay over pipes (refproxy -stdio) adds (c=1).
	maxStdioAddedRatio = 3.0
	// maxHTTPAddedRatio is the same for `mcpvisor run` over streamable
	// HTTP, as a multiple of what net/http's ReverseProxy (refproxy -http)
	// adds (c=1).
	maxHTTPAddedRatio = 1.1
	// minThroughputRatio is the least share of direct throughput the
	// proxied path must keep at concurrency 32.
	minThroughputRatio = 0.75
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

// row is one comparison: the same call made directly, through mcpvisor,
// and (where there is one) through a reference proxy in mcpvisor's place.
type row struct {
	direct, proxied caller
	// reference is the reference proxy's side; nil: none.
	reference caller
	// maxAddedRatio is the c=1 target: what mcpvisor adds to the median,
	// at most this multiple of what the reference adds.
	maxAddedRatio float64
	// pid is the mcpvisor process (0: mcpvisor runs in this process), whose
	// CPU time per proxied call is reported.
	pid int
}

// BenchmarkCallOverhead: a tools/call echo {"text":"x"} made directly to
// the echo upstream, the same call through mcpvisor and the same call
// through a reference proxy, in one run, with the downstream client on
// stdio and on streamable HTTP, at concurrency 1 and 32 (goroutines sharing
// one client session).
//
// Each side talks to its upstream the way the client talks to mcpvisor:
// stdio rows spawn `echo` directly versus `mcpvisor run --stdio` (upstream:
// a stdio `echo`) versus refproxy -stdio (a byte relay over pipes, no MCP);
// HTTP rows call an `echo -http` process directly versus `mcpvisor run`
// (HTTP on loopback) versus refproxy -http (net/http's ReverseProxy), both
// in front of that same process. The differences are therefore exactly the
// hop each adds.
//
// The library rows split that cost: the proxied side is Host.CallTool in
// the benchmark's own process (no downstream hop, stdio upstream), so what
// they add over direct is mcpvisor's own per-call work — registry lookup,
// supervision, recovery wrapper, argument encoding — without the second
// MCP round trip that any proxy pays.
func BenchmarkCallOverhead(b *testing.B) {
	setups := []struct {
		name  string
		setup func(*testing.B) row
	}{
		{"stdio", stdioRow},
		{"http", httpRow},
		{"library", libraryRow},
	}
	for _, s := range setups {
		for _, conc := range []int{1, overheadConcurrency} {
			b.Run(fmt.Sprintf("%s/c%d", s.name, conc), func(b *testing.B) {
				measureOverhead(b, conc, s.setup(b))
			})
		}
	}
}

// stdioRow: echo over stdio directly, `mcpvisor run --stdio` (upstream:
// echo over stdio), and refproxy -stdio -- echo.
func stdioRow(b *testing.B) row {
	r := row{maxAddedRatio: maxStdioAddedRatio}
	r.direct = sessionCaller(connect(b, &mcp.CommandTransport{Command: exec.Command(bins["echo"])}), "echo")
	path := writeConfig(b, fmt.Sprintf(`host {
  log_level = "warn"
}
server "echo" {
  command = %q
}
`, bins["echo"]))
	var cs *mcp.ClientSession
	cs, r.pid = mcpvisorStdio(b, path)
	r.proxied = sessionCaller(cs, "echo__echo")
	relay := exec.Command(bins["refproxy"], "-stdio", "--", bins["echo"])
	r.reference = sessionCaller(connect(b, &mcp.CommandTransport{Command: relay}), "echo")
	return r
}

// httpRow: one `echo -http` process, called directly, through `mcpvisor
// run` on a loopback port, and through refproxy -http (net/http's
// ReverseProxy).
func httpRow(b *testing.B) row {
	r := row{maxAddedRatio: maxHTTPAddedRatio}
	up := testutil.StartServer(b, bins["echo"], "-http", "127.0.0.1:0")
	hc := httpClient(b)
	r.direct = sessionCaller(connect(b, &mcp.StreamableClientTransport{Endpoint: up.URL, HTTPClient: hc}), "echo")
	addr := freeAddr(b)
	path := writeConfig(b, fmt.Sprintf(`host {
  listen    = %q
  log_level = "warn"
}
server "echo" {
  url = %q
}
`, addr, up.URL))
	r.pid = mcpvisorHTTP(b, path, addr)
	r.proxied = sessionCaller(connect(b, &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: hc}), "echo__echo")
	ref := testutil.StartServer(b, bins["refproxy"], "-http", "127.0.0.1:0", "-to", strings.TrimSuffix(up.URL, "/mcp"))
	r.reference = sessionCaller(connect(b, &mcp.StreamableClientTransport{Endpoint: ref.URL + "/mcp", HTTPClient: hc}), "echo")
	return r
}

// libraryRow: echo over stdio directly, and a host (the library, in this
// process) supervising echo over stdio.
func libraryRow(b *testing.B) row {
	var r row
	r.direct = sessionCaller(connect(b, &mcp.CommandTransport{Command: exec.Command(bins["echo"])}), "echo")
	h := libraryHost(b, fmt.Sprintf(`server "echo" {
  command = %q
}
`, bins["echo"]))
	args := map[string]any{"text": "x"}
	r.proxied = func(ctx context.Context) error {
		res, err := h.CallTool(ctx, "echo__echo", args)
		if err == nil && res.IsError {
			err = fmt.Errorf("tool error: %v", res.Content)
		}
		return err
	}
	return r
}

// measureOverhead times the row's sides in alternation and reports per
// side µs/op (wall time per call: mean latency at c=1, inverse throughput
// at c=32) and p50, the p50 each proxy adds, the throughput ratios
// proxied/direct, and mcpvisor's CPU time per proxied call. ns/op is
// suppressed: one iteration is a chunk per side, which says nothing by
// itself.
func measureOverhead(b *testing.B, conc int, r row) {
	ctx := context.Background()
	callers := []caller{r.direct, r.proxied}
	if r.reference != nil {
		callers = append(callers, r.reference)
	}
	// Warm every path: connections, buffers, the first-call costs of the
	// SDK and the registry.
	for _, c := range callers {
		if _, _, err := runChunk(ctx, c, conc, 10*conc); err != nil {
			b.Fatal(err)
		}
	}

	chunk := 1
	if conc > 1 {
		chunk = conc * chunkPerWorker
	}
	sides := make([]struct {
		wall  time.Duration
		calls int
		lat   []time.Duration
	}, len(callers))
	cpu0 := processCPU(b, r.pid)
	i := 0
	for b.Loop() {
		// Rotate which side goes first, so none always follows another's
		// GC or scheduling debris.
		for k := range callers {
			side := (i + k) % len(callers)
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
	cpu := processCPU(b, r.pid) - cpu0

	d, p := sides[0], sides[1]
	perOp := func(i int) time.Duration { return sides[i].wall / time.Duration(sides[i].calls) }
	throughput := func(i int) float64 {
		return (float64(sides[i].calls) / sides[i].wall.Seconds()) / (float64(d.calls) / d.wall.Seconds())
	}
	directP50, proxiedP50 := quantile(d.lat, 0.5), quantile(p.lat, 0.5)
	added := proxiedP50 - directP50
	ratio := throughput(1)

	b.ReportMetric(0, "ns/op")
	b.ReportMetric(micros(perOp(0)), "direct-µs/op")
	b.ReportMetric(micros(perOp(1)), "proxied-µs/op")
	b.ReportMetric(micros(directP50), "direct-p50-µs")
	b.ReportMetric(micros(proxiedP50), "proxied-p50-µs")
	b.ReportMetric(micros(added), "added-p50-µs")
	b.ReportMetric(ratio, "throughput-ratio")
	if r.pid > 0 {
		b.ReportMetric(micros(cpu/time.Duration(p.calls)), "mcpvisor-cpu-µs/call")
	}
	var refAdded time.Duration
	if r.reference != nil {
		refAdded = quantile(sides[2].lat, 0.5) - directP50
		b.ReportMetric(micros(refAdded), "ref-added-p50-µs")
		b.ReportMetric(throughput(2), "ref-throughput-ratio")
	}

	switch {
	case conc == 1 && r.reference != nil:
		limit := time.Duration(r.maxAddedRatio * float64(refAdded))
		b.Logf("%s: added p50 %.1f µs, %.2f× the reference proxy's %.1f µs (target ≤ %.1f×); %d calls per side",
			verdict(added <= limit), micros(added), float64(added)/float64(refAdded), micros(refAdded), r.maxAddedRatio, d.calls)
	case conc == 1:
		b.Logf("added p50 %.1f µs (no reference, no target); %d calls per side", micros(added), d.calls)
	default:
		b.Logf("%s: throughput through mcpvisor %.0f%% of direct at c=%d (target ≥ %.0f%%); added p50 %.1f µs; %d calls per side",
			verdict(ratio >= minThroughputRatio), 100*ratio, conc, 100*minThroughputRatio, micros(added), d.calls)
	}
}

// processCPU is the user plus system CPU time process pid has used so far
// (0 for pid 0), from /proc/PID/stat; its resolution is the kernel's clock
// tick (10 ms), so it is only read around many calls.
func processCPU(b *testing.B, pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatalf("reading mcpvisor's CPU time: %v", err)
	}
	// The command name (field 2) is in parentheses and may hold spaces;
	// utime and stime are fields 14 and 15.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	const ticksPerSecond = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticksPerSecond
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
