//go:build unix

package bench_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// scaleOutConc is how many clients call at once in BenchmarkScaleOut.
const scaleOutConc = 32

// BenchmarkScaleOut compares one mcpvisor replica with two, both behind
// HAProxy running examples/deploy/haproxy/haproxy.cfg, in the same run:
// stateless (2026-07-28) tools/call throughput at c=32, and 2025 sessions
// opened per second (initialize, one call, close) at c=32. The sides
// alternate in chunks so drift hits both. On one machine both replicas
// share its cores, so the ratio measures what the load balancer and the
// second process cost, not added capacity; see docs/scale-out.md.
func BenchmarkScaleOut(b *testing.B) {
	cfg := func(addr string) string {
		return writeConfig(b, fmt.Sprintf("host {\n  listen = %q\n  drain = \"0s\"\n  log_level = \"warn\"\n}\nserver \"echo\" {\n  command = %q\n}\n", addr, bins["echo"]))
	}
	addrA, addrB := freeAddr(b), freeAddr(b)
	mcpvisorHTTP(b, cfg(addrA), addrA)
	mcpvisorHTTP(b, cfg(addrB), addrB)
	one, _ := testutil.StartHAProxy(b, []string{addrA}, time.Second)
	two, _ := testutil.StartHAProxy(b, []string{addrA, addrB}, time.Second)

	hc := httpClient(b)
	ctx := context.Background()
	clients := func(base string) []*mcp.ClientSession {
		var out []*mcp.ClientSession
		for range scaleOutConc {
			cs, err := benchClient().Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { cs.Close() })
			out = append(out, cs)
		}
		return out
	}
	oneClients, twoClients := clients(one), clients(two)

	// calls runs n calls over the clients and returns the time taken.
	calls := func(css []*mcp.ClientSession, n int) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		for _, cs := range css {
			wg.Go(func() {
				for range n / len(css) {
					if _, err := cs.CallTool(ctx, echoParams("echo__echo")); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	// sessions opens n 2025 sessions (initialize, one call, close) at
	// scaleOutConc at a time and returns the time taken.
	sessions := func(base string, n int) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		for range scaleOutConc {
			wg.Go(func() {
				for range n / scaleOutConc {
					cs, err := benchClient().Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: hc, MaxRetries: -1}, sessionOptions())
					if err != nil {
						b.Error(err)
						return
					}
					_, err = cs.CallTool(ctx, echoParams("echo__echo"))
					cs.Close()
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}

	const callChunk, sessionChunk = 1024, 128
	var oneCalls, twoCalls, oneSess, twoSess time.Duration
	b.ResetTimer()
	for range b.N {
		oneCalls += calls(oneClients, callChunk)
		twoCalls += calls(twoClients, callChunk)
		oneSess += sessions(one, sessionChunk)
		twoSess += sessions(two, sessionChunk)
	}
	b.StopTimer()
	n := float64(b.N)
	oneCPS, twoCPS := n*callChunk/oneCalls.Seconds(), n*callChunk/twoCalls.Seconds()
	oneSPS, twoSPS := n*sessionChunk/oneSess.Seconds(), n*sessionChunk/twoSess.Seconds()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(oneCPS, "one-calls/s")
	b.ReportMetric(twoCPS, "two-calls/s")
	b.ReportMetric(twoCPS/oneCPS, "calls-ratio")
	b.ReportMetric(oneSPS, "one-sessions/s")
	b.ReportMetric(twoSPS, "two-sessions/s")
	b.ReportMetric(twoSPS/oneSPS, "sessions-ratio")
	// Target: on one machine, a second replica behind the same HAProxy
	// costs little (≥ 0.9 of one replica's throughput); on separate
	// machines it would add capacity.
	met := twoCPS/oneCPS >= 0.9 && twoSPS/oneSPS >= 0.9
	b.Logf("%s: two replicas %.2f× the calls/s and %.2f× the sessions/s of one (target ≥ 0.9× on one machine)", verdict(met), twoCPS/oneCPS, twoSPS/oneSPS)
}
