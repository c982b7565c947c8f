//go:build unix

package plugin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/plugin"
	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
	"github.com/mcpvisor/mcpvisor/host/internal/transport"
	"github.com/mcpvisor/mcpvisor/host/internal/upstream"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// server builds a plugin server block the way a loaded config would.
func server(name, pluginName, command string, cfg any) *config.Server {
	raw, _ := json.Marshal(cfg)
	srv := &config.Server{
		Name:   name,
		Prefix: name,
		Plugin: &config.Plugin{Name: pluginName, Command: command, Config: raw},
	}
	(&config.Config{Servers: []*config.Server{srv}}).ApplyDefaults()
	srv.ConnectTimeout = 20 * time.Second
	return srv
}

func dial(t testing.TB, srv *config.Server) (transport.Link, error) {
	t.Helper()
	d, err := plugin.NewDialer(srv, testLogger(t))
	if err != nil {
		t.Fatalf("NewDialer: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), srv.ConnectTimeout)
	defer cancel()
	return d.Dial(ctx)
}

// callThrough dials srv, connects a go-sdk client over the plugin, lists
// the tools and calls echo and add. It returns the link, still open.
func callThrough(t *testing.T, srv *config.Server) transport.Link {
	t.Helper()
	link, err := dial(t, srv)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { link.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, link.Transport(), nil)
	if err != nil {
		t.Fatalf("initialize over the plugin: %v", err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	if got := strings.Join(names, ","); got != "add,echo,pid,sleep" {
		t.Errorf("tools = %s, want add,echo,pid,sleep", got)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "héllo\nworld"}})
	if err != nil {
		t.Fatalf("tools/call echo: %v", err)
	}
	if got := resultText(res); got != "héllo\nworld" {
		t.Errorf("echo = %q", got)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"a": 2, "b": 40}})
	if err != nil {
		t.Fatalf("tools/call add: %v", err)
	}
	if got := resultText(res); got != "42" {
		t.Errorf("add = %q", got)
	}
	return link
}

func resultText(res *mcp.CallToolResult) string {
	if res == nil || len(res.Content) == 0 {
		return ""
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); ok {
		return tc.Text
	}
	return fmt.Sprintf("%T", res.Content[0])
}

func TestUnixPlugin(t *testing.T) {
	p := startPeer(t, "-unix", filepath.Join(t.TempDir(), "tools.sock"))
	link := callThrough(t, server("over-unix", "unix", bin("mcpvisor-transport-unix"), map[string]any{"socket": p.addr}))
	pid := link.(interface{ Pid() int }).Pid()
	if err := link.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !processGone(pid) {
		t.Errorf("plugin process %d still exists after Close", pid)
	}
	select {
	case <-link.Done():
	default:
		t.Error("Done not closed after Close")
	}
}

// TestLinkDoneOnKill: a plugin killed from outside closes Done at once, and
// Err says it was killed.
func TestLinkDoneOnKill(t *testing.T) {
	p := startPeer(t, "-unix", filepath.Join(t.TempDir(), "tools.sock"))
	link, err := dial(t, server("over-unix", "unix", bin("mcpvisor-transport-unix"), map[string]any{"socket": p.addr}))
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close(context.Background())
	if err := link.Err(); err != nil {
		t.Errorf("Err while running = %v", err)
	}
	pid := link.(interface{ Pid() int }).Pid()
	killed := time.Now()
	syscall.Kill(pid, syscall.SIGKILL)
	select {
	case <-link.Done():
		t.Logf("Done closed %s after SIGKILL", time.Since(killed).Round(time.Microsecond))
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after SIGKILL")
	}
	err = link.Err()
	if !errors.Is(err, recovery.ErrProcessExited) || !strings.Contains(err.Error(), "signal: killed") {
		t.Errorf("Err = %v, want ErrProcessExited with signal: killed", err)
	}
	if !processGone(pid) {
		t.Errorf("killed plugin %d not reaped", pid)
	}
}

func TestWebSocketPlugin(t *testing.T) {
	p := startPeer(t, "-ws", "127.0.0.1:0", "-ws-token", "secret")
	callThrough(t, server("over-ws", "websocket", bin("mcpvisor-transport-websocket"), map[string]any{
		"url":     p.addr,
		"headers": map[string]string{"X-Test-Token": "secret"},
	}))

	// A refused handshake is a failed connect, with the server's answer.
	_, err := dial(t, server("over-ws", "websocket", bin("mcpvisor-transport-websocket"), map[string]any{
		"url":     p.addr,
		"headers": map[string]string{"X-Test-Token": "wrong"},
	}))
	if !errors.Is(err, plugin.ErrOpen) {
		t.Fatalf("wrong token: err = %v, want ErrOpen", err)
	}
	if strings.Contains(err.Error(), "wrong") {
		t.Errorf("error shows a header value: %v", err)
	}
	t.Logf("wrong token: %v", err)
}

func TestExampleTCPPlugin(t *testing.T) {
	p := startPeer(t, "-tcp", "127.0.0.1:0")
	callThrough(t, server("over-tcp", "tcp", bin("mcpvisor-transport-tcp"), map[string]any{"address": p.addr, "keepalive": "15s"}))
}

func TestConfigFromHCL(t *testing.T) {
	p := startPeer(t, "-unix", filepath.Join(t.TempDir(), "tools.sock"))
	src := fmt.Sprintf(`
server "over-unix" {
  plugin "unix" {
    command = %q
    sha256  = %q
    config  = { socket = %q }
  }
}
`, bin("mcpvisor-transport-unix"), sha256Of(t, bin("mcpvisor-transport-unix")), p.addr)
	cfg, err := config.Parse([]byte(src), "test.hcl")
	if err != nil {
		t.Fatal(err)
	}
	callThrough(t, cfg.Servers[0])
}

// testModePlugin is a server block whose plugin is this test binary, running
// as the misbehaving plugin of test mode mode (see TestMain).
func testModePlugin(t testing.TB, name, mode string) *config.Server {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	srv := server(name, name, self, map[string]any{})
	srv.Env = map[string]string{testModeEnv: mode}
	return srv
}

// supervise starts a supervisor for srv with a test logger, retrying after
// backoff (0: the default). The caller stops it.
func supervise(t testing.TB, srv *config.Server, backoff time.Duration) *upstream.Supervisor {
	t.Helper()
	return superviseObserved(t, srv, backoff, nil)
}

// superviseObserved is supervise with onStatus called on every status
// change (upstream.Options.OnStatus).
func superviseObserved(t testing.TB, srv *config.Server, backoff time.Duration, onStatus func(upstream.Status)) *upstream.Supervisor {
	t.Helper()
	logger := testLogger(t)
	d, err := plugin.NewDialer(srv, logger)
	if err != nil {
		t.Fatal(err)
	}
	sup := upstream.New(srv, upstream.Options{Dialer: d, Logger: logger, BackoffBase: backoff, OnStatus: onStatus})
	sup.Start()
	return sup
}

func TestDialErrors(t *testing.T) {
	unixBin := bin("mcpvisor-transport-unix")
	badPlugin := func(mode string) *config.Server { return testModePlugin(t, "bad", mode) }
	tests := []struct {
		name string
		srv  func() *config.Server
		want error
		text string // a part of the message
	}{
		{"missing binary", func() *config.Server {
			return server("s", "unix", filepath.Join(binDir, "mcpvisor-transport-nope"), map[string]any{"socket": "/x"})
		}, plugin.ErrBinaryNotFound, "does not exist"},
		{"missing from PATH", func() *config.Server {
			return server("s", "unix", "mcpvisor-transport-nope-in-path", map[string]any{"socket": "/x"})
		}, plugin.ErrBinaryNotFound, "not in PATH"},
		{"checksum mismatch", func() *config.Server {
			srv := server("s", "unix", unixBin, map[string]any{"socket": "/x"})
			srv.Plugin.SHA256 = strings.Repeat("ab", 32)
			return srv
		}, plugin.ErrChecksumMismatch, unixBin + " has SHA-256 "},
		{"config rejected", func() *config.Server {
			return server("s", "unix", unixBin, map[string]any{})
		}, plugin.ErrConfigRejected, "config needs socket"},
		{"config typo", func() *config.Server {
			return server("s", "unix", unixBin, map[string]any{"sockett": "/x"})
		}, plugin.ErrConfigRejected, `unknown field "sockett"`},
		{"cannot connect", func() *config.Server {
			return server("s", "unix", unixBin, map[string]any{"socket": filepath.Join(t.TempDir(), "none.sock")})
		}, plugin.ErrOpen, "does not exist"},
		{"crash during handshake", func() *config.Server { return badPlugin("crash") }, plugin.ErrCrashed, "cannot read /etc/plugin.conf"},
		{"cookie mismatch", func() *config.Server { return badPlugin("cookie") }, plugin.ErrHandshake, "magic cookie mismatch"},
		{"protocol version mismatch", func() *config.Server { return badPlugin("version") }, plugin.ErrHandshake, "protocol version mismatch"},
		{"not a plugin", func() *config.Server { return badPlugin("notplugin") }, plugin.ErrHandshake, "not a go-plugin binary"},
		{"crash while configuring", func() *config.Server { return badPlugin("die-on-configure") }, plugin.ErrCrashed, "exit status 3); last stderr: out of memory while parsing config"},
		{"no handshake in time", func() *config.Server {
			srv := badPlugin("hang")
			srv.ConnectTimeout = 500 * time.Millisecond
			return srv
		}, plugin.ErrHandshake, "no handshake"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := tt.srv()
			link, err := dial(t, srv)
			if err == nil {
				link.Close(context.Background())
				t.Fatal("Dial succeeded")
			}
			t.Logf("%v", err)
			if !errors.Is(err, tt.want) {
				t.Errorf("error does not wrap %v", tt.want)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, fmt.Sprintf("server %q: plugin %q: ", srv.Name, srv.Plugin.Name)) {
				t.Errorf("error does not name the server and plugin")
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error is not one line")
			}
			if !strings.Contains(msg, tt.text) {
				t.Errorf("error does not say %q", tt.text)
			}
			if left := pluginProcesses(t); len(left) > 0 {
				t.Errorf("plugin processes left: %v", left)
			}
		})
	}
}

// TestSupervisedPluginRespawns drives each plugin through a real
// supervisor: SIGKILL the plugin during traffic, and a new plugin process
// (a new generation) serves the calls that follow; after Stop no plugin
// process is left.
func TestSupervisedPluginRespawns(t *testing.T) {
	cases := []struct {
		name string
		srv  func(t *testing.T) *config.Server
	}{
		{"unix", func(t *testing.T) *config.Server {
			p := startPeer(t, "-unix", filepath.Join(t.TempDir(), "tools.sock"))
			return server("over-unix", "unix", bin("mcpvisor-transport-unix"), map[string]any{"socket": p.addr})
		}},
		{"websocket", func(t *testing.T) *config.Server {
			p := startPeer(t, "-ws", "127.0.0.1:0")
			return server("over-ws", "websocket", bin("mcpvisor-transport-websocket"), map[string]any{"url": p.addr})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := tc.srv(t)
			srv.Plugin.SHA256 = sha256Of(t, srv.Plugin.Command)
			var errMu sync.Mutex
			var lastErrors []string // every last error a status change showed
			sup := superviseObserved(t, srv, 50*time.Millisecond, func(st upstream.Status) {
				if st.LastError != "" {
					errMu.Lock()
					lastErrors = append(lastErrors, st.LastError)
					errMu.Unlock()
				}
			})
			stopped := false
			defer func() {
				if !stopped {
					sup.Stop(context.Background())
				}
			}()
			testutil.Eventually(t, 20*time.Second, "ready", func() bool { return sup.Status().State == "ready" })
			st := sup.Status()
			if st.Pid == 0 || st.Tools != 4 {
				t.Fatalf("status = %+v, want a pid and 4 tools", st)
			}
			gen1, pid1 := st.Generation, st.Pid

			call := func(ctx context.Context, text string) (string, error) {
				res, err := sup.CallTool(ctx, nil, &mcp.CallToolParamsRaw{Name: "echo", Arguments: json.RawMessage(fmt.Sprintf(`{"text":%q}`, text))})
				if err != nil {
					return "", err
				}
				return resultText(res), nil
			}

			// Traffic: a few callers in a loop, before, during and after the kill.
			var ok, failed atomic.Int64
			var mu sync.Mutex
			var firstErrs []string
			trafficCtx, stopTraffic := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for i := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for n := 0; trafficCtx.Err() == nil; n++ {
						ctx, cancel := context.WithTimeout(trafficCtx, 5*time.Second)
						text := fmt.Sprintf("caller %d call %d", i, n)
						got, err := call(ctx, text)
						cancel()
						switch {
						case trafficCtx.Err() != nil:
						case err != nil:
							failed.Add(1)
							mu.Lock()
							if len(firstErrs) < 5 {
								firstErrs = append(firstErrs, err.Error())
							}
							mu.Unlock()
						case got != text:
							t.Errorf("echo %q = %q", text, got)
						default:
							ok.Add(1)
						}
					}
				}()
			}
			testutil.Eventually(t, 10*time.Second, "traffic", func() bool { return ok.Load() >= 20 })

			killedAt := time.Now()
			if err := syscall.Kill(pid1, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 20*time.Second, "a new generation", func() bool {
				st := sup.Status()
				return st.State == "ready" && st.Generation > gen1 && st.Pid != pid1
			})
			t.Logf("respawned in %s", time.Since(killedAt).Round(time.Millisecond))
			okAfter := ok.Load()
			testutil.Eventually(t, 10*time.Second, "traffic after the respawn", func() bool { return ok.Load() >= okAfter+20 })
			stopTraffic()
			wg.Wait()
			t.Logf("calls: %d ok, %d failed around the kill: %v", ok.Load(), failed.Load(), firstErrs)

			// The supervisor records whichever it saw first: the plugin's
			// exit (from Link.Done) or a call's report of the broken session;
			// once the plugin is ready again the last error is cleared
			// (docs/supervision.md), so it is looked for in the status
			// changes between the kill and the respawn.
			errMu.Lock()
			seen := slices.Clone(lastErrors)
			errMu.Unlock()
			t.Logf("last errors: %q", seen)
			if len(seen) == 0 {
				t.Errorf("no last error recorded for the kill")
			}
			if st = sup.Status(); st.LastError != "" {
				t.Errorf("ready again with last error %q; want it cleared", st.LastError)
			}
			if !processGone(pid1) {
				t.Errorf("killed plugin %d not reaped", pid1)
			}
			got, err := call(context.Background(), "after")
			if err != nil || got != "after" {
				t.Fatalf("call after respawn = %q, %v", got, err)
			}

			pid2 := sup.Status().Pid
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := sup.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			stopped = true
			if !processGone(pid2) {
				t.Errorf("plugin %d still exists after Stop", pid2)
			}
			if left := pluginProcesses(t); len(left) > 0 {
				t.Errorf("plugin processes left after Stop: %v", left)
			}
		})
	}
}

// TestSupervisedPeerRestart: when the server behind the plugin goes away,
// the plugin ends its connection, the supervisor retries (each attempt a
// new plugin process that cannot connect), and once the server is back the
// calls work again.
func TestSupervisedPeerRestart(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "tools.sock")
	p := startPeer(t, "-unix", sock)
	srv := server("over-unix", "unix", bin("mcpvisor-transport-unix"), map[string]any{"socket": sock})
	sup := supervise(t, srv, 20*time.Millisecond)
	defer sup.Stop(context.Background())
	testutil.Eventually(t, 20*time.Second, "ready", func() bool { return sup.Status().State == "ready" })
	gen1 := sup.Status().Generation

	p.kill()
	testutil.Eventually(t, 10*time.Second, "the lost server noticed", func() bool {
		st := sup.Status()
		return st.State != "ready" && strings.Contains(st.LastError, "plugin could not connect")
	})
	startPeer(t, "-unix", sock)
	sup.Revive()
	testutil.Eventually(t, 20*time.Second, "ready again", func() bool {
		st := sup.Status()
		return st.State == "ready" && st.Generation > gen1
	})
	res, err := sup.CallTool(context.Background(), nil, &mcp.CallToolParamsRaw{Name: "add", Arguments: json.RawMessage(`{"a":1,"b":2}`)})
	if err != nil || resultText(res) != "3" {
		t.Fatalf("add = %v, %v", resultText(res), err)
	}
}

// TestBrokenPluginParks: a plugin that can never start parks its server
// with the one-line reason in status; the supervisor keeps running.
func TestBrokenPluginParks(t *testing.T) {
	srv := server("broken", "unix", bin("mcpvisor-transport-unix"), map[string]any{"socket": "/x"})
	srv.Plugin.SHA256 = strings.Repeat("00", 32)
	srv.Reconnect.MaxRetries = 1
	sup := supervise(t, srv, 10*time.Millisecond)
	testutil.Eventually(t, 10*time.Second, "parked", func() bool { return sup.Status().State == "parked" })
	st := sup.Status()
	if !strings.HasPrefix(st.LastError, `server "broken": plugin "unix": checksum mismatch: `) {
		t.Errorf("last error = %q", st.LastError)
	}
	if err := sup.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}
