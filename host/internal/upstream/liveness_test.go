//go:build unix

package upstream_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
	"github.com/mcpvisor/mcpvisor/host/internal/upstream"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// liveServer is the echo example over stdio with a short call timeout, so
// that a test of a server that stops answering does not wait minutes for
// its calls to time out. The timeout is the server's own: generous enough
// for a loaded machine to answer a live server's echo within it.
func liveServer(t *testing.T) *config.Server {
	srv := stdioServer("live", echoBin)
	srv.Timeout = 3 * time.Second
	return srv
}

// callUntilAnswered calls echo until a call succeeds, and returns the
// errors of the calls that failed before. The deadline guards against a
// server that is lost for good, the bug this is about.
func callUntilAnswered(t *testing.T, sup *upstream.Supervisor) []error {
	t.Helper()
	var failed []error
	deadline := time.Now().Add(90 * time.Second)
	for {
		_, err := call(context.Background(), sup, "echo", `{"text":"alive?"}`)
		if err == nil {
			return failed
		}
		failed = append(failed, err)
		if time.Now().After(deadline) {
			t.Fatalf("no call succeeded in 90s; %d failed, the last: %v; status %+v", len(failed), err, sup.Status())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A stdio server that stays alive but answers nothing (a deadlock: the
// echo example's hang tool) is replaced, with the reason unresponsive,
// and calls succeed again on its successor. Before, calls timed out, the
// breaker opened and its half-open probe timed out too, forever.
func TestUnresponsiveServerIsReplaced(t *testing.T) {
	log := &restartLog{}
	h := startObserved(t, liveServer(t), nil, log)
	h.waitState("ready", 1)
	oldPid := pidOf(t, h.sup)

	// The hang call is never answered; its caller gives up, and the
	// server answers nothing from then on.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	if _, err := call(ctx, h.sup, "hang", ""); err == nil {
		t.Fatal("the hang tool answered")
	}
	cancel()
	failed := callUntilAnswered(t, h.sup)
	checkReplaced(t, h, log, oldPid, failed)
}

// A stdio server under SIGSTOP is as lost as a dead one: it is replaced
// (SIGKILL reaches a stopped process), reason unresponsive.
func TestStoppedServerIsReplaced(t *testing.T) {
	log := &restartLog{}
	h := startObserved(t, liveServer(t), nil, log)
	h.waitState("ready", 1)
	oldPid := pidOf(t, h.sup)
	if err := syscall.Kill(oldPid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(oldPid, syscall.SIGKILL) })

	failed := callUntilAnswered(t, h.sup)
	checkReplaced(t, h, log, oldPid, failed)
}

func checkReplaced(t *testing.T, h *harness, log *restartLog, oldPid int, failed []error) {
	t.Helper()
	if len(failed) == 0 {
		t.Fatal("no call failed: the server never stopped answering")
	}
	for _, err := range failed {
		if recovery.Classify(context.Background(), err) == recovery.Unavailable {
			continue // the breaker may have opened
		}
		var re *recovery.Error
		if !errors.As(err, &re) || re.Class != recovery.Timeout {
			t.Errorf("a call to the unresponsive server failed with %v, want a timeout", err)
		}
	}
	if pid := pidOf(t, h.sup); pid == oldPid {
		t.Fatalf("calls succeed on pid %d, the unresponsive process", pid)
	}
	if err := syscall.Kill(oldPid, 0); err == nil || !errors.Is(err, syscall.ESRCH) {
		// The old process is reaped once killed; give a slow stop a moment.
		deadline := time.Now().Add(15 * time.Second)
		for syscall.Kill(oldPid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if syscall.Kill(oldPid, 0) == nil {
			t.Errorf("the unresponsive process %d is still alive", oldPid)
		}
	}
	reasons, _, _ := log.snapshot()
	if !slices.Contains(reasons, upstream.RestartUnresponsive) {
		t.Errorf("restart reasons %v, want %q", reasons, upstream.RestartUnresponsive)
	}
	if st := h.sup.Status(); st.State != upstream.StateReady || st.LastError != "" {
		t.Errorf("after the replacement: state %s, last error %q; want ready with no last error", st.State, st.LastError)
	}
}

// A caller's own short deadline passing on a slow call says nothing about
// the server: it is not replaced, however often that happens.
func TestCallerDeadlineIsNotUnresponsive(t *testing.T) {
	log := &restartLog{}
	h := startObserved(t, liveServer(t), nil, log)
	h.waitState("ready", 1)
	pid := pidOf(t, h.sup)
	// As many as unresponsive_after (2): more would open the breaker,
	// whose strikes count a caller's timeouts too.
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := call(ctx, h.sup, "sleep", `{"ms":2000}`)
		cancel()
		if err == nil {
			t.Fatal("a 2 s sleep answered within 100 ms")
		}
	}
	if got := pidOf(t, h.sup); got != pid {
		t.Errorf("the server was replaced (pid %d → %d) for calls whose callers gave up", pid, got)
	}
	if reasons, _, _ := log.snapshot(); slices.Contains(reasons, upstream.RestartUnresponsive) {
		t.Errorf("restart reasons %v: a caller's deadline made the server unresponsive", reasons)
	}
}

// A server that expires sessions by message under 8 concurrent callers,
// with the CPU busy, is never parked and fails no call: each expiry costs
// a new session and a retry (on the newest session, even when another
// caller's expiry ended the one the retry was meant for), never the retry
// budget.
func TestMessageExpiryUnderLoadNeverParks(t *testing.T) {
	up := testutil.StartServer(t, echoBin, "-http", "127.0.0.1:0", "-expire-after-calls", "3")
	srv := httpServer("expiring", up.URL)
	srv.Reconnect.MaxRetries = 1 // the parks came with the default 5; 1 makes any charge visible
	log := &restartLog{}
	h := startObserved(t, srv, nil, log)
	h.waitState("ready", 1)

	stop := burnCPU(30 * time.Second)
	defer stop()
	const callers, perCaller = 8, 25
	var wg sync.WaitGroup
	var failed atomic.Int64
	errs := make(chan error, callers*perCaller)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perCaller {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				res, err := call(ctx, h.sup, "echo", fmt.Sprintf(`{"text":"c%d-%d"}`, c, i))
				cancel()
				if err == nil && (res == nil || res.IsError) {
					err = fmt.Errorf("result %+v", res)
				}
				if err != nil {
					failed.Add(1)
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	stop()
	close(errs)
	for err := range errs {
		t.Errorf("call failed: %v", err)
		if failed.Load() > 5 {
			break
		}
	}
	_, states, _ := log.snapshot()
	if slices.Contains(states, upstream.StateParked) {
		t.Errorf("the server was parked although it answered every request (states %v)", states)
	}
	if st := h.sup.Status(); st.Generation < 2 {
		t.Errorf("generation %d: the server never expired a session, the test tested nothing", st.Generation)
	}
}

// burnCPU keeps every CPU busy until stop is called or d has passed.
func burnCPU(d time.Duration) (stop func()) {
	done := make(chan struct{})
	var once sync.Once
	end := time.After(d)
	var wg sync.WaitGroup
	for range runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := 0
			for {
				select {
				case <-done:
					return
				case <-end:
					return
				default:
				}
				for i := range 100000 {
					x += i
				}
			}
		}()
	}
	return func() { once.Do(func() { close(done) }); wg.Wait() }
}

// A server that failed its first starts and parked (its tools never
// listed) starts when a call asks for it, within that call's deadline,
// once it can run: it does not wait for its own timer (an hour here).
// The last error of the failed starts is gone once it is ready.
func TestNeverStartedServerStartsOnCall(t *testing.T) {
	dir := t.TempDir()
	flag := filepath.Join(dir, "can-run")
	srv := stdioServer("late", "/bin/sh", "-c", `test -f "$0" || { echo "not yet" >&2; exit 1; }; exec "$1"`, flag, echoBin)
	srv.Reconnect.MaxRetries = 1
	srv.Breaker.Cooldown = time.Hour
	h := start(t, srv, nil)
	st := h.waitState("parked", 0)
	if st.LastError == "" {
		t.Fatalf("parked with no last error: %+v", st)
	}

	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := call(ctx, h.sup, "echo", `{"text":"up"}`)
	if err != nil {
		t.Fatalf("call to a server that can run now: %v (status %+v)", err, h.sup.Status())
	}
	if got := text(t, res); got != "up" {
		t.Errorf("echo said %q", got)
	}
	if st := h.sup.Status(); st.State != upstream.StateReady || st.LastError != "" || !st.LastErrorAt.IsZero() {
		t.Errorf("ready again, status still shows the old error: %+v", st)
	}
}

// A ready stdio server under SIGSTOP is found by its health ping with no
// call made at all, and replaced (reason unresponsive); a call afterwards
// is answered by its successor. Before the health block, a server nobody
// called stayed ready on a stopped process until a client paid for it.
func TestHealthPingReplacesStoppedServer(t *testing.T) {
	srv := stdioServer("watched", echoBin)
	srv.Health = config.Health{Interval: 2 * time.Second, Timeout: time.Second}
	log := &restartLog{}
	h := startObserved(t, srv, nil, log)
	old := h.waitState(upstream.StateReady, 1).Pid
	if old <= 0 {
		t.Fatalf("no pid in status")
	}
	if err := syscall.Kill(old, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(old, syscall.SIGKILL) })

	st := h.waitState(upstream.StateReady, 2)
	if st.Pid == old {
		t.Fatalf("ready again on the stopped process %d", old)
	}
	restartedUnresponsive(t, log)
	testutil.Eventually(t, 15*time.Second, "the stopped process to be killed", func() bool { return !testutil.Alive(old) })
	res, err := call(context.Background(), h.sup, "echo", `{"text":"back"}`)
	if err != nil || text(t, res) != "back" {
		t.Fatalf("call after the replacement: %v", err)
	}
}

// A hung remote server (its process stopped: connections are accepted,
// requests never answered) is found by the health ping and its session
// replaced (reason unresponsive) once it answers again; no call was made
// while it hung.
func TestHealthPingReplacesHungRemoteSession(t *testing.T) {
	up := testutil.StartServer(t, echoBin, "-http", "127.0.0.1:0")
	srv := httpServer("remote", up.URL)
	srv.Health = config.Health{Interval: 2 * time.Second, Timeout: time.Second}
	srv.ConnectTimeout = 2 * time.Second
	log := &restartLog{}
	h := startObserved(t, srv, nil, log)
	h.waitState(upstream.StateReady, 1)
	pid := up.Cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the hung session to be given up", func() bool {
		st := h.sup.Status()
		return st.State != upstream.StateReady && st.State != upstream.StateSuspect
	})
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	h.waitState(upstream.StateReady, 2)
	restartedUnresponsive(t, log)
}

// Status never says ready for a server whose calls time out: after one
// call reached its timeout unanswered (fewer than unresponsive_after, so
// the server is not replaced) it is suspect, with the timeout as its last
// error; once it answers again (SIGCONT) it is ready on the same process,
// with no last error.
func TestSuspectWhileCallsTimeOut(t *testing.T) {
	log := &restartLog{}
	h := startObserved(t, liveServer(t), nil, log)
	pid := h.waitState(upstream.StateReady, 1).Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	if _, err := call(context.Background(), h.sup, "echo", `{"text":"stopped"}`); err == nil {
		t.Fatalf("a stopped server answered (process state now %q; T is stopped)", procState(pid))
	}
	if st := h.sup.Status(); st.State != upstream.StateSuspect || st.LastError == "" {
		t.Errorf("after a call timed out unanswered: state %s, last error %q; want suspect with the timeout", st.State, st.LastError)
	}
	testutil.Eventually(t, 10*time.Second, "the run loop to show it suspect", func() bool {
		_, states, _ := log.snapshot()
		return slices.Contains(states, upstream.StateSuspect)
	})
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	st := h.waitState(upstream.StateReady, 1)
	if st.Pid != pid || st.Generation != 1 || st.LastError != "" {
		t.Errorf("answering again: %+v; want ready on pid %d, generation 1, no last error", st, pid)
	}
}

// The call path covers a remote server too, without a health block: a
// hung HTTP upstream (its process stopped) whose calls time out
// unanswered shows as suspect, then its session is given up as
// unresponsive, and a new one is made once it answers again.
func TestHungRemoteServerIsReplacedByCalls(t *testing.T) {
	up := testutil.StartServer(t, echoBin, "-http", "127.0.0.1:0")
	srv := httpServer("remote", up.URL)
	srv.Timeout = 3 * time.Second
	srv.ConnectTimeout = 2 * time.Second
	log := &restartLog{}
	h := startObserved(t, srv, nil, log)
	h.waitState(upstream.StateReady, 1)
	pid := up.Cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	var last error
	for i := 0; i < 2; i++ {
		_, last = call(context.Background(), h.sup, "echo", `{"text":"hung?"}`)
		if last == nil {
			t.Fatal("a stopped remote server answered")
		}
		if st := h.sup.Status(); i == 0 && st.State != upstream.StateSuspect {
			t.Errorf("after a call timed out unanswered: state %s, want suspect", st.State)
		}
	}
	if !strings.Contains(last.Error(), "unresponsive") {
		t.Errorf("second timed-out call: %v; want it to say the server is being replaced (unresponsive)", last)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	h.waitState(upstream.StateReady, 2)
	restartedUnresponsive(t, log)
}

// restartedUnresponsive waits for the observer to be told of a restart
// with the reason unresponsive: it is told just after the new session
// shows as ready.
func restartedUnresponsive(t *testing.T, log *restartLog) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "a restart with the reason unresponsive", func() bool {
		reasons, _, _ := log.snapshot()
		return slices.Contains(reasons, upstream.RestartUnresponsive)
	})
}

// procState is pid's state letter in /proc (Linux; "" elsewhere or when
// it is gone), for a failure message: a process some other program sent
// SIGCONT is not stopped any more.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i > 0 && i+2 < len(s) {
		return s[i+2 : i+3]
	}
	return ""
}

// Health pings do not mistake a busy server for a hung one: while a tool
// runs longer than several health intervals, the server (which handles
// requests concurrently, as the go-sdk does) answers the pings, and the
// call's result arrives from the same process.
func TestHealthPingSparesABusyServer(t *testing.T) {
	srv := stdioServer("busy", echoBin)
	srv.Health = config.Health{Interval: 2 * time.Second, Timeout: 1500 * time.Millisecond}
	log := &restartLog{}
	h := startObserved(t, srv, nil, log)
	pid := h.waitState(upstream.StateReady, 1).Pid
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := call(ctx, h.sup, "sleep", `{"ms":7000}`); err != nil {
		t.Fatalf("a 7 s tool under 2 s health pings: %v", err)
	}
	if st := h.sup.Status(); st.Pid != pid || st.Generation != 1 || st.State != upstream.StateReady {
		t.Errorf("after the slow call: %+v; want ready on pid %d, generation 1", st, pid)
	}
	if _, states, _ := log.snapshot(); slices.Contains(states, upstream.StateReconnecting) {
		t.Errorf("states %v: a busy server was replaced", states)
	}
}
