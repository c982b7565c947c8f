//go:build unix

// Package scaleout_test runs mcpvisor the way docs/scale-out.md deploys
// it: two real `mcpvisor run` replicas, each with its own echo server,
// behind HAProxy running the example configuration of examples/deploy
// (rendered for the test's ports, with health checks every 100 ms). Every
// call goes through HAProxy; the echo server's pid tool says which replica
// answered.
//
// The checks have no tight timing: a replica is taken out by HAProxy's
// health checks within a few hundred milliseconds, and the drain (2 s here)
// is long enough for that on a loaded machine; the bounds are hang guards.
package scaleout_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

const (
	// checkInterval is HAProxy's health-check period in these tests.
	checkInterval = 100 * time.Millisecond
	// drain is the replicas' drain: HAProxy needs two failed checks
	// (about 200 ms) to take a draining replica out.
	drain = "2s"
	// upTimeout bounds a replica's start and HAProxy's seeing it.
	upTimeout = 60 * time.Second
	// callTimeout bounds one call, a hang guard only.
	callTimeout = 30 * time.Second
)

var bins map[string]string

func TestMain(m *testing.M) {
	os.Exit(testutil.BuildAndRun(m, func(b map[string]string) { bins = b }, "echo", testutil.Mcpvisor))
}

// replica is one `mcpvisor run` process.
type replica struct {
	name   string
	addr   string
	cmd    *exec.Cmd
	stderr *testutil.Buffer
	exited chan struct{}
}

// startReplica starts `mcpvisor run` on addr with an echo server and
// waits until it is ready. It is killed, group and all, when the test ends.
func startReplica(t *testing.T, name, addr string) *replica {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "config.hcl")
	src := fmt.Sprintf("host {\n  listen  = %q\n  replica = %q\n  drain   = %q\n}\n\nserver \"echo\" {\n  command = %q\n}\n", addr, name, drain, bins["echo"])
	if err := os.WriteFile(cfg, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &replica{name: name, addr: addr, stderr: &testutil.Buffer{}, exited: make(chan struct{})}
	r.cmd = exec.Command(bins["mcpvisor"], "run", "-config", cfg)
	r.cmd.Stderr = r.stderr
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.cmd.Wait(); close(r.exited) }()
	t.Cleanup(func() {
		syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
		<-r.exited
		if t.Failed() {
			t.Logf("%s log:\n%s", name, r.stderr.String())
		}
	})
	testutil.Eventually(t, upTimeout, name+" ready", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return r
}

// echoPid is the pid of the replica's echo server: its child running the
// echo binary (an anonymous /status shows no pids; docs/security.md,
// "The operator's door").
func (r *replica) echoPid(t *testing.T) string {
	t.Helper()
	for _, pid := range testutil.Descendants(r.cmd.Process.Pid) {
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && exe == bins["echo"] {
			return strconv.Itoa(pid)
		}
	}
	t.Fatalf("%s runs no echo server", r.name)
	return ""
}

// cluster is two replicas behind HAProxy.
type cluster struct {
	a, b  *replica
	base  string // HAProxy's frontend
	log   *testutil.Buffer
	names map[string]string // echo pid → replica name
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	addrA, addrB := freeAddr(t), freeAddr(t)
	c := &cluster{}
	var wg sync.WaitGroup
	wg.Go(func() { c.a = startReplica(t, "replica-a", addrA) })
	wg.Go(func() { c.b = startReplica(t, "replica-b", addrB) })
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	c.base, c.log = testutil.StartHAProxy(t, []string{addrA, addrB}, checkInterval)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("haproxy log:\n%s", c.log.String())
		}
	})
	c.names = map[string]string{c.a.echoPid(t): c.a.name, c.b.echoPid(t): c.b.name}
	return c
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// connect opens a client through HAProxy speaking version.
func (c *cluster) connect(ctx context.Context, version string) (*mcp.ClientSession, error) {
	return mcp.NewClient(&mcp.Implementation{Name: "scaleout-test"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: c.base + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: version})
}

// pid calls echo__pid and returns the answering replica's name.
func (c *cluster) pid(ctx context.Context, cs *mcp.ClientSession) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__pid"})
	if err != nil {
		return "", err
	}
	if res.IsError || len(res.Content) != 1 {
		return "", fmt.Errorf("echo__pid: unexpected result %+v", res)
	}
	text := res.Content[0].(*mcp.TextContent).Text
	name, ok := c.names[text]
	if !ok {
		return "", fmt.Errorf("echo__pid answered %q, no replica's echo server", text)
	}
	return name, nil
}

// Ten 2025 sessions of ten calls each: every session stays on the replica
// that created it (one pid per session), and both replicas get sessions.
func TestSessionsStickToTheirReplica(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	perReplica := map[string]int{}
	var sessions []*mcp.ClientSession
	defer func() {
		for _, cs := range sessions {
			cs.Close()
		}
	}()
	for i := range 10 {
		// Sessions stay open while the next ones are made, as agents' do:
		// least-connections balancing sees them.
		cs, err := c.connect(ctx, "2025-11-25")
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		sessions = append(sessions, cs)
		seen := map[string]int{}
		for j := range 10 {
			name, err := c.pid(ctx, cs)
			if err != nil {
				t.Fatalf("session %d call %d: %v", i, j, err)
			}
			seen[name]++
		}
		if len(seen) != 1 {
			t.Errorf("session %d was answered by %v, want one replica", i, seen)
		}
		for name := range seen {
			perReplica[name]++
		}
	}
	if perReplica["replica-a"] == 0 || perReplica["replica-b"] == 0 {
		t.Errorf("sessions per replica %v, want both replicas used", perReplica)
	}
	t.Logf("sessions per replica: %v", perReplica)
}

// callLog records calls made by concurrent callers.
type callLog struct {
	mu    sync.Mutex
	calls []call
}

type call struct {
	caller     string
	start, end time.Time
	replica    string
	err        error
}

func (l *callLog) add(c call) {
	l.mu.Lock()
	l.calls = append(l.calls, c)
	l.mu.Unlock()
}

func (l *callLog) all() []call {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]call(nil), l.calls...)
}

// callPids starts n stateless callers ("<prefix>-<i>") that call pid in a
// loop until stop is closed, each call logged in log.
func (c *cluster) callPids(t *testing.T, ctx context.Context, n int, prefix string, log *callLog, stop <-chan struct{}, wg *sync.WaitGroup) {
	t.Helper()
	for i := range n {
		cs, err := c.connect(ctx, "2026-07-28")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				name, err := c.pid(ctx, cs)
				log.add(call{caller: fmt.Sprint(prefix, "-", i), start: start, end: time.Now(), replica: name, err: err})
			}
		})
	}
}

// A rolling restart's first step: SIGTERM to one replica while 4
// stateless (2026-07-28) callers and 4 2025 sessions keep calling. No
// stateless call fails; each 2025 session on the stopped replica gets the
// spec's 404 once, initializes a new session on the other replica and
// carries on there; the replica exits 0 after its drain.
func TestSIGTERMDrainsWithoutFailedCalls(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var stateless callLog
	c.callPids(t, ctx, 4, "stateless", &stateless, stop, &wg)

	// 2025 sessions, made one after the other so both replicas hold some.
	type sessionRun struct {
		first    string // the replica that created the session
		reinits  int
		replicas []string // after each re-initialization
		failures []error
	}
	runs := make([]*sessionRun, 4)
	for i := range runs {
		cs, err := c.connect(ctx, "2025-11-25")
		if err != nil {
			t.Fatal(err)
		}
		name, err := c.pid(ctx, cs)
		if err != nil {
			t.Fatal(err)
		}
		run := &sessionRun{first: name}
		runs[i] = run
		wg.Go(func() {
			defer func() { cs.Close() }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := c.pid(ctx, cs)
				if errors.Is(err, mcp.ErrSessionMissing) {
					// The spec's rule on 404: a new session, and the call
					// again (it never ran).
					cs.Close()
					run.reinits++
					if cs, err = c.connect(ctx, "2025-11-25"); err != nil {
						run.failures = append(run.failures, fmt.Errorf("re-initialize: %w", err))
						return
					}
					var name string
					name, err = c.pid(ctx, cs)
					run.replicas = append(run.replicas, name)
				}
				if err != nil {
					run.failures = append(run.failures, err)
					return
				}
			}
		})
	}
	held := map[string]int{}
	for _, r := range runs {
		held[r.first]++
	}
	if held["replica-a"] == 0 {
		t.Fatalf("no 2025 session on replica-a (sessions per replica %v): nothing to move", held)
	}

	time.Sleep(300 * time.Millisecond) // traffic on both replicas
	sigterm := time.Now()
	c.a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.a.exited:
	case <-time.After(upTimeout):
		t.Fatalf("replica-a still running %s after SIGTERM", upTimeout)
	}
	exitedAfter := time.Since(sigterm)
	time.Sleep(300 * time.Millisecond) // traffic on the survivor only
	close(stop)
	wg.Wait()

	if code := c.a.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("replica-a exited with %d after SIGTERM, want 0", code)
	}
	if exitedAfter < 2*time.Second {
		t.Errorf("replica-a exited %s after SIGTERM, before its %s drain", exitedAfter, drain)
	}
	calls := stateless.all()
	failed, onA, afterExit := 0, 0, 0
	for _, cl := range calls {
		switch {
		case cl.err != nil:
			failed++
			t.Errorf("%s: call started %s after SIGTERM failed: %v", cl.caller, cl.start.Sub(sigterm).Round(time.Millisecond), cl.err)
		case cl.replica == "replica-a" && cl.start.After(sigterm):
			onA++
		case cl.start.After(sigterm.Add(exitedAfter)):
			afterExit++
		}
	}
	t.Logf("stateless: %d calls, %d failed, %d answered by replica-a while it drained, %d after it exited", len(calls), failed, onA, afterExit)
	if afterExit == 0 {
		t.Error("no stateless call was made after replica-a exited: the test proved nothing")
	}
	for i, r := range runs {
		if len(r.failures) > 0 {
			t.Errorf("2025 session %d (on %s): failed: %v", i, r.first, r.failures)
		}
		want := 0
		if r.first == "replica-a" {
			want = 1
		}
		if r.reinits != want {
			t.Errorf("2025 session %d (on %s): re-initialized %d times, want %d", i, r.first, r.reinits, want)
		}
		for _, name := range r.replicas {
			if name != "replica-b" {
				t.Errorf("2025 session %d re-initialized on %q, want replica-b", i, name)
			}
		}
	}
}

// SIGKILL of a replica fails only the calls that were in flight on it:
// six slow calls spread over both replicas and four callers of echo__pid;
// after the kill every slow call on the survivor and every call started
// after the killed replica was gone succeeds.
func TestSIGKILLFailsOnlyCallsInFlight(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The slow calls first, alone, so each replica's in-flight gauge
	// counts exactly its share of them.
	const slowCalls = 6
	var slowWG sync.WaitGroup
	slowErrs := make(chan error, slowCalls)
	for range slowCalls {
		cs, err := c.connect(ctx, "2026-07-28")
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		slowWG.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			defer cancel()
			_, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "echo__sleep", Arguments: map[string]any{"ms": 4000}})
			slowErrs <- err
		})
	}
	var onA, onB float64
	testutil.Eventually(t, upTimeout, "the slow calls in flight", func() bool {
		onA, onB = inFlight(t, c.a.addr), inFlight(t, c.b.addr)
		return onA+onB == slowCalls
	})
	if onA == 0 || onB == 0 {
		t.Fatalf("slow calls in flight: %v on replica-a, %v on replica-b; want both used", onA, onB)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var fast callLog
	c.callPids(t, ctx, 4, "caller", &fast, stop, &wg)
	time.Sleep(300 * time.Millisecond)
	killed := time.Now()
	syscall.Kill(-c.a.cmd.Process.Pid, syscall.SIGKILL)
	<-c.a.exited
	gone := time.Now() // reaped: none of its sockets is open any more
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	slowWG.Wait()
	close(slowErrs)

	slowFailed := 0
	for err := range slowErrs {
		if err != nil {
			slowFailed++
		}
	}
	if slowFailed != int(onA) {
		t.Errorf("%d slow calls failed, want exactly the %v in flight on the killed replica", slowFailed, onA)
	}
	calls := fast.all()
	failed, after := 0, 0
	for _, cl := range calls {
		if cl.start.After(gone) {
			after++
			if cl.err != nil {
				t.Errorf("%s: a call started after the killed replica was gone failed: %v", cl.caller, cl.err)
			}
			continue
		}
		// A call started while the replica was dying (killed, not yet
		// reaped) may fail and be followed by another that fails too;
		// only the calls in flight at the kill are counted here.
		if cl.err != nil && cl.start.Before(killed) {
			failed++
		}
	}
	// Each caller has at most one call in flight at the kill.
	if failed > 4 {
		t.Errorf("%d echo__pid calls failed, more than the 4 that can have been in flight", failed)
	}
	if after == 0 {
		t.Error("no call was made after the kill: the test proved nothing")
	}
	t.Logf("slow calls: %v of %d on the killed replica failed; echo__pid: %d calls, %d failed in flight, %d after the kill all answered", onA, slowCalls, len(calls), failed, after)
}

// inFlight reads mcpvisor_calls_in_flight of the replica at addr.
func inFlight(t *testing.T, addr string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	if f := fams["mcpvisor_calls_in_flight"]; f != nil {
		for _, m := range f.Metric {
			total += m.GetGauge().GetValue()
		}
	}
	return total
}
