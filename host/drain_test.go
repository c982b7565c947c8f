//go:build unix

package host_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host"
	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// servingHost starts a host on src and serves it with Serve on a loopback
// listener (not httptest: Serve's own shutdown and keep-alive handling are
// under test). stop ends Serve and waits for it; the host is closed when
// the test ends.
func servingHost(t *testing.T, src string, opts ...host.Option) (h *host.Host, base string, stop func()) {
	t.Helper()
	h = settledHost(t, src, opts...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx, ln) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
	t.Cleanup(stop)
	return h, "http://" + ln.Addr().String(), stop
}

// get fetches base+path with an optional bearer token and returns the
// response (body read into the string) .
func get(t *testing.T, base, path, token string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func connectHTTP(t *testing.T, ctx context.Context, base, version string) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "drain-test"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: base + "/mcp", MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// Drain takes the host out of rotation without failing anything: /readyz
// answers 503 "draining" at once while /healthz, /status and /mcp keep
// serving, and Drain returns only
// after its period and after the call that was in flight has its answer.
func TestDrain(t *testing.T) {
	const period = 500 * time.Millisecond
	h, base, stop := servingHost(t, fmt.Sprintf("host {\n  drain = %q\n  replica = \"r1\"\n}\nserver \"echo\" {\n  command = %q\n}\n", period, bins["echo"]))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	session := connectHTTP(t, ctx, base, "2025-11-25")
	stateless := connectHTTP(t, ctx, base, "2026-07-28")

	if code, rep := readyz(t, base); code != http.StatusOK || !rep.Ready || rep.Draining || rep.Replica != "r1" {
		t.Fatalf("before Drain: /readyz %d %+v, want 200, ready, not draining, replica r1", code, rep)
	}

	// A call that outlives the drain period: Drain must wait for it.
	slow := make(chan error, 1)
	go func() {
		res, err := stateless.CallTool(ctx, &mcp.CallToolParams{Name: "echo__sleep", Arguments: map[string]any{"ms": 1500}})
		if err == nil && res.IsError {
			err = errors.New(textOf(t, res.Content[0]))
		}
		slow <- err
	}()
	testutil.Eventually(t, 30*time.Second, "the slow call in flight", func() bool {
		return value(scrape(t, base), "mcpvisor_calls_in_flight", map[string]string{"server": "echo"}) == 1
	})

	start := time.Now()
	drained := make(chan error, 1)
	go func() { drained <- h.Drain(ctx) }()
	testutil.Eventually(t, 10*time.Second, "Draining", h.Draining)

	code, rep := readyz(t, base)
	if code != http.StatusServiceUnavailable || rep.Ready || !rep.Draining || rep.Reason != "draining" {
		t.Errorf("draining: /readyz %d %+v, want 503, draining", code, rep)
	}
	resp, body := get(t, base, "/healthz", "")
	if resp.StatusCode != http.StatusOK {
		t.Errorf("draining: /healthz %d %q, want 200", resp.StatusCode, body)
	}
	var st host.StatusReport
	if _, body := get(t, base, "/status", ""); json.Unmarshal([]byte(body), &st) != nil || !st.Draining || st.Replica != "r1" {
		t.Errorf("draining: /status %s, want draining and replica r1", body)
	}
	for name, cs := range map[string]*mcp.ClientSession{"session": session, "stateless": stateless} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__echo", Arguments: map[string]any{"text": "still here"}})
		if err != nil || textOf(t, res.Content[0]) != "still here" {
			t.Errorf("draining: %s call: %v", name, err)
		}
	}

	if err := <-drained; err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if took := time.Since(start); took < period {
		t.Errorf("Drain returned after %s, before its period of %s", took, period)
	}
	// Without the wait for requests in flight, Drain would have returned
	// about a second before the sleep ended.
	if n := value(scrape(t, base), "mcpvisor_calls_in_flight", map[string]string{"server": "echo"}); n != 0 {
		t.Errorf("Drain returned with %v call(s) in flight", n)
	}
	if err := <-slow; err != nil {
		t.Fatalf("the call in flight failed: %v", err)
	}
	stop()
}

// Drain returns early, with ctx's error, when ctx ends (a second signal).
func TestDrainCutShort(t *testing.T) {
	h, base, _ := servingHost(t, fmt.Sprintf("host {\n  drain = \"1h\"\n}\nserver \"echo\" {\n  command = %q\n}\n", bins["echo"]))
	readyz(t, base) // a load balancer is watching: Drain waits its period
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Drain(ctx) }()
	testutil.Eventually(t, 10*time.Second, "Draining", h.Draining)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Drain: %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Drain ignored its context")
	}
}

// A library call (Host.CallTool) takes the same path as a gateway call
// (operate, docs/design.md §3): when Serve's shutdown cuts the calls still
// in flight, it is cut too, with the *recovery.Error that says the host is
// shutting down and its outcome is unknown, instead of running on until
// the server is stopped.
func TestServeShutdownCutsLibraryCalls(t *testing.T) {
	h, base, stop := servingHost(t, fmt.Sprintf("server \"echo\" {\n  command = %q\n}\n", bins["echo"]))
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cs := connectHTTP(t, ctx, base, "2025-11-25")

	// An HTTP call in flight keeps Serve's shutdown waiting, then cut.
	httpErr := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__sleep", Arguments: map[string]any{"ms": 60000}})
		httpErr <- err
	}()
	libErr := make(chan error, 1)
	go func() {
		res, err := h.CallTool(ctx, "echo__sleep", map[string]any{"ms": 60000})
		if err == nil {
			err = fmt.Errorf("answered %+v", res)
		}
		libErr <- err
	}()
	testutil.Eventually(t, 30*time.Second, "both sleeping calls in flight", func() bool {
		return value(scrape(t, base), "mcpvisor_calls_in_flight", map[string]string{"server": "echo"}) == 2
	})

	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	// The calls sleep for a minute: an answer well before that is the cut.
	select {
	case err := <-libErr:
		var re *recovery.Error
		if !errors.As(err, &re) || re.Class != recovery.Unavailable || !strings.Contains(err.Error(), "host shutting down") ||
			!strings.Contains(err.Error(), "outcome is unknown") {
			t.Errorf("Host.CallTool cut by the shutdown: %v (%T), want a *recovery.Error saying the host is shutting down and the outcome is unknown", err, err)
		}
	case <-time.After(45 * time.Second):
		t.Fatal("Host.CallTool was not cut by Serve's shutdown")
	}
	<-stopped
	if err := <-httpErr; err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("the HTTP call cut by the shutdown: %v, want an error saying the host is shutting down", err)
	}
}

// With a bearer token, an orchestrator's probe (no Authorization header)
// still gets /healthz and /readyz's status code, with a body that names no
// server or error; a wrong token, and every other endpoint, get 401.
func TestProbesWithoutToken(t *testing.T) {
	h, base, _ := servingHost(t, fmt.Sprintf(`host {
  auth {
    bearer_token = "t0ken"
  }
}
server "echo" {
  command = %q
}
server "gone" {
  command  = "/nonexistent/mcp-server"
  required = true
}
`, bins["echo"]))
	resp, body := get(t, base, "/healthz", "")
	if resp.StatusCode != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz without a token: %d %q, want 200 ok", resp.StatusCode, body)
	}
	resp, body = get(t, base, "/readyz", "")
	if resp.StatusCode != http.StatusServiceUnavailable || strings.TrimSpace(body) != `{"ready":false}` {
		t.Errorf("/readyz without a token: %d %q, want 503 and no details", resp.StatusCode, body)
	}
	resp, body = get(t, base, "/readyz", "t0ken")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, `"gone"`) {
		t.Errorf("/readyz with the token: %d %q, want 503 naming the server", resp.StatusCode, body)
	}
	for _, path := range []string{"/readyz", "/healthz", "/status", "/metrics"} {
		if resp, _ := get(t, base, path, "wrong"); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s with a wrong token: %d, want 401", path, resp.StatusCode)
		}
	}
	for _, path := range []string{"/status", "/metrics"} {
		if resp, _ := get(t, base, path, ""); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without a token: %d, want 401", path, resp.StatusCode)
		}
	}
	go h.Drain(context.Background())
	testutil.Eventually(t, 10*time.Second, "Draining", h.Draining)
	if resp, body := get(t, base, "/readyz", ""); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, `"draining":true`) {
		t.Errorf("/readyz without a token while draining: %d %q", resp.StatusCode, body)
	}
}

// The replica name labels the host's log lines, /status, /readyz, every
// metric (mcpvisor's and the runtime's) and every audit line; unset, it is
// the hostname.
func TestReplicaIdentity(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_STATE_HOME", dir) // the audit digest key file
	auditPath := filepath.Join(dir, "audit.jsonl")
	var logs testutil.Buffer
	h, base, _ := servingHost(t, fmt.Sprintf(`host {
  replica = "mcpvisor-7"
  audit {
    path = %q
  }
}
server "echo" {
  command = %q
}
`, auditPath, bins["echo"]), host.WithLogger(hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})))
	if h.Replica() != "mcpvisor-7" {
		t.Errorf("Replica() = %q", h.Replica())
	}
	if _, err := h.CallTool(context.Background(), "echo__echo", map[string]any{"text": "x"}); err != nil {
		t.Fatal(err)
	}

	var st host.StatusReport
	if _, body := get(t, base, "/status", ""); json.Unmarshal([]byte(body), &st) != nil || st.Replica != "mcpvisor-7" {
		t.Errorf("/status: %s, want replica mcpvisor-7", body)
	}
	if _, rep := readyz(t, base); rep.Replica != "mcpvisor-7" {
		t.Errorf("/readyz: replica %q", rep.Replica)
	}
	fams := scrape(t, base)
	for _, name := range []string{"mcpvisor_calls_total", "mcpvisor_server_state", "mcpvisor_downstream_sessions", "go_goroutines", "process_open_fds"} {
		if fams[name] == nil {
			t.Errorf("no metric %s", name)
		}
	}
	for name, f := range fams {
		for _, m := range f.Metric {
			found := false
			for _, lp := range m.Label {
				if lp.GetName() == "replica" {
					found = lp.GetValue() == "mcpvisor-7"
				}
			}
			if !found {
				t.Errorf("%s series %v lacks replica=\"mcpvisor-7\"", name, m.Label)
				break
			}
		}
	}
	f, err := os.Open(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	lines := 0
	for sc.Scan() {
		lines++
		var line struct{ Replica string }
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Replica != "mcpvisor-7" {
			t.Errorf("audit line without replica: %s", sc.Text())
		}
	}
	if lines == 0 {
		t.Error("no audit line")
	}
	if !strings.Contains(logs.String(), "replica=mcpvisor-7") {
		t.Errorf("log lines do not name the replica:\n%s", logs.String())
	}

	// Unset: the hostname.
	want, err := os.Hostname()
	if err != nil {
		t.Skip("no hostname here")
	}
	cfg := &config.Config{}
	cfg.ApplyDefaults()
	h2, err := host.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close(context.Background())
	if h2.Replica() != want {
		t.Errorf("default Replica() = %q, want the hostname %q", h2.Replica(), want)
	}
}

// A 2025 session is bound to the replica that created it. A request for
// it that reaches another replica (its own died, or the load balancer
// moved it) gets the spec's HTTP 404; the go-sdk client reports
// mcp.ErrSessionMissing, and a new session on the other replica works.
func TestUnknownSessionGets404(t *testing.T) {
	src := fmt.Sprintf("server \"echo\" {\n  command = %q\n}\n", bins["echo"])
	_, first, _ := servingHost(t, src)
	_, second, _ := servingHost(t, src)

	// The raw answer: 404 for a session id this replica never issued.
	req, _ := http.NewRequest(http.MethodPost, second+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	req.Header.Set("Mcp-Session-Id", "created-on-a-replica-that-is-gone")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown session id: HTTP %d, want 404", resp.StatusCode)
	}

	// The go-sdk client: a session made on the first replica, its
	// requests then sent to the second.
	var target atomic.Value
	target.Store(first)
	moving := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		u := *r.URL
		base := target.Load().(string)
		u.Host = strings.TrimPrefix(base, "http://")
		r.URL, r.Host = &u, u.Host
		return http.DefaultTransport.RoundTrip(r)
	})}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "moved"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: first + "/mcp", HTTPClient: moving, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__pid"}); err != nil {
		t.Fatal(err)
	}
	target.Store(second)
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__pid"})
	if !errors.Is(err, mcp.ErrSessionMissing) {
		t.Fatalf("call on a moved session: %v, want mcp.ErrSessionMissing", err)
	}
	again, err := mcp.NewClient(&mcp.Implementation{Name: "moved"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: first + "/mcp", HTTPClient: moving, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if _, err := again.CallTool(ctx, &mcp.CallToolParams{Name: "echo__pid"}); err != nil {
		t.Fatalf("call on the new session: %v", err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// SIGTERM to `mcpvisor run` with a listener drains: /readyz answers 503 at
// once, /healthz 200, calls keep working for the drain period, and then it
// exits 0 with nothing left behind. SIGINT does not wait.
// With nothing watching /readyz (no load balancer, no orchestrator), Drain
// does not wait its period: only for the requests in flight.
func TestDrainSkipsPeriodWhenNobodyWatches(t *testing.T) {
	h, base, _ := servingHost(t, fmt.Sprintf("host {\n  drain = \"1h\"\n}\nserver \"echo\" {\n  command = %q\n}\n", bins["echo"]))
	if resp, _ := get(t, base, "/healthz", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %d", resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Drain(ctx); err != nil {
		t.Fatalf("Drain waited its hour-long period with nothing watching /readyz: %v", err)
	}
	if !h.Draining() {
		t.Error("not draining after Drain")
	}
}

func TestRunSIGTERMDrains(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			addr := freePort(t)
			cfgPath := filepath.Join(t.TempDir(), "config.hcl")
			drain := "2s"
			if sig == syscall.SIGINT {
				drain = "1h" // never waited for
			}
			src := fmt.Sprintf("host {\n  listen = %q\n  drain = %q\n}\nserver \"echo\" {\n  command = %q\n}\n", addr, drain, bins["echo"])
			if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bins["mcpvisor"], "run", "-config", cfgPath)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			var stderr testutil.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			base := "http://" + addr
			testutil.Eventually(t, 60*time.Second, "mcpvisor ready", func() bool {
				resp, err := http.Get(base + "/readyz")
				if err != nil {
					return false
				}
				resp.Body.Close()
				return resp.StatusCode == http.StatusOK
			})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cs := connectHTTP(t, ctx, base, "2026-07-28")
			desc := testutil.Descendants(cmd.Process.Pid)

			start := time.Now()
			cmd.Process.Signal(sig)
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			if sig == syscall.SIGTERM {
				testutil.Eventually(t, 10*time.Second, "/readyz 503 after SIGTERM", func() bool {
					code, rep := readyz(t, base)
					return code == http.StatusServiceUnavailable && rep.Draining
				})
				if resp, _ := get(t, base, "/healthz", ""); resp.StatusCode != http.StatusOK {
					t.Errorf("/healthz while draining: %d", resp.StatusCode)
				}
				if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__echo", Arguments: map[string]any{"text": "x"}}); err != nil {
					t.Errorf("call while draining: %v", err)
				}
			}
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("mcpvisor exited with %v\n%s", err, stderr.String())
				}
			case <-time.After(45 * time.Second):
				t.Fatalf("mcpvisor did not exit within 45s of %s\n%s", sig, stderr.String())
			}
			if took := time.Since(start); sig == syscall.SIGTERM && took < 2*time.Second {
				t.Errorf("exited %s after SIGTERM, before its 2s drain\n%s", took, stderr.String())
			}
			for _, pid := range desc {
				if testutil.Alive(pid) {
					t.Errorf("process %d outlived mcpvisor", pid)
				}
			}
			if sig == syscall.SIGTERM && !strings.Contains(stderr.String(), "draining") {
				t.Errorf("no drain in the log:\n%s", stderr.String())
			}
		})
	}
}
