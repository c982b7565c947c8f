package transport_test

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
	"github.com/mcpvisor/mcpvisor/host/internal/transport"
)

// summaries returns the dropped counts of the limiter's warnings in log,
// in order.
func summaries(t *testing.T, log string) []int {
	t.Helper()
	var counts []int
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var e struct {
			Message string `json:"@message"`
			Dropped int    `json:"dropped"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if strings.Contains(e.Message, "lines dropped") {
			counts = append(counts, e.Dropped)
		}
	}
	return counts
}

func allow(l *transport.OutputLimiter, n int) (admitted int) {
	for range n {
		if l.Allow() {
			admitted++
		}
	}
	return admitted
}

// TestOutputLimiter: a flood gets its burst through, the rest is counted
// and summarized once; the rate refills with time; every line is either
// admitted or counted in exactly one summary.
func TestOutputLimiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log testutil.Buffer
		l := transport.NewOutputLimiter(hclog.New(&hclog.LoggerOptions{Output: &log, JSONFormat: true}))

		const flood = 10_000
		if got := allow(l, flood); got != transport.OutputBurst {
			t.Fatalf("a flood of %d lines admitted %d, want the burst of %d", flood, got, transport.OutputBurst)
		}
		if s := summaries(t, log.String()); len(s) != 0 {
			t.Fatalf("summary logged before the delay: %v", s)
		}

		// Nothing more is written: the count is logged on its own.
		time.Sleep(transport.OutputSummaryDelay)
		synctest.Wait()
		if got, want := summaries(t, log.String()), []int{flood - transport.OutputBurst}; !equal(got, want) {
			t.Fatalf("summaries after the delay = %v, want %v", got, want)
		}

		// The bucket has refilled at the rate while the count waited.
		refill := int(transport.OutputSummaryDelay.Seconds() * transport.OutputRate)
		if got := allow(l, 3*refill); got != refill {
			t.Fatalf("after a quiet %s admitted %d, want %d", transport.OutputSummaryDelay, got, refill)
		}
		// The next admitted line is preceded by the count of those dropped.
		time.Sleep(time.Second / transport.OutputRate)
		if !l.Allow() {
			t.Fatal("a line after the refill was dropped")
		}
		if got, want := summaries(t, log.String()), []int{flood - transport.OutputBurst, 2 * refill}; !equal(got, want) {
			t.Fatalf("summaries = %v, want %v", got, want)
		}

		// Flush at the end of a stream leaves nothing pending.
		allow(l, 10)
		l.Flush()
		time.Sleep(2 * transport.OutputSummaryDelay)
		synctest.Wait()
		if got, want := summaries(t, log.String()), []int{flood - transport.OutputBurst, 2 * refill, 10}; !equal(got, want) {
			t.Fatalf("summaries = %v, want %v", got, want)
		}
	})
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
