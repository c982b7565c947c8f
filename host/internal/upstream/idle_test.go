//go:build unix

package upstream_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
	"github.com/mcpvisor/mcpvisor/host/internal/transport"
	"github.com/mcpvisor/mcpvisor/host/internal/upstream"
)

// restartLog is an Observer that keeps the restart reasons and the state
// transitions it is told about.
type restartLog struct {
	mu       sync.Mutex
	reasons  []upstream.RestartReason
	states   []upstream.State
	breakers []upstream.BreakerState
}

func (l *restartLog) StateChanged(_ string, _, to upstream.State) {
	l.mu.Lock()
	l.states = append(l.states, to)
	l.mu.Unlock()
}

func (l *restartLog) BreakerChanged(_ string, _, to upstream.BreakerState) {
	l.mu.Lock()
	l.breakers = append(l.breakers, to)
	l.mu.Unlock()
}

func (l *restartLog) ConnectFinished(string, uint64, bool, error) {}

func (l *restartLog) Restarted(_ string, _ uint64, reason upstream.RestartReason) {
	l.mu.Lock()
	l.reasons = append(l.reasons, reason)
	l.mu.Unlock()
}

func (l *restartLog) Notification(string, string, bool) {}

func (l *restartLog) CallStarted(ctx context.Context, _ *upstream.Call) context.Context { return ctx }

func (l *restartLog) CallFinished(context.Context, *upstream.Call) {}

func (l *restartLog) snapshot() (reasons []upstream.RestartReason, states []upstream.State, breakers []upstream.BreakerState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.reasons), slices.Clone(l.states), slices.Clone(l.breakers)
}

// noFailure fails the test if the status shows anything a failure leaves.
func noFailure(t *testing.T, st upstream.Status) {
	t.Helper()
	if st.Retries != 0 || st.Breaker != "closed" || st.BreakerFailures != 0 || st.LastError != "" {
		t.Errorf("idle stop or recycling counted as a failure: %+v", st)
	}
}

// An idle server's process is stopped; its catalog stays published; the
// next calls start it once, however many arrive together, and succeed.
func TestIdleStopKeepsCatalogAndColdStarts(t *testing.T) {
	srv := stdioServer("echo", echoBin)
	srv.IdleTimeout = 300 * time.Millisecond
	log := &restartLog{}
	h := startObserved(t, srv, nil, log)
	h.waitState(upstream.StateReady, 1)
	old := pidOf(t, h.sup)

	st := h.waitState(upstream.StateIdle, 1)
	if st.Pid != 0 {
		t.Errorf("idle server shows pid %d", st.Pid)
	}
	testutil.Eventually(t, 10*time.Second, "the idle server's process to exit", func() bool { return !testutil.Alive(old) })
	noFailure(t, h.sup.Status())
	if cat := h.lastCatalog(); cat == nil || len(cat.Tools) == 0 {
		t.Fatalf("the idle stop withdrew the catalog: last published %+v", cat)
	}
	if cat := h.sup.Catalog(); cat == nil || len(cat.Tools) == 0 {
		t.Fatal("Catalog() is empty while idle")
	}
	if st := h.sup.Status(); st.Tools == 0 {
		t.Errorf("status of an idle server counts no tools: %+v", st)
	}

	// Concurrent first calls: one start, and every call is answered.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 8
	pids := make([]int, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := call(ctx, h.sup, "pid", "")
			if err != nil {
				errs <- err
				return
			}
			pids[i] = atoiText(t, res)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("call to an idle server: %v", err)
	}
	for _, p := range pids {
		if p == old || p != pids[0] {
			t.Fatalf("calls after the idle stop answered by pids %v (old %d): want one new process", pids, old)
		}
	}
	// (It may be idle again by now: the generation says there was one start.)
	st = h.sup.Status()
	if st.Generation != 2 || (st.State != upstream.StateReady && st.State != upstream.StateIdle) {
		t.Errorf("after the cold start: %+v, want generation 2, ready or idle again", st)
	}
	noFailure(t, st)
	reasons, states, breakers := log.snapshot()
	if !slices.Equal(reasons, []upstream.RestartReason{upstream.RestartIdle}) {
		t.Errorf("restarts reported %v, want [idle]", reasons)
	}
	if slices.Contains(states, upstream.StateReconnecting) || slices.Contains(states, upstream.StateParked) {
		t.Errorf("states went through a failure: %v", states)
	}
	if len(breakers) != 0 {
		t.Errorf("breaker transitions %v", breakers)
	}
}

// A call in flight holds the server awake past idle_timeout.
func TestIdleStopWaitsForCallsInFlight(t *testing.T) {
	srv := stdioServer("echo", echoBin)
	srv.IdleTimeout = 200 * time.Millisecond
	log := &restartLog{}
	h := startObserved(t, srv, nil, log)
	h.waitState(upstream.StateReady, 1)
	res, err := call(context.Background(), h.sup, "sleep", `{"ms":1500}`)
	if err != nil || res.IsError {
		t.Fatalf("a call longer than idle_timeout: %v %+v", err, res)
	}
	if _, states, _ := log.snapshot(); slices.Contains(states, upstream.StateIdle) {
		t.Fatalf("the server went idle with a call in flight: %v", states)
	}
	h.waitState(upstream.StateIdle, 1)
}

// A resource subscription lives in the upstream's process: a server that
// holds one is not idle-stopped; once it is undone, the server idles.
func TestIdleStopWaitsForSubscriptions(t *testing.T) {
	srv := stdioServer("notes", notesBin)
	srv.IdleTimeout = 200 * time.Millisecond
	log := &restartLog{}
	h := startObserved(t, srv, nil, log)
	h.waitState(upstream.StateReady, 1)
	ctx := context.Background()
	if err := h.sup.Subscribe(ctx, &mcp.SubscribeParams{URI: "notes://list"}); err != nil {
		t.Fatal(err)
	}
	// Several idle timeouts pass; the subscription keeps the server up.
	// (Waiting on a call that itself takes that long would be activity.)
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		if st := h.sup.Status(); st.State != upstream.StateReady {
			t.Fatalf("server with a subscription left ready: %+v", st)
		}
	}
	if err := h.sup.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: "notes://list"}); err != nil {
		t.Fatal(err)
	}
	h.waitState(upstream.StateIdle, 1)
}

// max_lifetime replaces the process only between calls: a call in flight
// completes on the old process, a call made meanwhile waits for the new
// one, and nothing counts as a failure.
func TestMaxLifetimeRecyclesBetweenCalls(t *testing.T) {
	srv := stdioServer("echo", echoBin)
	srv.MaxLifetime = time.Second
	log := &restartLog{}
	h := startObserved(t, srv, nil, log)
	h.waitState(upstream.StateReady, 1)
	old := pidOf(t, h.sup)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	long := make(chan error, 1)
	go func() {
		res, err := call(ctx, h.sup, "sleep", `{"ms":3000}`)
		if err == nil && res.IsError {
			err = errorText(res)
		}
		long <- err
	}()
	// The session is retired (no pid shown) while the long call runs.
	testutil.Eventually(t, 10*time.Second, "the session to be retired", func() bool {
		st := h.sup.Status()
		return st.Generation == 1 && st.Pid == 0
	})
	if !testutil.Alive(old) {
		t.Fatal("the old process was stopped with a call in flight")
	}
	res, err := call(ctx, h.sup, "pid", "")
	if err != nil {
		t.Fatalf("a call made while the server was being recycled: %v", err)
	}
	select {
	case err := <-long:
		if err != nil {
			t.Fatalf("the call in flight across max_lifetime: %v", err)
		}
	default:
		t.Fatal("the new session answered before the call in flight on the old one ended")
	}
	if now := atoiText(t, res); now == old {
		t.Fatalf("the call after max_lifetime was answered by the old process %d", old)
	}
	testutil.Eventually(t, 10*time.Second, "the old process to exit", func() bool { return !testutil.Alive(old) })
	st := h.sup.Status()
	if st.Generation < 2 {
		t.Errorf("generation %d after max_lifetime", st.Generation)
	}
	noFailure(t, st)
	reasons, states, breakers := log.snapshot()
	for _, r := range reasons {
		if r != upstream.RestartLifetime {
			t.Errorf("restart reasons %v, want only lifetime", reasons)
			break
		}
	}
	if len(reasons) == 0 {
		t.Error("no restart reported")
	}
	if slices.Contains(states, upstream.StateReconnecting) || slices.Contains(states, upstream.StateParked) {
		t.Errorf("states went through a failure: %v", states)
	}
	if len(breakers) != 0 {
		t.Errorf("breaker transitions %v", breakers)
	}
}

// A process that dies is a restart with reason exit.
func TestRestartReasonExit(t *testing.T) {
	log := &restartLog{}
	h := startObserved(t, stdioServer("echo", echoBin), nil, log)
	h.waitState(upstream.StateReady, 1)
	if _, err := call(context.Background(), h.sup, "crash", ""); err == nil {
		t.Fatal("crash returned no error")
	}
	h.waitState(upstream.StateReady, 2)
	if reasons, _, _ := log.snapshot(); !slices.Equal(reasons, []upstream.RestartReason{upstream.RestartExit}) {
		t.Errorf("restarts reported %v, want [exit]", reasons)
	}
}

// atoiText is the number a tool answered as text (the pid tool).
func atoiText(t *testing.T, res *mcp.CallToolResult) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(text(t, res)))
	if err != nil {
		t.Errorf("tool said %q, want a number", text(t, res))
	}
	return n
}

// errorText turns a tool's isError result into an error.
func errorText(res *mcp.CallToolResult) error {
	if len(res.Content) > 0 {
		if tc, ok := res.Content[0].(*mcp.TextContent); ok {
			return errors.New(tc.Text)
		}
	}
	return errors.New("isError result")
}

// Revive starts an idle server and reports the outcome of that start.
func TestReviveStartsIdleServer(t *testing.T) {
	srv := stdioServer("echo", echoBin)
	srv.IdleTimeout = 200 * time.Millisecond
	h := start(t, srv, nil)
	h.waitState(upstream.StateIdle, 1)
	select {
	case err := <-h.sup.Revive():
		if err != nil {
			t.Fatalf("revive of an idle server: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("revive of an idle server had no outcome")
	}
	// (It may be idle again by now: only the new generation is certain.)
	if st := h.sup.Status(); st.Generation < 2 {
		t.Fatalf("after revive: %+v, want a new generation", st)
	}
}

// memoryLimitDialer dials the real server; once over is set, its links
// report their process's death the way limits enforcement does (an error
// wrapping transport.ErrMemoryLimit). Enforcement itself is not what is
// tested here: the supervisor's reading of such a death is.
type memoryLimitDialer struct {
	transport.Dialer
	over atomic.Bool
}

func (d *memoryLimitDialer) Dial(ctx context.Context) (transport.Link, error) {
	link, err := d.Dialer.Dial(ctx)
	if err != nil {
		return nil, err
	}
	return &memoryLimitLink{ProcessLink: link.(transport.ProcessLink), d: d}, nil
}

type memoryLimitLink struct {
	transport.ProcessLink
	d *memoryLimitDialer
}

func (l *memoryLimitLink) Err() error {
	err := l.ProcessLink.Err()
	if err != nil && l.d.over.Load() {
		return fmt.Errorf("memory limit 64MiB exceeded: %w", errors.Join(transport.ErrMemoryLimit, err))
	}
	return err
}

// A process stopped over its memory limit is a restart with reason
// memory_limit.
func TestRestartReasonMemoryLimit(t *testing.T) {
	srv := stdioServer("echo", echoBin)
	real, err := transport.NewDialer(srv, transport.Options{Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	d := &memoryLimitDialer{Dialer: real}
	log := &restartLog{}
	sup := upstream.New(srv, upstream.Options{Dialer: d, Observer: log, BackoffBase: 10 * time.Millisecond})
	sup.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		sup.Stop(ctx)
	})
	h := &harness{t: t, sup: sup}
	st := h.waitState(upstream.StateReady, 1)
	d.over.Store(true)
	syscall.Kill(st.Pid, syscall.SIGKILL)
	h.waitState(upstream.StateReady, 2)
	if reasons, _, _ := log.snapshot(); !slices.Equal(reasons, []upstream.RestartReason{upstream.RestartMemoryLimit}) {
		t.Errorf("restarts reported %v, want [memory_limit]", reasons)
	}
	if testutil.Alive(st.Pid) {
		t.Errorf("killed process %d not reaped", st.Pid)
	}
}

// Many calls racing idle stops and max_lifetime replacements: every call
// is answered (none meets a session being retired), and no failure is
// counted. The tool, sleep, is not read-only: a call whose session is
// closed under it is not replayed but fails ("the server process exited
// while the call was in flight"), so a retire that did not wait for the
// calls on its session, or a call that used a session being retired,
// shows here as failed calls. Each call sleeps a few milliseconds so that
// max_lifetime often falls while calls are in flight; the pauses between
// calls let the server go idle now and then.
func TestCallsRacingIdleStopAndLifetimeAllSucceed(t *testing.T) {
	srv := stdioServer("echo", echoBin)
	srv.IdleTimeout = 30 * time.Millisecond
	srv.MaxLifetime = 150 * time.Millisecond
	log := &restartLog{}
	h := startObserved(t, srv, nil, log)
	h.waitState(upstream.StateReady, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const workers, calls = 8, 100
	errs := make(chan error, workers*calls)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				ms := 1 + (w+i)%4
				res, err := call(ctx, h.sup, "sleep", fmt.Sprintf(`{"ms":%d}`, ms))
				switch {
				case err != nil:
					errs <- err
				case res.IsError || text(t, res) != fmt.Sprintf("slept %dms", ms):
					errs <- fmt.Errorf("call %d-%d answered %+v", w, i, res.Content)
				}
				// Every fourth worker pauses past idle_timeout now and then.
				if w%4 == 0 && i%10 == 9 {
					time.Sleep(60 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 5 {
			t.Errorf("call racing idle stop or max_lifetime: %v", err)
		}
	}
	if n > 5 {
		t.Errorf("… %d failed calls in all", n)
	}
	st := h.sup.Status()
	noFailure(t, st)
	reasons, states, breakers := log.snapshot()
	for _, r := range reasons {
		if r != upstream.RestartIdle && r != upstream.RestartLifetime {
			t.Errorf("restart reasons %v include a failure", reasons)
			break
		}
	}
	if !slices.Contains(reasons, upstream.RestartLifetime) {
		t.Errorf("restarts %v: the load never crossed max_lifetime", reasons)
	}
	if slices.Contains(states, upstream.StateReconnecting) || slices.Contains(states, upstream.StateParked) {
		t.Errorf("states went through a failure: %v", states)
	}
	if len(breakers) != 0 {
		t.Errorf("breaker transitions %v", breakers)
	}
	t.Logf("%d generations; restarts %v", st.Generation, reasons)
}
