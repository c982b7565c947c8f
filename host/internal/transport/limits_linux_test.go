package transport_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/transport"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// hangGuard bounds the wait for a process that should be stopped: far
// longer than a stop takes, it only tells "stopped" from "never".
const hangGuard = 60 * time.Second

// startLimited starts the test binary as a limited process.
func startLimited(t *testing.T, mode string, limits config.Limits, onStop func(error)) *transport.Process {
	t.Helper()
	p, err := transport.StartProcess(transport.ProcessConfig{
		Command: os.Args[0], Args: []string{"-test.run=^$"},
		Env:    append(os.Environ(), limitedEnv+"="+mode),
		Server: "limited", Limits: limits, OnLimitStop: onStop,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// tell writes the line the limited process waits for.
func tell(t *testing.T, p *transport.Process) {
	t.Helper()
	conn, err := p.Transport().Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Any line will do; the process reads one and then acts.
	if err := conn.Write(context.Background(), &jsonrpc.Request{Method: "notifications/initialized"}); err != nil {
		t.Fatal(err)
	}
}

func TestMemoryLimitStopWrapsErrMemoryLimit(t *testing.T) {
	stopped := make(chan error, 1)
	p := startLimited(t, "hog 256", config.Limits{Memory: 32 << 20}, func(err error) { stopped <- err })
	tell(t, p)
	select {
	case <-p.Done():
	case <-time.After(hangGuard):
		t.Fatalf("a process touching 256MiB under a 32MiB limit still runs after %s", hangGuard)
	}
	p.Close(context.Background())
	err := p.Err()
	if !errors.Is(err, transport.ErrMemoryLimit) || !errors.Is(err, recovery.ErrProcessExited) || !strings.Contains(err.Error(), "memory limit 32MiB exceeded") {
		t.Fatalf("Err() = %v; want the process exit wrapping ErrMemoryLimit, saying \"memory limit 32MiB exceeded\"", err)
	}
	select {
	case e := <-stopped:
		if !errors.Is(e, transport.ErrMemoryLimit) {
			t.Fatalf("OnLimitStop got %v", e)
		}
	default:
		t.Fatal("OnLimitStop was not called")
	}
}

func TestWithinLimitsRunsAndIsMeasured(t *testing.T) {
	p := startLimited(t, "hog 16", config.Limits{Memory: 512 << 20, Processes: 64, OpenFiles: 256}, nil)
	tell(t, p)
	var u transport.Usage
	deadline := time.Now().Add(hangGuard)
	for {
		var ok bool
		u, ok = p.Usage()
		if ok && u.RSS >= 16<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Usage() = %+v, %v; want ≥ 16MiB resident", u, ok)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if u.Processes != 1 {
		t.Fatalf("Usage() counts %d processes, want the server alone (its keeper left out)", u.Processes)
	}
	select {
	case <-p.Done():
		t.Fatalf("a process within its limits exited: %v", p.Err())
	default:
	}
	p.Close(context.Background())
	if err := p.Err(); errors.Is(err, transport.ErrMemoryLimit) {
		t.Fatalf("a process within its limits was stopped for its memory: %v", err)
	}
}

func TestOpenFilesLimitApplied(t *testing.T) {
	p := startLimited(t, "files", config.Limits{OpenFiles: 64}, nil)
	tell(t, p)
	deadline := time.Now().Add(hangGuard)
	for {
		for _, l := range p.StderrTail() {
			var n int
			if _, err := fmt.Sscanf(l, "opened %d:", &n); err == nil {
				if n > 64 || !strings.Contains(l, "too many open files") {
					t.Fatalf("the process said %q under open_files = 64", l)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no count of opened files on stderr: %q", p.StderrTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Without a memory cgroup (and best_effort) the limit is enforced by
// sampling the group's memory: the process is stopped through Close (stdin, SIGTERM, SIGKILL),
// and its exit wraps ErrMemoryLimit all the same.
func TestSampledMemoryLimitStop(t *testing.T) {
	defer transport.WithoutCgroups()()
	stopped := make(chan error, 1)
	p := startLimited(t, "hog 256", config.Limits{Memory: 32 << 20, BestEffort: true}, func(err error) { stopped <- err })
	tell(t, p)
	select {
	case <-p.Done():
	case <-time.After(hangGuard):
		t.Fatalf("a process holding 256MiB under a sampled 32MiB limit still runs after %s", hangGuard)
	}
	p.Close(context.Background())
	err := p.Err()
	if !errors.Is(err, transport.ErrMemoryLimit) || !strings.Contains(err.Error(), "memory limit 32MiB exceeded") {
		t.Fatalf("Err() = %v; want it to wrap ErrMemoryLimit, saying \"memory limit 32MiB exceeded\"", err)
	}
	if e := <-stopped; !errors.Is(e, transport.ErrMemoryLimit) {
		t.Fatalf("OnLimitStop got %v", e)
	}
}
