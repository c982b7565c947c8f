//go:build unix

package transport_test

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/time/rate"

	"github.com/mcpvisor/mcpvisor/host/internal/limits"
	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
	"github.com/mcpvisor/mcpvisor/host/internal/transport"
)

// stderrLog sums what a JSON log holds of servers' stderr lines: their
// bytes, and the dropped counts of the "stderr lines dropped" warnings.
func stderrLog(t *testing.T, log string) (logged, droppedLines, droppedBytes int) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e struct {
			Message      string `json:"@message"`
			Stream       string `json:"stream"`
			Dropped      int    `json:"dropped"`
			DroppedBytes int    `json:"dropped_bytes"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("log line %.200q: %v", sc.Text(), err)
		}
		switch {
		case strings.Contains(e.Message, "stderr lines dropped"):
			droppedLines += e.Dropped
			droppedBytes += e.DroppedBytes
		case e.Stream == "stderr":
			logged += len(e.Message) + 1
		}
	}
	return logged, droppedLines, droppedBytes
}

// floodScript writes mib MiB of stderr in 4 KiB lines, waits for the
// byte bucket to refill a little, and writes one last line.
func floodScript(mib int) string {
	return `line=$(head -c 4095 /dev/zero | tr '\0' x); i=0; while [ $i -lt ` + itoa(mib*256) + ` ]; do echo "$line" >&2; i=$((i+1)); done; sleep 1.5; echo last >&2`
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// waitDone waits for a process to exit.
func waitDone(t *testing.T, p *transport.Process) {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("exit not detected")
	}
}

// A server's stderr is bounded in bytes, not only in lines (docs/design.md
// §17): lines well under the line rate but kilobytes long still add at
// most the byte burst plus the byte rate to the log; what is not logged
// is counted, in lines and bytes, in the warning before the next line
// and in limit="stderr_bytes"; the last line, after a pause, is logged.
func TestStderrBoundedInBytes(t *testing.T) {
	var log testutil.Buffer
	hits := limits.New()
	start := time.Now()
	p, err := transport.StartProcess(transport.ProcessConfig{
		Command: "sh", Args: []string{"-c", floodScript(4)},
		Logger:    hclog.New(&hclog.LoggerOptions{Output: &log, JSONFormat: true, Level: hclog.Info}),
		LimitHits: hits,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	waitDone(t, p)
	elapsed := time.Since(start)
	logged, lines, bytes := stderrLog(t, log.String())
	written := 4<<20 + len("last\n")
	// The bound: the burst, the rate over the run, and one line of slack.
	bound := 256<<10 + int(elapsed.Seconds()*(32<<10)) + 4<<10
	if logged > bound {
		t.Errorf("%d bytes of stderr logged in %s; the bound is %d", logged, elapsed, bound)
	}
	if logged+bytes != written {
		t.Errorf("logged %d + dropped %d bytes = %d, want every byte written (%d) in one or the other", logged, bytes, logged+bytes, written)
	}
	if hits.Count(limits.StderrBytes) != uint64(lines) || lines == 0 {
		t.Errorf("stderr_bytes hits = %d, dropped lines in the warnings = %d; want equal and not 0", hits.Count(limits.StderrBytes), lines)
	}
	if tail := p.StderrTail(); len(tail) == 0 || tail[len(tail)-1] != "last" {
		t.Errorf("the stderr tail does not end with the last line")
	}
	if !strings.Contains(log.String(), `"@message":"last"`) {
		t.Errorf("the line after the pause was not logged")
	}
}

// Every server's stderr together is bounded too: two servers sharing one
// total bound log at most that bound, though each is within its own.
func TestStderrTotalSharedByServers(t *testing.T) {
	var log testutil.Buffer
	total := rate.NewLimiter(8<<10, 64<<10)
	logger := hclog.New(&hclog.LoggerOptions{Output: &log, JSONFormat: true, Level: hclog.Info})
	start := time.Now()
	var ps []*transport.Process
	for range 2 {
		p, err := transport.StartProcess(transport.ProcessConfig{
			Command: "sh", Args: []string{"-c", floodScript(1)},
			Logger: logger, StderrTotal: total,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close(context.Background())
		ps = append(ps, p)
	}
	for _, p := range ps {
		waitDone(t, p)
	}
	elapsed := time.Since(start)
	logged, _, bytes := stderrLog(t, log.String())
	bound := 64<<10 + int(elapsed.Seconds()*(8<<10)) + 2*4<<10
	if logged > bound {
		t.Errorf("%d bytes of two servers' stderr logged in %s; the shared bound is %d", logged, elapsed, bound)
	}
	if want := 2 * (1<<20 + len("last\n")); logged+bytes != want {
		t.Errorf("logged %d + dropped %d = %d bytes, want %d", logged, bytes, logged+bytes, want)
	}
}
