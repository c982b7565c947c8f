//go:build unix

package bench_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// manyServers is the size of the large host in BenchmarkStartup.
const manyServers = 16

// BenchmarkStartup is docs/design.md §12's startup row: time from Start to every
// server ready, for a host with one echo server and for one with 16, in
// alternation. Servers connect in parallel, so the ratio should be far
// below 16; on a machine with few cores, 16 processes starting at once
// still share the CPUs, so expect about 16/cores there. Medians are
// reported.
func BenchmarkStartup(b *testing.B) {
	one, many := startupConfig(1), startupConfig(manyServers)
	var tOne, tMany []time.Duration
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			tOne = append(tOne, timeStartup(b, one))
			tMany = append(tMany, timeStartup(b, many))
		} else {
			tMany = append(tMany, timeStartup(b, many))
			tOne = append(tOne, timeStartup(b, one))
		}
		i++
	}
	o, m := quantile(tOne, 0.5), quantile(tMany, 0.5)
	ratio := float64(m) / float64(o)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(millis(o), "1-server-ms")
	b.ReportMetric(millis(m), fmt.Sprintf("%d-servers-ms", manyServers))
	b.ReportMetric(ratio, fmt.Sprintf("ratio-%d:1", manyServers))
	// Starting a process is mostly CPU, so on n CPUs the floor is about
	// 16/n; serial connects would show about 16.
	b.Logf("%d servers ready in %.1f ms, one in %.1f ms: %.1f× (serial connects ≈ %d×, CPU-bound floor on %d CPUs ≈ %.0f×); %d starts each",
		manyServers, millis(m), millis(o), ratio, manyServers, runtime.NumCPU(),
		float64(manyServers)/float64(min(runtime.NumCPU(), manyServers)), len(tOne))
}

// startupConfig is a host of n echo servers over stdio.
func startupConfig(n int) string {
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, "server \"echo%d\" {\n  command = %q\n}\n", i+1, bins["echo"])
	}
	return sb.String()
}

// timeStartup builds a host from src and times Start until every server is
// settled, then requires them all ready and closes the host (not timed).
func timeStartup(b *testing.B, src string) time.Duration {
	b.Helper()
	h := newHost(b, src)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t0 := time.Now()
	h.Start(ctx)
	if err := h.WaitSettled(ctx); err != nil {
		b.Fatal(err)
	}
	d := time.Since(t0)
	requireReady(b, h)
	closeHost(b, h)
	return d
}
