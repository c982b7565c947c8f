package bench_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkSandboxStart is issue #26's start-time row (docs/sandbox.md):
// Start until the echo server is ready (spawn → initialize done) for the
// echo server unsandboxed, under Landlock alone, and under Landlock with
// network = "none" (a network namespace of its own), in alternation.
// The sandboxed starts go through the launcher: a re-exec of this binary
// that applies the rules and execs echo in place. Medians are reported,
// as ratios and added milliseconds against the plain start of the same
// run. Target: ≤ 1.2× or ≤ +20 ms.
func BenchmarkSandboxStart(b *testing.B) {
	dir := filepath.Dir(bins["echo"])
	plain := fmt.Sprintf("server \"echo\" {\n  command = %q\n}\n", bins["echo"])
	landlock := fmt.Sprintf("server \"echo\" {\n  command = %q\n  sandbox {\n    read = [%q]\n  }\n}\n", bins["echo"], dir)
	netns := fmt.Sprintf("server \"echo\" {\n  command = %q\n  sandbox {\n    read = [%q]\n    network = \"none\"\n  }\n}\n", bins["echo"], dir)
	srcs := []string{plain, landlock, netns}
	times := make([][]time.Duration, len(srcs))
	i := 0
	for b.Loop() {
		for k := range srcs {
			j := (k + i) % len(srcs) // rotate which goes first
			times[j] = append(times[j], timeStartup(b, srcs[j]))
		}
		i++
	}
	p, l, n := quantile(times[0], 0.5), quantile(times[1], 0.5), quantile(times[2], 0.5)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(millis(p), "plain-ms")
	b.ReportMetric(millis(l), "landlock-ms")
	b.ReportMetric(millis(n), "landlock-netns-ms")
	b.ReportMetric(float64(l)/float64(p), "landlock-ratio")
	b.ReportMetric(float64(n)/float64(p), "landlock-netns-ratio")
	b.ReportMetric(millis(l-p), "landlock-added-ms")
	b.ReportMetric(millis(n-p), "landlock-netns-added-ms")
	met := func(d time.Duration) bool { return float64(d) <= 1.2*float64(p) || d-p <= 20*time.Millisecond }
	b.Logf("%s: start of echo plain %.1f ms, under Landlock %.1f ms (%.2f×, %+.1f ms), with network none %.1f ms (%.2f×, %+.1f ms); target ≤ 1.2× or ≤ +20 ms; %d starts each",
		verdict(met(l) && met(n)), millis(p), millis(l), float64(l)/float64(p), millis(l-p),
		millis(n), float64(n)/float64(p), millis(n-p), len(times[0]))
}
