//go:build linux

package hardening_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// callPlain is callText with a minute's bound, its text unquoted.
func callPlain(cs *mcp.ClientSession, tool string, args map[string]any) (string, error) {
	text, err := callText(cs, tool, args, time.Minute)
	if err != nil {
		return "", err
	}
	return strconv.Unquote(text)
}

// memhogBlock is a server block running the memhog example with limits
// (the inside of a limits block, one attribute per line).
func memhogBlock(name, limits string) string {
	return fmt.Sprintf("server %q {\n  command = %s\n  limits {\n%s  }\n}\n", name, hclString(bins["memhog"]), limits)
}

// Issue #26 (items 2, 4, 5): a server over its memory limit is stopped
// and restarted through the normal crash path, with the reason "memory
// limit 64MiB exceeded" in status, the log and the audit log; a second
// server's calls, made all the while through the same mcpvisor, all
// succeed. Status and /metrics show each stdio server's RSS and CPU.
func TestMemoryHogRestartedAtItsLimit(t *testing.T) {
	state := shortTempDir(t)
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	env := append(withoutXDG(shortTempDir(t)), "XDG_STATE_HOME="+state)
	hostAttrs := fmt.Sprintf("  audit {\n    path = %s\n  }\n", hclString(auditPath))
	mv := startMcpvisorEnv(t, env, hostAttrs, memhogBlock("hog", "    memory = \"64MiB\"\n")+echoBlock())
	cs := connectClient(t, mv)
	waitTool(t, cs, "hog__allocate")
	waitTool(t, cs, "echo__echo")

	before := mv.status(t)
	hog, echo := before["hog"], before["echo"]
	if hog.RSSBytes <= 0 || hog.CPUSeconds < 0 || echo.RSSBytes <= 0 {
		t.Fatalf("status without RSS of the running stdio servers: hog %+v, echo %+v", hog, echo)
	}
	m := mv.metricsText(t)
	if !regexp.MustCompile(`(?m)^mcpvisor_server_memory_bytes\{.*server="hog"\} [1-9]`).MatchString(m) ||
		!regexp.MustCompile(`(?m)^mcpvisor_server_cpu_seconds_total\{.*server="echo"\} `).MatchString(m) {
		t.Fatalf("/metrics has no memory or CPU series of the servers:\n%s", m)
	}
	// In mcpvisor's environment (its TMPDIR), where the CLI finds the
	// control socket and reads the status as the operator.
	code, out, errOut := runCLIAs(t, nil, env, "status", "-config", mv.config)
	if code != 0 || !strings.Contains(out, "RSS") || !strings.Contains(out, "/64MiB") {
		t.Fatalf("mcpvisor status: exit %d, want the RSS column with hog's limit:\n%s%s", code, out, errOut)
	}

	// The other server is called all the while.
	var calls, failures atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	other := connectClient(t, mv)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				text := fmt.Sprintf("w%d-%d", w, i)
				got, err := callPlain(other, "echo__echo", map[string]any{"text": text})
				calls.Add(1)
				if err != nil || got != text {
					failures.Add(1)
					firstFailure.CompareAndSwap(nil, fmt.Sprintf("%q, %v", got, err))
				}
			}
		}()
	}

	// 256 MiB under a 64 MiB limit: the call fails with the process.
	_, err := callPlain(cs, "hog__allocate", map[string]any{"mib": 256})
	if err == nil {
		t.Fatal("allocating 256MiB under a 64MiB limit succeeded")
	}
	t.Logf("the hog's call: %v", err)
	// Ready again, its last error is cleared (docs/supervision.md): the
	// reason is in the restart metric, the log and the audit log below,
	// and in status while it is down (TestOverLimitAtEveryStartParks).
	testutil.Eventually(t, readyTimeout, "hog restarted", func() bool {
		st := mv.status(t)["hog"]
		return st.State == "ready" && st.Generation > hog.Generation && st.Pid != hog.Pid
	})
	// The restart is counted with its reason (docs/operations.md).
	if v := mv.labeledMetric(t, "mcpvisor_server_restarts_total", `server="hog"`, `reason="memory_limit"`); v != 1 {
		t.Errorf("mcpvisor_server_restarts_total{server=\"hog\",reason=\"memory_limit\"} = %v, want 1\n%s", v, mv.metricsText(t))
	}
	// The restarted server works, within its limit.
	if got, err := callPlain(cs, "hog__allocate", map[string]any{"mib": 8}); err != nil || got != "holding 8 MiB" {
		t.Fatalf("the restarted hog: %q, %v", got, err)
	}
	close(stop)
	wg.Wait()
	if failures.Load() > 0 || calls.Load() == 0 {
		t.Fatalf("%d of %d calls to the other server failed (first: %v); want all of them to succeed", failures.Load(), calls.Load(), firstFailure.Load())
	}
	t.Logf("%d calls to the other server, all answered; hog: %s", calls.Load(), mv.status(t)["hog"].LastError)

	if log := mv.stderr.String(); !strings.Contains(log, "memory limit 64MiB exceeded") {
		t.Fatalf("the log does not say why hog stopped:\n%s", tail(log, 40))
	}
	testutil.Eventually(t, readyTimeout, "the audit log's memory_limit record", func() bool {
		b, _ := os.ReadFile(auditPath)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, `"event":"memory_limit"`) && strings.Contains(line, `"server":"hog"`) && strings.Contains(line, "memory limit 64MiB exceeded") {
				return true
			}
		}
		return false
	})
}

// Issue #26 (items 2, 5): processes and open_files bound a server: a fork
// loop gets EAGAIN before it has started `processes` processes, and a
// descriptor leak gets EMFILE at open_files; the server lives on.
func TestProcessesAndOpenFilesLimits(t *testing.T) {
	// Two servers: a Go server at its processes limit may fail to start
	// a thread of its own, and die of it.
	mv := startMcpvisor(t, memhogBlock("forks", "    processes  = 32\n")+memhogBlock("files", "    open_files = 128\n"))
	cs := connectClient(t, mv)
	waitTool(t, cs, "forks__fork")
	waitTool(t, cs, "files__open_files")

	got, err := callPlain(cs, "forks__fork", map[string]any{"max": 1000})
	var n int
	if err != nil || !strings.Contains(got, "resource temporarily unavailable") {
		t.Fatalf("fork loop under processes = 32: %q, %v; want it stopped by EAGAIN", got, err)
	}
	if _, err := fmt.Sscanf(got, "started %d processes", &n); err != nil || n >= 32 {
		t.Fatalf("fork loop under processes = 32: %q", got)
	}
	t.Logf("fork loop: %s", got)

	got, err = callPlain(cs, "files__open_files", nil)
	if err != nil || !strings.Contains(got, "too many open files") {
		t.Fatalf("opening files under open_files = 128: %q, %v; want EMFILE", got, err)
	}
	if _, err := fmt.Sscanf(got, "opened %d files", &n); err != nil || n > 128 || n < 64 {
		t.Fatalf("opening files under open_files = 128: %q", got)
	}
	t.Logf("descriptor leak: %s", got)
	if _, err := callPlain(cs, "files__pid", nil); err != nil {
		t.Fatalf("the server after its open_files limit was hit: %v", err)
	}
}

// Issue #26 (item 2): a stop at the memory limit counts against the retry
// budget like any crash: a server over its limit on every start parks,
// with the limit as its reason.
func TestOverLimitAtEveryStartParks(t *testing.T) {
	block := fmt.Sprintf("server \"hog\" {\n  command = %s\n  env = { MEMHOG_ALLOCATE_AT_START = \"256\" }\n  limits {\n    memory = \"64MiB\"\n  }\n  reconnect {\n    max_retries = 1\n  }\n}\n", hclString(bins["memhog"]))
	mv := startMcpvisor(t, block+echoBlock())
	testutil.Eventually(t, readyTimeout, "hog parked with its memory limit as the reason", func() bool {
		st := mv.status(t)["hog"]
		return st.State == "parked" && strings.Contains(st.LastError, "memory limit 64MiB exceeded")
	})
	if st := mv.status(t)["echo"]; st.State != "ready" || st.Generation != 1 {
		t.Fatalf("the other server was touched: %+v", st)
	}
	t.Logf("hog: %s", mv.status(t)["hog"].LastError)
}
