package bench_test

import (
	"context"
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
// in mount and pid namespaces of its own that builds the server's view
// (binds of the granted paths, a /proc, a pivot), applies the rules and
// starts echo under itself as the namespace's init (docs/design.md
// §18.1). Medians are reported, as ratios and added milliseconds against
// the plain start of the same run. Target (issue #32): ≤ +15 ms.
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
	met := func(d time.Duration) bool { return d-p <= 15*time.Millisecond }
	b.Logf("%s: start of echo plain %.1f ms, under Landlock %.1f ms (%.2f×, %+.1f ms), with network none %.1f ms (%.2f×, %+.1f ms); target ≤ +15 ms; %d starts each",
		verdict(met(l) && met(n)), millis(p), millis(l), float64(l)/float64(p), millis(l-p),
		millis(n), float64(n)/float64(p), millis(n-p), len(times[0]))
}

// BenchmarkSandboxCall is issue #26's "call overhead unchanged" row: one
// host with two echo servers, one plain and one contained (Landlock,
// network = "none" and a limits block, so it runs in its own cgroups
// with rlimits), called in alternation through Host.CallTool. The
// containment is all set up before the server's first instruction; a call
// only crosses the same pipes, so the two p50s should match within noise.
// Reported: both p50s and their ratio. Target (issue #32): ratio ≤ 1.05.
func BenchmarkSandboxCall(b *testing.B) {
	dir := filepath.Dir(bins["echo"])
	src := fmt.Sprintf("server \"plain\" {\n  command = %q\n}\n"+
		"server \"boxed\" {\n  command = %q\n  sandbox {\n    read = [%q]\n    network = \"none\"\n  }\n"+
		"  limits {\n    memory = \"256MiB\"\n    processes = 64\n    open_files = 256\n  }\n}\n",
		bins["echo"], bins["echo"], dir)
	h := newHost(b, src)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h.Start(ctx)
	if err := h.WaitSettled(ctx); err != nil {
		b.Fatal(err)
	}
	requireReady(b, h)
	b.Cleanup(func() { closeHost(b, h) })

	call := func(name string) time.Duration {
		t0 := time.Now()
		res, err := h.CallTool(ctx, name, map[string]any{"text": "x"})
		d := time.Since(t0)
		if err != nil || res.IsError {
			b.Fatalf("%s: %v %+v", name, err, res)
		}
		return d
	}
	for range 50 { // warm both
		call("plain__echo")
		call("boxed__echo")
	}
	var plain, boxed []time.Duration
	i := 0
	for b.Loop() {
		for k := range 2 {
			if (k+i)%2 == 0 {
				plain = append(plain, call("plain__echo"))
			} else {
				boxed = append(boxed, call("boxed__echo"))
			}
		}
		i++
	}
	p, x := quantile(plain, 0.5), quantile(boxed, 0.5)
	ratio := float64(x) / float64(p)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(p)/float64(time.Microsecond), "plain-p50-µs")
	b.ReportMetric(float64(x)/float64(time.Microsecond), "contained-p50-µs")
	b.ReportMetric(ratio, "call-ratio")
	b.Logf("%s: call p50 plain %.0f µs, contained (Landlock, network none, cgroups, rlimits) %.0f µs: %.2f× (target ≤ 1.05×); %d calls each",
		verdict(ratio <= 1.05), float64(p)/float64(time.Microsecond), float64(x)/float64(time.Microsecond), ratio, len(plain))
}
