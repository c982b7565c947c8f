//go:build unix

package hardening_test

/*
The harness: TestMain builds the mcpvisor binary and the echo example
server once; startMcpvisor runs `mcpvisor run -config FILE` on a free
loopback port and waits for /healthz. Every process a test starts is
stopped (SIGTERM, then SIGKILL) before the test ends, and so is anything
it left behind; every connection and goroutine a test opens is closed by
t.Cleanup. Memory is read from /proc/PID/status.

The bounds here (30 s to come up, 5 s for /healthz, tens of megabytes of
memory) are hang and blow-up guards, far from what a healthy mcpvisor
needs: the tests run with -race on small machines and must not flake.
*/

import (
	"bufio"
	"bytes"
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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

const (
	// readyTimeout bounds how long mcpvisor may take to answer /healthz.
	readyTimeout = 30 * time.Second
	// healthzTimeout bounds one /healthz request made while mcpvisor is
	// under attack: generous, it only tells "still serving" from "stuck".
	healthzTimeout = 5 * time.Second
	// stopTimeout bounds SIGTERM → exit before the process is killed.
	stopTimeout = 15 * time.Second
	// sessionProtocol is the protocol version the tests' MCP clients speak:
	// the newest with sessions, which is also what mcpvisor asks of its
	// upstreams.
	sessionProtocol = "2025-11-25"
)

// bins holds the binaries TestMain built: "mcpvisor", "echo", "everything"
// "netprobe", "memhog" and "hostile".
var bins map[string]string

func TestMain(m *testing.M) {
	code := testutil.BuildAndRun(m, func(b map[string]string) { bins = b }, "echo", "everything", "netprobe", "memhog", "hostile", testutil.Mcpvisor)
	if unixPluginOnce.path != "" {
		os.RemoveAll(filepath.Dir(unixPluginOnce.path))
	}
	os.Exit(code)
}

// mcpvisor is one running `mcpvisor run`.
type mcpvisor struct {
	cmd    *exec.Cmd
	pid    int
	addr   string // host:port of the HTTP listener
	config string // path of the config file (rewrite it and SIGHUP to reload)
	stderr *testutil.Buffer
	done   chan struct{} // closed when the process has exited
	err    error         // Wait's result, set before done closes
}

// hclString quotes s as an HCL string literal.
func hclString(s string) string {
	b, _ := json.Marshal(s)
	return strings.ReplaceAll(string(b), "${", "$${")
}

// echoBlock is a server block running the echo example over stdio.
func echoBlock() string {
	return fmt.Sprintf("server \"echo\" {\n  command = %s\n}\n", hclString(bins["echo"]))
}

// hostConfig is a whole config file: the host block on addr (no drain, and
// extra host attributes, one per line), then servers.
func hostConfig(addr, hostAttrs, servers string) string {
	return fmt.Sprintf("host {\n  listen = %s\n  log_level = \"debug\"\n  drain = \"0s\"\n%s}\n\n%s", hclString(addr), hostAttrs, servers)
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// startMcpvisor runs mcpvisor with the given server blocks on a free
// loopback port and waits until /healthz answers 200. It is stopped when
// the test ends. A port taken between freeAddr and mcpvisor's bind is
// retried with another.
func startMcpvisor(t *testing.T, servers string) *mcpvisor {
	t.Helper()
	return startMcpvisorWith(t, "", servers)
}

// startMcpvisorWith is startMcpvisor with extra host block attributes.
func startMcpvisorWith(t *testing.T, hostAttrs, servers string) *mcpvisor {
	t.Helper()
	return startMcpvisorEnv(t, nil, hostAttrs, servers)
}

// startMcpvisorEnv is startMcpvisorWith under the environment env (nil:
// the test's own).
func startMcpvisorEnv(t *testing.T, env []string, hostAttrs, servers string) *mcpvisor {
	t.Helper()
	return startMcpvisorAs(t, nil, env, hostAttrs, servers)
}

// startMcpvisorAs is startMcpvisorEnv run with the credential cred (nil:
// the test's own); see startMcpvisorAsUser for an unprivileged one.
func startMcpvisorAs(t *testing.T, cred *syscall.Credential, env []string, hostAttrs, servers string) *mcpvisor {
	t.Helper()
	for attempt := 1; ; attempt++ {
		mv, err := tryStartMcpvisor(t, cred, env, hostAttrs, servers)
		if err == nil {
			return mv
		}
		if attempt < 3 && strings.Contains(mv.stderr.String(), "cannot listen") {
			t.Logf("port race (%v); retrying on another port", err)
			continue
		}
		t.Fatalf("mcpvisor did not come up: %v\nstderr:\n%s", err, mv.stderr.String())
	}
}

func tryStartMcpvisor(t *testing.T, cred *syscall.Credential, env []string, hostAttrs, servers string) (*mcpvisor, error) {
	addr := freeAddr(t)
	// A host attribute that must name the host's own address (the oidc
	// audience) writes @ADDR@.
	hostAttrs = strings.ReplaceAll(hostAttrs, "@ADDR@", addr)
	// A server block that must name the host's port (a sandbox's connect
	// list) writes @PORT@.
	_, port, _ := net.SplitHostPort(addr)
	servers = strings.ReplaceAll(servers, "@PORT@", port)
	dir := t.TempDir()
	path := filepath.Join(dir, "config.hcl")
	if err := os.WriteFile(path, []byte(hostConfig(addr, hostAttrs, servers)), 0o600); err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		// The config's folder and file are the user's, as they would be.
		for _, p := range []string{dir, path} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	mv := &mcpvisor{addr: addr, config: path, stderr: &testutil.Buffer{}, done: make(chan struct{})}
	mv.cmd = exec.Command(bins[testutil.Mcpvisor], "run", "-config", path)
	mv.cmd.Env = env
	mv.cmd.Stdout = mv.stderr
	mv.cmd.Stderr = mv.stderr
	mv.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	if err := mv.cmd.Start(); err != nil {
		t.Fatalf("starting mcpvisor: %v", err)
	}
	mv.pid = mv.cmd.Process.Pid
	go func() {
		mv.err = mv.cmd.Wait()
		close(mv.done)
	}()
	t.Cleanup(func() { mv.stop(t) })

	hc := newHTTPClient(t, 2*time.Second)
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-mv.done:
			return mv, fmt.Errorf("mcpvisor exited before serving: %v", mv.err)
		default:
		}
		resp, err := hc.Get("http://" + addr + "/healthz")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return mv, nil
			}
		}
		if time.Now().After(deadline) {
			return mv, fmt.Errorf("no 200 from /healthz within %s (last: %v)", readyTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends mcpvisor: SIGTERM, SIGKILL after stopTimeout, then SIGKILL
// for anything it started that outlived it.
func (mv *mcpvisor) stop(t *testing.T) {
	descendants := testutil.Descendants(mv.pid)
	syscall.Kill(mv.pid, syscall.SIGTERM)
	select {
	case <-mv.done:
	case <-time.After(stopTimeout):
		t.Errorf("mcpvisor did not exit within %s of SIGTERM; killing it", stopTimeout)
		syscall.Kill(-mv.pid, syscall.SIGKILL)
		<-mv.done
	}
	syscall.Kill(-mv.pid, syscall.SIGKILL) // its own group, if anything is left in it
	for _, pid := range append(descendants, testutil.Descendants(mv.pid)...) {
		if testutil.Alive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if t.Failed() {
		t.Logf("mcpvisor stderr (last 8 kB):\n%s", tail(mv.stderr.String(), 8<<10))
	}
}

// alive fails the test if mcpvisor has exited.
func (mv *mcpvisor) alive(t *testing.T) {
	t.Helper()
	select {
	case <-mv.done:
		t.Fatalf("mcpvisor exited: %v", mv.err)
	default:
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// newHTTPClient is a client without keep-alive (nothing is left idle when
// the test ends) whose every request is bounded by timeout.
func newHTTPClient(t *testing.T, timeout time.Duration) *http.Client {
	tr := &http.Transport{DisableKeepAlives: true, Proxy: nil}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: timeout}
}

// healthz requires a 200 from /healthz within healthzTimeout.
func (mv *mcpvisor) healthz(t *testing.T, when string) {
	t.Helper()
	hc := newHTTPClient(t, healthzTimeout)
	start := time.Now()
	resp, err := hc.Get("http://" + mv.addr + "/healthz")
	if err != nil {
		t.Errorf("%s: /healthz did not answer within %s: %v", when, healthzTimeout, err)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("%s: /healthz answered %s, want 200", when, resp.Status)
		return
	}
	t.Logf("%s: /healthz 200 in %s", when, time.Since(start).Round(time.Millisecond))
}

// serverStatus is the part of one /status entry the tests read.
type serverStatus struct {
	Name      string `json:"name"`
	State     string `json:"state"`
	LastError string `json:"last_error"`
	// NextAttempt is when a reconnecting or parked server tries again.
	NextAttempt time.Time `json:"next_attempt"`
	Pid         int       `json:"pid"`
	// Generation counts the server's sessions: it grows on every reconnect.
	Generation uint64 `json:"generation"`
	// Sandbox summarizes its sandbox block.
	Sandbox string `json:"sandbox"`
	// RSSBytes and CPUSeconds measure a running stdio server's process
	// group.
	RSSBytes   int64   `json:"rss_bytes"`
	CPUSeconds float64 `json:"cpu_seconds"`
}

// operatorStatus is GET /status as the CLI asks it: over mv's control
// socket with the local operator credential (docs/security.md, "The
// operator's door"), which sees what an anonymous caller does not (pids,
// generations, sandboxes). ok is false when mv serves no control socket.
func (mv *mcpvisor) operatorStatus(t *testing.T) (*http.Response, bool) {
	t.Helper()
	// Where host/cli/instances.go puts it: $XDG_RUNTIME_DIR/mcpvisor,
	// else $TMPDIR/mcpvisor-UID, in mv's environment and as mv's user.
	uid := os.Getuid()
	if c := mv.cmd.SysProcAttr.Credential; c != nil {
		uid = int(c.Uid)
	}
	env := mv.cmd.Env
	if env == nil {
		env = os.Environ()
	}
	tmp, xdg := "/tmp", ""
	for _, kv := range env {
		if x, ok := strings.CutPrefix(kv, "XDG_RUNTIME_DIR="); ok && x != "" {
			xdg = x
		}
		if x, ok := strings.CutPrefix(kv, "TMPDIR="); ok && x != "" {
			tmp = x
		}
	}
	runtimeDir := filepath.Join(tmp, fmt.Sprintf("mcpvisor-%d", uid))
	if xdg != "" {
		runtimeDir = filepath.Join(xdg, "mcpvisor")
	}
	socks, _ := filepath.Glob(filepath.Join(runtimeDir, fmt.Sprintf("*-%d.sock", mv.pid)))
	token, err := os.ReadFile(filepath.Join(runtimeDir, "operator-token"))
	if len(socks) != 1 || err != nil {
		return nil, false
	}
	hc := &http.Client{Timeout: healthzTimeout, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socks[0])
	}}}
	t.Cleanup(hc.CloseIdleConnections)
	req, _ := http.NewRequest(http.MethodGet, "http://mcpvisor/status", nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET /status over the control socket %s: %v", socks[0], err)
	}
	return resp, true
}

// status returns /status's servers by name, as an operator sees them
// (operatorStatus), or as any caller does where mv has no control socket.
// statusResponse is GET /status as the operator (the control socket with
// the local credential), else, for a host without one, over TCP.
func (mv *mcpvisor) statusResponse(t *testing.T) *http.Response {
	t.Helper()
	resp, ok := mv.operatorStatus(t)
	if !ok {
		hc := newHTTPClient(t, healthzTimeout)
		var err error
		if resp, err = hc.Get("http://" + mv.addr + "/status"); err != nil {
			t.Fatalf("GET /status: %v", err)
		}
	}
	return resp
}

func (mv *mcpvisor) status(t *testing.T) map[string]serverStatus {
	t.Helper()
	resp := mv.statusResponse(t)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /status: %s", resp.Status)
	}
	var doc struct {
		Servers []serverStatus `json:"servers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatalf("GET /status: %v", err)
	}
	out := map[string]serverStatus{}
	for _, s := range doc.Servers {
		out[s.Name] = s
	}
	return out
}

// procKB reads a "Name:   N kB" field of /proc/PID/status.
func procKB(pid int, field string) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || name != field {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			break
		}
		return strconv.ParseInt(f[0], 10, 64)
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// rssKB returns mcpvisor's resident set size in kB.
func (mv *mcpvisor) rssKB(t *testing.T) int64 {
	t.Helper()
	kb, err := procKB(mv.pid, "VmRSS")
	if err != nil {
		t.Fatalf("reading mcpvisor's RSS: %v", err)
	}
	return kb
}

// rssPeak tracks mcpvisor's peak resident set size from now on: the
// kernel's VmHWM, reset here through clear_refs, and VmRSS sampled every
// 20 ms as a fallback where the reset is not allowed.
type rssPeak struct {
	pid      int
	hwmReset bool
	stop     chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	sampled  int64
}

func (mv *mcpvisor) trackPeak(t *testing.T) *rssPeak {
	p := &rssPeak{pid: mv.pid, stop: make(chan struct{})}
	// "5" resets the peak RSS (VmHWM) to the current RSS (Linux ≥ 4.0).
	p.hwmReset = os.WriteFile("/proc/"+strconv.Itoa(mv.pid)+"/clear_refs", []byte("5"), 0) == nil
	p.sample()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-tick.C:
				p.sample()
			}
		}
	}()
	t.Cleanup(p.end)
	return p
}

func (p *rssPeak) sample() {
	if kb, err := procKB(p.pid, "VmRSS"); err == nil {
		p.mu.Lock()
		p.sampled = max(p.sampled, kb)
		p.mu.Unlock()
	}
}

func (p *rssPeak) end() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.wg.Wait()
}

// peakKB stops tracking and returns the peak RSS seen in kB.
func (p *rssPeak) peakKB() int64 {
	p.end()
	p.sample()
	p.mu.Lock()
	peak := p.sampled
	p.mu.Unlock()
	if p.hwmReset {
		if hwm, err := procKB(p.pid, "VmHWM"); err == nil {
			peak = max(peak, hwm)
		}
	}
	return peak
}

// rawExchange sends req as written on a new connection to addr and reads
// one response head; the body is read up to 64 kB when it ends in time.
func rawExchange(t *testing.T, addr, req string) (*http.Response, string, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	var body bytes.Buffer
	io.Copy(&body, io.LimitReader(resp.Body, 64<<10))
	return resp, body.String(), nil
}

// connectClient opens a go-sdk client session to mcpvisor's /mcp, closed
// when the test ends.
func connectClient(t *testing.T, mv *mcpvisor) *mcp.ClientSession {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	client := mcp.NewClient(&mcp.Implementation{Name: "hardening-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   "http://" + mv.addr + "/mcp",
		HTTPClient: &http.Client{Transport: tr},
		MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: sessionProtocol})
	if err != nil {
		t.Fatalf("connecting to mcpvisor's /mcp: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// waitTool waits until mcpvisor lists the tool name.
func waitTool(t *testing.T, cs *mcp.ClientSession, name string) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	var last []string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := cs.ListTools(ctx, nil)
		cancel()
		if err == nil {
			last = last[:0]
			for _, tool := range res.Tools {
				if tool.Name == name {
					return
				}
				last = append(last, tool.Name)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("tool %q not listed within %s (last list: %v, error: %v)", name, readyTimeout, last, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// isTimeout reports whether err is a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

const mb = 1024 // kB per MB, for the /proc figures

// runCLI runs `mcpvisor ARGS…` to completion (bounded by a hang guard)
// and returns its exit code, stdout and stderr.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins[testutil.Mcpvisor], args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("mcpvisor %s did not return within 60s\nstdout: %s\nstderr: %s", strings.Join(args, " "), out.String(), errb.String())
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running mcpvisor %s: %v", strings.Join(args, " "), err)
	}
	return code, out.String(), errb.String()
}
