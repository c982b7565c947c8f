//go:build unix

package bench_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
	"github.com/mcpvisor/mcpvisor/host/internal/wire"
)

// allocConcurrency is the number of goroutines sharing one client session
// in BenchmarkCallAllocation (issue 25 measured at c=4).
const allocConcurrency = 4

// allocChunk is the number of calls one iteration of
// BenchmarkCallAllocation makes; -benchtime=10x is the 3,000 calls.
const allocChunk = 300

// BenchmarkCallAllocation: what mcpvisor allocates per proxied call, as
// the mcpvisor process itself counts it (go_memstats_alloc_bytes_total on
// its /metrics, read before and after the calls), beside its CPU time per
// call. A downstream HTTP client calls echo__echo at c=4 through `mcpvisor
// run`, for each upstream transport (echo over stdio, echo -http) and each
// kind of downstream client: a session on 2025-11-25, and the stateless
// 2026-07-28, where every request carries its own protocol version.
func BenchmarkCallAllocation(b *testing.B) {
	for _, up := range []string{"stdio", "http"} {
		for _, version := range []string{wire.DefaultUpstream, wire.Stateless} {
			b.Run(up+"/"+version, func(b *testing.B) {
				measureAllocation(b, up, version)
			})
		}
	}
}

func measureAllocation(b *testing.B, up, version string) {
	server := fmt.Sprintf("command = %q", bins["echo"])
	if up == "http" {
		server = fmt.Sprintf("url = %q", testutil.StartServer(b, bins["echo"], "-http", "127.0.0.1:0").URL)
	}
	addr := freeAddr(b)
	path := writeConfig(b, fmt.Sprintf(`host {
  listen    = %q
  log_level = "warn"
}
server "echo" {
  %s
}
`, addr, server))
	pid := mcpvisorHTTP(b, path, addr)
	hc := httpClient(b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := benchClient().Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: hc},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		b.Fatalf("connecting to mcpvisor on %s: %v", version, err)
	}
	b.Cleanup(func() { cs.Close() })
	call := sessionCaller(cs, "echo__echo")

	// Warm the path: connections, buffers, the first-call costs.
	if _, _, err := runChunk(context.Background(), call, allocConcurrency, 10*allocConcurrency); err != nil {
		b.Fatal(err)
	}
	alloc0, cpu0 := allocatedBytes(b, hc, addr), processCPU(b, pid)
	calls := 0
	for b.Loop() {
		if _, _, err := runChunk(context.Background(), call, allocConcurrency, allocChunk); err != nil {
			b.Fatal(err)
		}
		calls += allocChunk
	}
	cpu, alloc := processCPU(b, pid)-cpu0, allocatedBytes(b, hc, addr)-alloc0

	b.ReportMetric(0, "ns/op")
	b.ReportMetric(alloc/float64(calls)/1000, "mcpvisor-KB/call")
	b.ReportMetric(micros(cpu/time.Duration(calls)), "mcpvisor-cpu-µs/call")
	b.Logf("%s upstream, %s client: %.0f KB allocated and %.0f µs CPU per call in mcpvisor over %d calls at c=%d",
		up, version, alloc/float64(calls)/1000, micros(cpu/time.Duration(calls)), calls, allocConcurrency)
}

// allocatedBytes is go_memstats_alloc_bytes_total from mcpvisor's /metrics:
// every byte the process has allocated on its heap so far.
func allocatedBytes(b *testing.B, hc *http.Client, addr string) float64 {
	b.Helper()
	resp, err := hc.Get("http://" + addr + "/metrics")
	if err != nil {
		b.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		// The series carries the replica label: go_memstats_alloc_bytes_total{replica="…"} N
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "go_memstats_alloc_bytes_total"); ok && (rest[0] == ' ' || rest[0] == '{') {
			v := line[strings.LastIndexByte(line, ' ')+1:]
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("/metrics: go_memstats_alloc_bytes_total %q: %v", v, err)
			}
			return f
		}
	}
	b.Fatalf("/metrics has no go_memstats_alloc_bytes_total (%v)", sc.Err())
	return 0
}
