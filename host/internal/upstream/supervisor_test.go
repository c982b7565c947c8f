//go:build unix

package upstream_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/registry"
	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
	"github.com/mcpvisor/mcpvisor/host/internal/transport"
	"github.com/mcpvisor/mcpvisor/host/internal/upstream"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

var echoBin, notesBin string

func TestMain(m *testing.M) {
	os.Exit(testutil.BuildAndRun(m, func(b map[string]string) {
		echoBin, notesBin = b["echo"], b["notes"]
	}, "echo", "notes"))
}

// stdioServer is a server block running the echo example over stdio, with
// test-sized backoff.
func stdioServer(name string, command string, args ...string) *config.Server {
	c := &config.Config{Servers: []*config.Server{{
		Name: name, Prefix: name, Command: command, Args: args,
		Reconnect: config.Reconnect{MaxRetries: 3, MaxBackoff: 20 * time.Millisecond,
			ParkedRetry: time.Hour, HealthyAfter: time.Hour},
	}}}
	c.ApplyDefaults()
	return c.Servers[0]
}

type harness struct {
	t   *testing.T
	sup *upstream.Supervisor

	mu       sync.Mutex
	catalogs []*registry.Catalog
}

func start(t *testing.T, srv *config.Server, httpClient *http.Client) *harness {
	t.Helper()
	return startObserved(t, srv, httpClient, nil)
}

// startObserved is start with an Observer (nil: none).
func startObserved(t *testing.T, srv *config.Server, httpClient *http.Client, obs upstream.Observer) *harness {
	t.Helper()
	logger := hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Debug})
	if testing.Verbose() {
		logger = hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Debug})
	}
	d, err := transport.NewDialer(srv, transport.Options{Logger: logger, HTTPClient: httpClient})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t}
	h.sup = upstream.New(srv, upstream.Options{
		Logger:      logger,
		Dialer:      d,
		BackoffBase: 10 * time.Millisecond,
		Observer:    obs,
		OnCatalog: func(_ string, c *registry.Catalog) {
			h.mu.Lock()
			h.catalogs = append(h.catalogs, c)
			h.mu.Unlock()
		},
	})
	h.sup.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		// The group is led by the server's keeper (transport/group.go),
		// not by the server itself: take its id while the server runs.
		pgid := 0
		if pid := h.sup.Status().Pid; pid > 0 {
			pgid, _ = syscall.Getpgid(pid)
		}
		if err := h.sup.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
		if pgid > 0 {
			if left := testutil.GroupMembers(pgid); len(left) > 0 {
				t.Errorf("processes left in group %d after Stop: %v", pgid, left)
			}
		}
	})
	return h
}

// waitState waits for the supervisor to reach state with a generation of
// at least gen. The deadline guards against hangs; it is not a timing claim.
func (h *harness) waitState(state upstream.State, gen uint64) upstream.Status {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := h.sup.Status()
		if st.State == state && st.Generation >= gen {
			return st
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("server never reached %s (generation ≥ %d); last status %+v", state, gen, st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *harness) lastCatalog() *registry.Catalog {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.catalogs) == 0 {
		h.t.Fatal("no catalog published")
	}
	return h.catalogs[len(h.catalogs)-1]
}

func call(ctx context.Context, sup *upstream.Supervisor, tool, args string) (*mcp.CallToolResult, error) {
	p := &mcp.CallToolParamsRaw{Name: tool}
	if args != "" {
		p.Arguments = json.RawMessage(args)
	}
	return sup.CallTool(ctx, nil, p)
}

// callRaw calls tool on the raw path the gateway's fast path uses.
func callRaw(ctx context.Context, sup *upstream.Supervisor, tool, args string) (*mcp.CallToolResult, error) {
	if args == "" {
		args = "{}"
	}
	raw, err := sup.Forward(ctx, nil, "tools/call", tool, json.RawMessage(fmt.Sprintf(`{"name":%q,"arguments":%s}`, tool, args)))
	if err != nil {
		return nil, err
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// callPaths are the two ways a tools/call reaches an upstream: through the
// SDK client (CallTool) and forwarded as bytes (Forward, the gateway's stdio path).
// The HTTP recovery tests run on both.
var callPaths = []struct {
	name string
	call func(ctx context.Context, sup *upstream.Supervisor, tool, args string) (*mcp.CallToolResult, error)
}{{"sdk", call}, {"raw", callRaw}}

func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if res == nil || len(res.Content) == 0 {
		t.Fatalf("empty result %+v", res)
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("first content is %T, want text", res.Content[0])
	}
	return tc.Text
}

func pidOf(t *testing.T, sup *upstream.Supervisor) int {
	t.Helper()
	res, err := call(context.Background(), sup, "pid", "")
	if err != nil {
		t.Fatalf("pid: %v", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(text(t, res)))
	if err != nil {
		t.Fatalf("pid tool said %q", text(t, res))
	}
	return n
}

func TestReadyCallAndCatalog(t *testing.T) {
	h := start(t, stdioServer("echo", echoBin), nil)
	st := h.waitState("ready", 1)
	if st.Generation != 1 || st.Pid == 0 || st.Breaker != "closed" {
		t.Errorf("status %+v", st)
	}
	res, err := call(context.Background(), h.sup, "echo", `{"text":"hello"}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := text(t, res); got != "hello" {
		t.Errorf("echo said %q", got)
	}
	cat := h.lastCatalog()
	names := map[string]bool{}
	for _, tool := range cat.Tools {
		names[tool.Name] = true
	}
	for _, want := range []string{"echo", "add", "pid", "crash", "sleep"} {
		if !names[want] {
			t.Errorf("catalog lacks %q", want)
		}
	}
}

func TestApplicationErrorsPassThroughWithoutReconnect(t *testing.T) {
	h := start(t, stdioServer("echo", echoBin), nil)
	h.waitState("ready", 1)
	ctx := context.Background()

	res, err := call(ctx, h.sup, "fail", `{"message":"nope"}`)
	if err != nil || !res.IsError {
		t.Fatalf("fail: res=%+v err=%v, want an isError result", res, err)
	}
	_, err = call(ctx, h.sup, "jsonrpc_error", "")
	var wire *jsonrpc.Error
	if !errors.As(err, &wire) || wire.Code != -32042 || wire.Message != "custom failure" {
		t.Fatalf("jsonrpc_error: err = %#v, want the upstream's -32042", err)
	}
	if st := h.sup.Status(); st.Generation != 1 || st.Breaker != "closed" || st.BreakerFailures != 0 {
		t.Fatalf("application errors caused reconnects or strikes: %+v", st)
	}
}

func TestSIGKILLRespawns(t *testing.T) {
	h := start(t, stdioServer("echo", echoBin), nil)
	st := h.waitState("ready", 1)
	old := pidOf(t, h.sup)
	if old != st.Pid {
		t.Fatalf("pid tool %d != status pid %d", old, st.Pid)
	}
	syscall.Kill(old, syscall.SIGKILL)
	h.waitState("ready", 2)
	if now := pidOf(t, h.sup); now == old {
		t.Fatal("still talking to the killed process")
	}
	if testutil.Alive(old) {
		t.Fatal("killed process not reaped")
	}
	// Ready again: the death is past, and status shows no last error.
	if st := h.sup.Status(); st.State != "ready" || st.LastError != "" || !st.LastErrorAt.IsZero() {
		t.Errorf("status after respawn: %+v", st)
	}
}

// Killing an `sh -c` wrapper leaves its child holding the pipes; the death
// must still be seen and the orphan must not survive.
func TestWrapperKillRespawnsAndReapsOrphan(t *testing.T) {
	h := start(t, stdioServer("wrapped", "sh", "-c", echoBin+"; exit $?"), nil)
	st := h.waitState("ready", 1)
	child := pidOf(t, h.sup)
	if child == st.Pid {
		t.Fatal("sh exec'd the server; the wrapper case is not exercised")
	}
	syscall.Kill(st.Pid, syscall.SIGKILL) // the wrapper only
	h.waitState("ready", 2)
	if pidOf(t, h.sup) == child {
		t.Fatal("still talking to the orphaned child")
	}
	testutil.Eventually(t, 10*time.Second, "orphaned child to die", func() bool { return !testutil.Alive(child) })
}

func TestCrashMidCallIsNotReplayed(t *testing.T) {
	h := start(t, stdioServer("echo", echoBin), nil)
	h.waitState("ready", 1)
	_, err := call(context.Background(), h.sup, "crash", "")
	var re *recovery.Error
	if !errors.As(err, &re) || re.Class != recovery.ProcessDied || !strings.Contains(err.Error(), "outcome is unknown") {
		t.Fatalf("crash: err = %v, want process_died with outcome unknown", err)
	}
	st := h.waitState("ready", 2)
	if st.Generation != 2 {
		t.Fatalf("generation %d: the crashing call was replayed", st.Generation)
	}
	if _, err := call(context.Background(), h.sup, "echo", `{"text":"after"}`); err != nil {
		t.Fatalf("call after recovery: %v", err)
	}
}

// Concurrent callers hitting one dead session cause one reconnect, every
// call ends with a result or a classified error, and none hangs.
func TestConcurrentCallsDuringKill(t *testing.T) {
	h := start(t, stdioServer("echo", echoBin), nil)
	st := h.waitState("ready", 1)

	const workers, calls = 16, 30
	var wg sync.WaitGroup
	var ok, failed atomic.Int64
	errc := make(chan error, workers*calls)
	killed := make(chan struct{})
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				if w == 0 && i == calls/3 {
					syscall.Kill(st.Pid, syscall.SIGKILL)
					close(killed)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := call(ctx, h.sup, "pid", "")
				cancel()
				if err == nil {
					ok.Add(1)
					continue
				}
				failed.Add(1)
				var re *recovery.Error
				if !errors.As(err, &re) {
					errc <- fmt.Errorf("unclassified error: %v", err)
				} else if re.Class == recovery.Timeout {
					errc <- fmt.Errorf("call hung until its deadline: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	<-killed
	final := h.waitState("ready", 2)
	if final.Generation != 2 {
		t.Errorf("generation %d after one kill: concurrent failures caused extra reconnects", final.Generation)
	}
	if _, err := call(context.Background(), h.sup, "pid", ""); err != nil {
		t.Errorf("call after recovery: %v", err)
	}
	t.Logf("%d calls succeeded, %d failed with classified errors", ok.Load(), failed.Load())
}

func TestFailingServerParksAndRevives(t *testing.T) {
	srv := stdioServer("broken", "sh", "-c", "echo cannot start >&2; exit 1")
	srv.Reconnect.MaxRetries = 2
	h := start(t, srv, nil)
	st := h.waitState("parked", 0)
	if st.Generation != 0 || !strings.Contains(st.LastError, "cannot start") {
		t.Errorf("parked status %+v", st)
	}
	// The supervisor is alive while parked: calls fail fast and cleanly.
	_, err := call(context.Background(), h.sup, "echo", `{"text":"x"}`)
	var re *recovery.Error
	if !errors.As(err, &re) || re.Class != recovery.Unavailable || !strings.Contains(err.Error(), "parked") {
		t.Fatalf("call to parked server: %v", err)
	}
	select {
	case <-h.sup.Done():
		t.Fatal("supervisor exited instead of parking")
	default:
	}
	// A revive re-enters the transport: the server fails again and parks again.
	before := h.sup.Status().LastErrorAt
	h.sup.Revive()
	testutil.Eventually(t, 30*time.Second, "a new attempt after revive", func() bool {
		st := h.sup.Status()
		return st.LastErrorAt.After(before) && st.State == "parked"
	})
}

// A server that connects and drops at once must not respawn forever.
func TestConnectThenDropParks(t *testing.T) {
	srv := stdioServer("flappy", "timeout", "-s", "KILL", "0.3", echoBin)
	srv.Reconnect.MaxRetries = 2
	h := start(t, srv, nil)
	st := h.waitState("parked", 0)
	if st.Generation != 3 {
		t.Errorf("parked after generation %d, want 3 (first try + 2 retries)", st.Generation)
	}
	h.mu.Lock()
	last := h.catalogs[len(h.catalogs)-1]
	h.mu.Unlock()
	if last != nil {
		t.Error("parking did not deregister the server's catalog")
	}
}

// A server that proves healthy between drops never exhausts the budget.
func TestHealthyServerThatDropsNeverParks(t *testing.T) {
	srv := stdioServer("echo", echoBin)
	srv.Reconnect.MaxRetries = 1
	h := start(t, srv, nil)
	for gen := uint64(1); gen <= 4; gen++ {
		st := h.waitState("ready", gen)
		if _, err := call(context.Background(), h.sup, "echo", `{"text":"ok"}`); err != nil {
			t.Fatalf("generation %d: %v", gen, err)
		}
		// The successful call resets the budget; wait until the run loop
		// has taken it, then kill.
		testutil.Eventually(t, 10*time.Second, "budget reset", func() bool { return h.sup.Status().Retries == 0 })
		syscall.Kill(st.Pid, syscall.SIGKILL)
	}
	st := h.waitState("ready", 5)
	if st.State == "parked" {
		t.Fatal("healthy server parked")
	}
}

// sessionProxy sits in front of a real streamable HTTP server. When told to,
// it rewrites the session id of the next tools/call requests to one the
// server never issued, so the server itself answers 404 — exactly what a
// server that garbage-collected the session does.
type sessionProxy struct {
	*httptest.Server
	toolCalls  atomic.Int64
	breakNext  atomic.Int64
	unauthNext atomic.Int64
	// method is the JSON-RPC method whose requests are counted and broken
	// ("tools/call" unless set before use).
	method atomic.Value
}

func newSessionProxy(t *testing.T, target string) *sessionProxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &sessionProxy{}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	rp.FlushInterval = -1
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			m, _ := p.method.Load().(string)
			if m == "" {
				m = "tools/call"
			}
			if bytes.Contains(body, []byte(`"method":"`+m+`"`)) {
				p.toolCalls.Add(1)
				if p.unauthNext.Add(-1) >= 0 {
					http.Error(w, "token expired", http.StatusUnauthorized)
					return
				}
				p.unauthNext.Store(0)
				if p.breakNext.Add(-1) >= 0 {
					r.Header.Set("Mcp-Session-Id", "forgotten-"+r.Header.Get("Mcp-Session-Id"))
				} else {
					p.breakNext.Store(0)
				}
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

func httpServer(name, u string) *config.Server {
	c := &config.Config{Servers: []*config.Server{{
		Name: name, Prefix: name, URL: u,
		Reconnect: config.Reconnect{MaxRetries: 3, MaxBackoff: 20 * time.Millisecond,
			ParkedRetry: time.Hour, HealthyAfter: time.Hour},
	}}}
	c.ApplyDefaults()
	return c.Servers[0]
}

// startBehindProxy runs the echo example over HTTP behind a sessionProxy
// and a supervisor for it (adjusted by tune, if set), ready.
func startBehindProxy(t *testing.T, tune func(*config.Server)) (*harness, *sessionProxy) {
	t.Helper()
	up := testutil.StartServer(t, echoBin, "-http", "127.0.0.1:0")
	proxy := newSessionProxy(t, up.URL)
	srv := httpServer("remote", proxy.URL+"/mcp")
	if tune != nil {
		tune(srv)
	}
	h := start(t, srv, nil)
	h.waitState("ready", 1)
	return h, proxy
}

func TestExpiredSessionReconnectsAndRetriesOnce(t *testing.T) {
	for _, cp := range callPaths {
		t.Run(cp.name, func(t *testing.T) {
			h, proxy := startBehindProxy(t, nil)
			ctx := context.Background()

			proxy.breakNext.Store(1)
			proxy.toolCalls.Store(0)
			res, err := cp.call(ctx, h.sup, "echo", `{"text":"again"}`)
			if err != nil {
				t.Fatalf("call on an expired session: %v", err)
			}
			if got := text(t, res); got != "again" {
				t.Errorf("result %q", got)
			}
			if n := proxy.toolCalls.Load(); n != 2 {
				t.Errorf("%d attempts, want exactly 2", n)
			}
			if st := h.sup.Status(); st.Generation != 2 {
				t.Errorf("generation %d, want 2 (one reconnect)", st.Generation)
			}

			// A retry whose new session expired too (another caller's
			// expiry, under load) is sent again on the newest session:
			// the request never ran.
			proxy.breakNext.Store(2)
			proxy.toolCalls.Store(0)
			res, err = cp.call(ctx, h.sup, "echo", `{"text":"thrice"}`)
			if err != nil || text(t, res) != "thrice" {
				t.Fatalf("double expiry: %v, want the third session to answer", err)
			}
			if n := proxy.toolCalls.Load(); n != 3 {
				t.Errorf("%d attempts, want exactly 3", n)
			}

			// A server that expires every session fails the call after
			// the bounded retries (1 + 32), with a session_gone error.
			proxy.breakNext.Store(1000)
			proxy.toolCalls.Store(0)
			_, err = cp.call(ctx, h.sup, "echo", `{"text":"x"}`)
			var re *recovery.Error
			if !errors.As(err, &re) || re.Class != recovery.SessionGone {
				t.Fatalf("endless expiry: err = %v, want a session_gone error", err)
			}
			if n := proxy.toolCalls.Load(); n != 33 {
				t.Errorf("%d attempts, want exactly 33", n)
			}
			proxy.breakNext.Store(0)

			// An unrelated error does not reconnect. (The failed retry's session
			// was reported broken too, so wait for its replacement first.)
			gen := h.waitState("ready", 37).Generation
			proxy.toolCalls.Store(0)
			if res, err := cp.call(ctx, h.sup, "fail", `{"message":"Tool failed to execute"}`); err != nil || !res.IsError {
				t.Fatalf("fail: %v", err)
			}
			if n := proxy.toolCalls.Load(); n != 1 {
				t.Errorf("%d attempts for an application error, want 1", n)
			}
			if h.sup.Status().Generation != gen {
				t.Error("an application error caused a reconnect")
			}
		})
	}
}

// The upstream really forgets every session (SIGUSR1); the next calls
// succeed on a new session without the caller seeing an error.
func TestServerForgetsSessions(t *testing.T) {
	for _, cp := range callPaths {
		t.Run(cp.name, func(t *testing.T) {
			up := testutil.StartServer(t, echoBin, "-http", "127.0.0.1:0", "-forget-sessions-signal")
			h := start(t, httpServer("remote", up.URL), nil)
			h.waitState("ready", 1)
			for i := 0; i < 3; i++ {
				up.Cmd.Process.Signal(syscall.SIGUSR1)
				// This round's line: WaitLine would also find an earlier
				// round's, and the server could then forget the session
				// the call is about to reconnect to.
				testutil.Eventually(t, 10*time.Second, "the server to forget its sessions", func() bool {
					return up.CountLines("forgot") >= i+1
				})
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				res, err := cp.call(ctx, h.sup, "echo", `{"text":"still here"}`)
				cancel()
				if err != nil {
					t.Fatalf("round %d: %v", i, err)
				}
				if got := text(t, res); got != "still here" {
					t.Fatalf("round %d: %q", i, got)
				}
			}
		})
	}
}

func TestCanceledCallDoesNotReconnect(t *testing.T) {
	h := start(t, stdioServer("echo", echoBin), nil)
	h.waitState("ready", 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := call(ctx, h.sup, "sleep", `{"ms":60000}`)
		done <- err
	}()
	// Cancel once the call is in flight; the result must be the cancel.
	time.Sleep(50 * time.Millisecond)
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if st := h.sup.Status(); st.Generation != 1 || st.BreakerFailures != 0 {
		t.Fatalf("a canceled call caused a reconnect or strike: %+v", st)
	}
}

func TestStoppedSupervisorFailsCleanly(t *testing.T) {
	h := start(t, stdioServer("echo", echoBin), nil)
	h.waitState("ready", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := h.sup.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := call(ctx, h.sup, "echo", `{"text":"x"}`)
	if !errors.Is(err, upstream.ErrStopped) {
		t.Fatalf("err = %v, want ErrStopped", err)
	}
}

func TestUnauthorizedReconnectsOnceThenNeedsReauth(t *testing.T) {
	for _, cp := range callPaths {
		t.Run(cp.name, func(t *testing.T) {
			h, proxy := startBehindProxy(t, nil)
			ctx := context.Background()

			proxy.unauthNext.Store(1)
			proxy.toolCalls.Store(0)
			res, err := cp.call(ctx, h.sup, "echo", `{"text":"authed"}`)
			if err != nil {
				t.Fatalf("one 401: %v", err)
			}
			if text(t, res) != "authed" || proxy.toolCalls.Load() != 2 {
				t.Fatalf("one 401: result %q after %d attempts, want the retry's result after 2", text(t, res), proxy.toolCalls.Load())
			}

			h.waitState("ready", 2)
			proxy.unauthNext.Store(2)
			proxy.toolCalls.Store(0)
			_, err = cp.call(ctx, h.sup, "echo", `{"text":"x"}`)
			var re *recovery.Error
			if !errors.As(err, &re) || re.Class != recovery.Auth || !re.NeedsReauth || !strings.Contains(err.Error(), "needs_reauth") {
				t.Fatalf("two 401s: err = %v, want a needs_reauth auth error", err)
			}
			if n := proxy.toolCalls.Load(); n != 2 {
				t.Errorf("%d attempts, want exactly 2", n)
			}
		})
	}
}

// An upstream that reads requests and never answers (say, one that ignores
// an initialize it does not understand) must not hang connect past
// connect_timeout; it is retried and parked like any failing server.
func TestSilentUpstreamBoundedByConnectTimeout(t *testing.T) {
	srv := stdioServer("silent", "sh", "-c", "cat > /dev/null")
	srv.ConnectTimeout = 200 * time.Millisecond
	srv.Reconnect.MaxRetries = 1
	h := start(t, srv, nil)
	st := h.waitState("parked", 0)
	if !strings.Contains(st.LastError, "connect_timeout") {
		t.Fatalf("last error %q, want it to name connect_timeout", st.LastError)
	}
}

// A per-server protocol_version is what the upstream is asked for.
func TestProtocolVersionOverride(t *testing.T) {
	for _, v := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(v, func(t *testing.T) {
			srv := stdioServer("echo", echoBin)
			srv.ProtocolVersion = v
			h := start(t, srv, nil)
			h.waitState("ready", 1)
			if _, err := call(context.Background(), h.sup, "echo", `{"text":"v"}`); err != nil {
				t.Fatal(err)
			}
			if got := h.sup.ProtocolVersion(); got != v {
				t.Fatalf("negotiated %q, want %q", got, v)
			}
		})
	}
}

// Session expiry is recovered the same way for every operation, not only
// tools/call: one reconnect, exactly two attempts, the retry's result.
func TestExpiredSessionRecoveryForEveryOperation(t *testing.T) {
	up := testutil.StartServer(t, notesBin, "-http", "127.0.0.1:0")
	proxy := newSessionProxy(t, up.URL)
	h := start(t, httpServer("notes", proxy.URL+"/mcp"), nil)
	h.waitState("ready", 1)
	ops := []struct {
		method string
		run    func(ctx context.Context) error
	}{
		{"resources/list", func(ctx context.Context) error {
			res, err := h.sup.ListResources(ctx, nil)
			if err == nil && len(res.Resources) == 0 {
				err = errors.New("no resources")
			}
			return err
		}},
		{"resources/read", func(ctx context.Context) error {
			_, err := h.sup.ReadResource(ctx, nil, &mcp.ReadResourceParams{URI: "notes://list"})
			return err
		}},
		{"resources/templates/list", func(ctx context.Context) error {
			_, err := h.sup.ListResourceTemplates(ctx, nil)
			return err
		}},
		{"prompts/list", func(ctx context.Context) error {
			_, err := h.sup.ListPrompts(ctx, nil)
			return err
		}},
		{"prompts/get", func(ctx context.Context) error {
			_, err := h.sup.GetPrompt(ctx, nil, &mcp.GetPromptParams{Name: "summarize", Arguments: map[string]string{"name": "welcome"}})
			return err
		}},
		{"completion/complete", func(ctx context.Context) error {
			_, err := h.sup.Complete(ctx, nil, &mcp.CompleteParams{
				Ref:      &mcp.CompleteReference{Type: "ref/prompt", Name: "summarize"},
				Argument: mcp.CompleteParamsArgument{Name: "name", Value: "w"},
			})
			return err
		}},
		{"resources/subscribe", func(ctx context.Context) error {
			return h.sup.Subscribe(ctx, &mcp.SubscribeParams{URI: "notes://list"})
		}},
	}
	gen := uint64(1)
	for _, op := range ops {
		t.Run(op.method, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			h.waitState("ready", gen)
			proxy.method.Store(op.method)
			proxy.toolCalls.Store(0)
			proxy.breakNext.Store(1)
			if err := op.run(ctx); err != nil {
				t.Fatalf("%s on an expired session: %v", op.method, err)
			}
			// Two attempts; for list methods the reconnect's own catalog
			// listing sends one more request of the same method.
			want := int64(2)
			if strings.HasSuffix(op.method, "/list") {
				want = 3
			}
			if n := proxy.toolCalls.Load(); n != want {
				t.Errorf("%d %s requests, want exactly %d", n, op.method, want)
			}
			gen++
			if st := h.sup.Status(); st.Generation != gen {
				t.Errorf("generation %d, want %d (one reconnect)", st.Generation, gen)
			}
		})
	}
}

// testServer is a stdio echo server with a breaker sized for tests.
func breakerServer(threshold int, cooldown time.Duration, maxRetries int) *config.Server {
	srv := stdioServer("echo", echoBin)
	srv.Breaker = config.Breaker{Threshold: threshold, Cooldown: cooldown}
	srv.Reconnect.MaxRetries = maxRetries
	return srv
}

func waitCooldown(t *testing.T, sup *upstream.Supervisor) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, "breaker cooldown", func() bool {
		st := sup.Status()
		return st.Breaker == "open" && time.Now().After(st.BreakerRetryAt)
	})
}

// A parked server: calls fail fast while the breaker is open, saying when
// it will be tried again; after the cooldown the next call is a probe that
// revives the server, waits for it and goes through (revival by use).
func TestBreakerProbeRevivesParkedServer(t *testing.T) {
	h := start(t, breakerServer(1, 300*time.Millisecond, 0), nil)
	st := h.waitState("ready", 1)
	// A death with no call in flight spends the budget (max_retries 0).
	syscall.Kill(st.Pid, syscall.SIGKILL)
	h.waitState("parked", 1)
	h.mu.Lock()
	last := h.catalogs[len(h.catalogs)-1]
	h.mu.Unlock()
	if last != nil {
		t.Fatal("parked server's tools not deregistered")
	}

	ctx := context.Background()
	_, err := call(ctx, h.sup, "echo", `{"text":"x"}`)
	var re *recovery.Error
	if !errors.As(err, &re) || re.Class != recovery.Unavailable || re.RetryAt.IsZero() {
		t.Fatalf("call while open: %v, want a fail-fast error with a retry time", err)
	}

	// The parked server's own first probe is due when the cooldown ends
	// (its parked delay starts at the cooldown) and on a loaded machine may
	// revive it before this call; either way the next call must go through
	// on generation 2 with the breaker closed.
	testutil.Eventually(t, 30*time.Second, "breaker cooldown or self-revival", func() bool {
		st := h.sup.Status()
		return st.Breaker != "open" || time.Now().After(st.BreakerRetryAt)
	})
	res, err := call(ctx, h.sup, "echo", `{"text":"revived"}`)
	if err != nil || text(t, res) != "revived" {
		t.Fatalf("probe on a parked server: %v, want the call to revive it and go through", err)
	}
	if st := h.sup.Status(); st.Generation != 2 || st.State != "ready" || st.Breaker != "closed" {
		t.Errorf("after revival: %+v, want generation 2, ready, breaker closed", st)
	}
	if h.lastCatalog() == nil {
		t.Error("revived server's tools not registered again")
	}
}

// A probe that fails re-opens the breaker with a fresh cooldown and the
// next call is blocked. Timeouts open the breaker without any reconnect
// (which would close it).
func TestBreakerFailedProbeBlocksNextCall(t *testing.T) {
	srv := breakerServer(1, 300*time.Millisecond, 10)
	srv.Timeout = 200 * time.Millisecond
	h := start(t, srv, nil)
	h.waitState("ready", 1)
	ctx := context.Background()
	if _, err := call(ctx, h.sup, "sleep", `{"ms":5000}`); err == nil {
		t.Fatal("sleep past the timeout returned no error")
	}
	first := h.sup.Status()
	if first.Breaker != "open" {
		t.Fatalf("breaker %s after a timeout with threshold 1, want open", first.Breaker)
	}
	waitCooldown(t, h.sup)
	// The probe fails too.
	_, err := call(ctx, h.sup, "sleep", `{"ms":5000}`)
	var re *recovery.Error
	if !errors.As(err, &re) || re.Class != recovery.Timeout {
		t.Fatalf("probe: %v, want a timeout", err)
	}
	st := h.sup.Status()
	if st.Breaker != "open" || !st.BreakerRetryAt.After(first.BreakerRetryAt) {
		t.Fatalf("after the failed probe: breaker %s retry at %v, want open with a fresh cooldown", st.Breaker, st.BreakerRetryAt)
	}
	_, err = call(ctx, h.sup, "echo", `{"text":"x"}`)
	if !errors.As(err, &re) || re.Class != recovery.Unavailable || !strings.Contains(err.Error(), "circuit open") {
		t.Fatalf("call after a failed probe: %v, want the breaker to block it", err)
	}
	if st.Generation != 1 {
		t.Errorf("generation %d: timeouts must not reconnect", st.Generation)
	}
}

// A successful reconnect closes the breaker and clears its count, even
// when the call that caused the reconnect then failed.
func TestReconnectResetsBreakerCountEvenIfRetryFails(t *testing.T) {
	h, proxy := startBehindProxy(t, func(srv *config.Server) {
		// Long enough that the reconnect inside the second call never hits
		// it on a loaded machine, short enough to time out the sleep.
		srv.Timeout = 2 * time.Second
		srv.Breaker = config.Breaker{Threshold: 3, Cooldown: time.Hour}
	})
	ctx := context.Background()
	if _, err := call(ctx, h.sup, "sleep", `{"ms":60000}`); err == nil {
		t.Fatal("sleep past the timeout returned no error")
	}
	if st := h.sup.Status(); st.BreakerFailures != 1 {
		t.Fatalf("breaker failures %d after a timeout, want 1", st.BreakerFailures)
	}
	proxy.breakNext.Store(1000) // every retry expires too
	if _, err := call(ctx, h.sup, "echo", `{"text":"x"}`); err == nil {
		t.Fatal("endlessly expired call returned no error")
	}
	proxy.breakNext.Store(0)
	if st := h.sup.Status(); st.BreakerFailures != 0 || st.Breaker != "closed" {
		t.Fatalf("after a reconnect: breaker %s with %d failures, want closed with 0", st.Breaker, st.BreakerFailures)
	}
}

// A call longer than the server's timeout ends with a Timeout error, on
// both call paths and both transports; the timeout counts from the call's
// start (the raw HTTP path makes its context only once the request is
// sent). The session stays usable.
func TestCallTimeoutEndsSlowCall(t *testing.T) {
	servers := map[string]func(t *testing.T) *config.Server{
		"stdio": func(t *testing.T) *config.Server { return stdioServer("echo", echoBin) },
		"http": func(t *testing.T) *config.Server {
			up := testutil.StartServer(t, echoBin, "-http", "127.0.0.1:0")
			return httpServer("remote", up.URL)
		},
	}
	for name, mk := range servers {
		for _, cp := range callPaths {
			t.Run(name+"/"+cp.name, func(t *testing.T) {
				srv := mk(t)
				srv.Timeout = time.Second
				h := start(t, srv, nil)
				h.waitState("ready", 1)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_, err := cp.call(ctx, h.sup, "sleep", `{"ms":60000}`)
				var re *recovery.Error
				if !errors.As(err, &re) || re.Class != recovery.Timeout {
					t.Fatalf("slow call: %v, want a Timeout error", err)
				}
				if ctx.Err() != nil {
					t.Fatal("the call ran until the test's own deadline")
				}
				res, err := cp.call(ctx, h.sup, "echo", `{"text":"after"}`)
				if err != nil || text(t, res) != "after" {
					t.Fatalf("call after the timeout: %v", err)
				}
			})
		}
	}
}

// A request that crashes the server is one caller's problem: the deaths it
// causes are not charged to the retry budget, so it cannot park the server
// for everyone. Here the budget is one retry; six crashing calls in a row
// (each on a fresh process that no call has proven yet) leave the server
// ready and answering.
func TestCrashingCallsDoNotParkTheServer(t *testing.T) {
	srv := stdioServer("echo", echoBin)
	srv.Reconnect.MaxRetries = 1
	h := start(t, srv, nil)
	h.waitState("ready", 1)
	for i := range 6 {
		_, err := call(context.Background(), h.sup, "crash", "")
		var re *recovery.Error
		if !errors.As(err, &re) || re.Class != recovery.ProcessDied {
			t.Fatalf("crash %d: err = %v, want process_died", i+1, err)
		}
		st := h.waitState("ready", uint64(i+2))
		if st.State != "ready" {
			t.Fatalf("after crash %d the server is %s", i+1, st.State)
		}
	}
	if _, err := call(context.Background(), h.sup, "echo", `{"text":"still here"}`); err != nil {
		t.Fatalf("call after the crashes: %v", err)
	}
}

// One crash is one breaker strike however many calls were in flight, and
// calls that arrive while the server respawns wait for it: three slow calls
// in flight when the process is killed fail (their outcome is unknown), and
// the next twenty calls all succeed with the breaker closed.
func TestCrashWithCallsInFlightIsOneStrike(t *testing.T) {
	h := start(t, breakerServer(3, time.Hour, 3), nil)
	st := h.waitState("ready", 1)
	ctx := context.Background()
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := call(ctx, h.sup, "sleep", `{"ms":60000}`)
			errs <- err
		}()
	}
	time.Sleep(200 * time.Millisecond) // let the three calls reach the server
	syscall.Kill(st.Pid, syscall.SIGKILL)
	for range 3 {
		if err := <-errs; err == nil {
			t.Error("a call in flight during the kill succeeded")
		}
	}
	for i := range 20 {
		res, err := call(ctx, h.sup, "echo", fmt.Sprintf(`{"text":"call %d"}`, i))
		if err != nil || text(t, res) != fmt.Sprintf("call %d", i) {
			t.Fatalf("call %d after the kill: %v", i, err)
		}
	}
	if st := h.sup.Status(); st.Breaker != "closed" || st.Generation != 2 {
		t.Errorf("after the kill: breaker %s, generation %d; want closed and one respawn", st.Breaker, st.Generation)
	}
}

// A parked server tries again by itself after the breaker's cooldown, not
// after parked_retry, and waits twice as long after each further park;
// the attempt that follows a park re-parks it at once when it fails (park
// and re-arm), instead of spending a whole new budget.
func TestParkedServerBacksOffFromCooldown(t *testing.T) {
	srv := stdioServer("broken", "sh", "-c", "exit 3")
	srv.Reconnect.MaxRetries = 2
	srv.Reconnect.ParkedRetry = time.Hour
	srv.Breaker = config.Breaker{Threshold: 3, Cooldown: 300 * time.Millisecond}
	h := start(t, srv, nil)

	// Each park is a state change to parked; its next attempt says how
	// long that park waits.
	var waits []time.Duration
	deadline := time.Now().Add(30 * time.Second)
	var since time.Time
	for len(waits) < 3 && time.Now().Before(deadline) {
		st := h.sup.Status()
		if st.State == "parked" && !st.Since.Equal(since) {
			since = st.Since
			waits = append(waits, st.NextAttempt.Sub(st.Since))
			if st.Retries != 0 && len(waits) > 1 {
				t.Errorf("park %d after %d retries, want it at once after the attempt that followed the previous park", len(waits), st.Retries)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(waits) < 3 {
		t.Fatalf("parked %d times within 30s (waits %v), want 3: the parked server did not try again by itself after the cooldown", len(waits), waits)
	}
	for i, want := range []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, 1200 * time.Millisecond} {
		// Generous bounds: the wait is computed, not measured.
		if waits[i] < want-50*time.Millisecond || waits[i] > want+50*time.Millisecond {
			t.Errorf("park %d waits %s, want %s", i+1, waits[i], want)
		}
	}
}

// A call to a server that stopped reading its input (SIGSTOP, with a
// request larger than the pipe's buffer) fails at its timeout with an
// error that says so, on both call paths, and so does the next call: no
// write waits past a deadline. The request left half-written closes the
// session, and the stuck process is replaced.
func TestWriteToStuckServerHoldsTheDeadline(t *testing.T) {
	const stuckWriteSlack = 500 * time.Millisecond
	srv := stdioServer("echo", echoBin)
	srv.Timeout = time.Second
	srv.Breaker = config.Breaker{Threshold: 100, Cooldown: time.Hour}
	h := start(t, srv, nil)

	big := fmt.Sprintf(`{"text":%q}`, strings.Repeat("x", 256<<10))
	for i, path := range []func() error{
		func() error { _, err := call(context.Background(), h.sup, "echo", big); return err },
		func() error { _, err := callRaw(context.Background(), h.sup, "echo", big); return err },
	} {
		// Each path meets a stopped server of its own: the half-written
		// request of one ends that session, and a call made while it is
		// being replaced would measure the replacement, not the write.
		st := h.waitState("ready", uint64(i+1))
		syscall.Kill(st.Pid, syscall.SIGSTOP)
		defer syscall.Kill(st.Pid, syscall.SIGCONT)
		start := time.Now()
		err := path()
		took := time.Since(start)
		var re *recovery.Error
		if !errors.As(err, &re) || re.Class != recovery.Timeout {
			t.Errorf("call %d: %v, want a timeout", i+1, err)
		}
		if err == nil {
			t.Errorf("call %d to a stopped server succeeded", i+1)
		}
		t.Logf("call %d failed after %s (timeout %s): %v", i+1, took.Round(time.Millisecond), srv.Timeout, err)
		// Issue 14's bound: the call fails at its timeout ±0.5 s. A write
		// that ignored the deadline would wait for the process to resume
		// (never, here); one that gave up early would fail a call to a
		// server that is only slow. Healthy runs land within a few ms.
		if took < srv.Timeout-stuckWriteSlack || took > srv.Timeout+stuckWriteSlack {
			t.Errorf("call %d took %s with a %s timeout, want it to fail at its timeout ±%s", i+1, took.Round(time.Millisecond), srv.Timeout, stuckWriteSlack)
		}
		if err == nil || !strings.Contains(err.Error(), "did not read the request") {
			t.Errorf("call %d: %v, want it to say the server did not read the request", i+1, err)
		}
	}
	// The half-written request ended that session; the stopped process is
	// killed and a new one answers.
	h.waitState("ready", 3)
	if _, err := call(context.Background(), h.sup, "echo", `{"text":"after"}`); err != nil {
		t.Fatalf("call after the stuck server was replaced: %v", err)
	}
}

// A server that prints a banner on stdout before it speaks MCP comes up:
// the stray line is skipped (and logged), not fatal.
func TestBannerOnStdoutIsSkipped(t *testing.T) {
	h := start(t, stdioServer("echo", "sh", "-c", "echo 'hello, I am not MCP'; exec "+echoBin), nil)
	h.waitState("ready", 1)
	res, err := call(context.Background(), h.sup, "echo", `{"text":"after the banner"}`)
	if err != nil || text(t, res) != "after the banner" {
		t.Fatalf("call: %v", err)
	}
}

// Errors no retry can fix park the server at once with that reason,
// instead of a backoff storm: a command that does not exist after one
// attempt. A process that exits before initialize, even the same way
// every time, spends the whole budget first: what it waits for may be
// ready a moment later (issue #24). A server that prints to stdout and
// never answers is told so when connect_timeout ends.
func TestPermanentStartErrorsParkAtOnce(t *testing.T) {
	t.Run("missing command", func(t *testing.T) {
		srv := stdioServer("gone", "mcpvisor-test-no-such-command")
		srv.Reconnect.MaxRetries = 5
		h := start(t, srv, nil)
		st := h.waitState("parked", 0)
		if st.Retries != 0 || !strings.Contains(st.LastError, "not found") {
			t.Errorf("parked after %d retries with %q; want at once, saying the command is not found", st.Retries, st.LastError)
		}
	})
	t.Run("same exit every time", func(t *testing.T) {
		srv := stdioServer("exits", "sh", "-c", "echo 'config file missing' >&2; exit 7")
		srv.Reconnect.MaxRetries = 3
		h := start(t, srv, nil)
		st := h.waitState("parked", 0)
		if st.Retries != 3 || !strings.Contains(st.LastError, "exit status 7") || !strings.Contains(st.LastError, "config file missing") {
			t.Errorf("parked after %d retries with %q; want after the whole budget (3), with the exit status and stderr", st.Retries, st.LastError)
		}
	})
	t.Run("stray stdout then silence", func(t *testing.T) {
		srv := stdioServer("chatty", "sh", "-c", "echo 'hello, I am not MCP'; sleep 60")
		srv.ConnectTimeout = 500 * time.Millisecond
		srv.Reconnect.MaxRetries = 0
		h := start(t, srv, nil)
		st := h.waitState("parked", 0)
		if !strings.Contains(st.LastError, "hello, I am not MCP") || !strings.Contains(st.LastError, "stdout") {
			t.Errorf("last error %q; want it to name the line the server wrote to stdout", st.LastError)
		}
	})
}

// Regression (#24, item 4): a server whose first two starts exit before
// initialize the same way (a dependency not ready yet) is retried within
// the backoff and becomes ready on its third start, instead of being
// parked after the second as if its command were missing.
func TestRepeatedStartExitFollowsTheBudget(t *testing.T) {
	count := t.TempDir() + "/starts"
	script := fmt.Sprintf(`n=$(cat %[1]q 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]q
if [ $n -lt 3 ]; then echo 'database not reachable yet' >&2; exit 1; fi
exec %[2]q`, count, echoBin)
	srv := stdioServer("late", "sh", "-c", script)
	srv.Reconnect.MaxRetries = 5
	h := start(t, srv, nil)
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := h.sup.Status()
		if st.State == "ready" {
			break
		}
		if st.State == "parked" {
			t.Fatalf("parked after %d retries (%s); want ready on the third start", st.Retries, st.LastError)
		}
		if time.Now().After(deadline) {
			t.Fatalf("never ready; last status %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := call(context.Background(), h.sup, "echo", `{"text":"up"}`); err != nil {
		t.Fatalf("call after the third start: %v", err)
	}
}

// Revive reports the outcome of the attempt it caused, however fast it
// fails: a server that exits at once is parked again before a poll of its
// state could see it leave park (issue #24).
func TestReviveReportsItsAttempt(t *testing.T) {
	srv := stdioServer("broken", "sh", "-c", "echo 'no database' >&2; exit 4")
	srv.Reconnect.MaxRetries = 0
	h := start(t, srv, nil)
	h.waitState("parked", 0)
	for i := range 3 {
		select {
		case err := <-h.sup.Revive():
			var re *recovery.Error
			if !errors.As(err, &re) || !strings.Contains(err.Error(), "parked again") || !strings.Contains(err.Error(), "exit status 4") {
				t.Fatalf("revive %d: %v; want the attempt's error saying the server is parked again", i, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("revive %d: no outcome", i)
		}
	}

	ok := start(t, stdioServer("echo", echoBin), nil)
	ok.waitState("ready", 1)
	select {
	case err := <-ok.sup.Revive():
		if err != nil {
			t.Fatalf("revive of a ready server: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("revive of a ready server: no outcome")
	}
}
