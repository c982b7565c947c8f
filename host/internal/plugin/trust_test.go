//go:build unix

package plugin_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/plugin"
	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// selfPlugin is a server block whose plugin is the test peer serving its
// tools in-process (testpeer -plugin).
func selfPlugin(name string) *config.Server {
	srv := server(name, "testpeer", bin("testpeer"), map[string]any{})
	srv.Plugin.Args = []string{"-plugin"}
	return srv
}

// TestPluginStdinIsEmpty: the plugin's standard input is not the host's.
// The host's stdin here is a pipe holding a message; the plugin, which
// reads its stdin from the moment it starts, sees EOF and no byte, and the
// message is still there for the host.
func TestPluginStdinIsEmpty(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	const msg = `{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n"
	if _, err := w.WriteString(msg); err != nil {
		t.Fatal(err)
	}
	orig := os.Stdin
	os.Stdin = r
	defer func() { os.Stdin = orig }()

	link, err := dial(t, selfPlugin("self"))
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer link.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, link.Transport(), nil)
	if err != nil {
		t.Fatalf("initialize over the plugin: %v", err)
	}
	defer cs.Close()

	var got struct {
		Bytes int64  `json:"bytes"`
		EOF   bool   `json:"eof"`
		Error string `json:"error"`
	}
	// The read ends at once; the call only has to come after it.
	testutil.Eventually(t, 5*time.Second, "the plugin's read of stdin to end", func() bool {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "stdin"})
		if err != nil {
			t.Fatalf("tools/call stdin: %v", err)
		}
		if err := json.Unmarshal([]byte(resultText(res)), &got); err != nil {
			t.Fatalf("stdin report %q: %v", resultText(res), err)
		}
		return got.EOF || got.Bytes > 0 || got.Error != ""
	})
	if !got.EOF || got.Bytes != 0 || got.Error != "" {
		t.Errorf("plugin's stdin: read %d bytes, eof %v, error %q; want EOF and nothing", got.Bytes, got.EOF, got.Error)
	}

	w.Close()
	rest, err := io.ReadAll(r)
	if err != nil || string(rest) != msg {
		t.Errorf("the host's stdin holds %q, %v; want the message untouched, %q", rest, err, msg)
	}
}

// TestHandshakeTimeoutKillsGroup: a plugin that never completes its
// handshake is killed at connect_timeout, with the child it started.
func TestHandshakeTimeoutKillsGroup(t *testing.T) {
	srv := testModePlugin(t, "slow", "hang-with-child")
	srv.ConnectTimeout = 2 * time.Second

	start := time.Now()
	link, err := dial(t, srv)
	if err == nil {
		link.Close(context.Background())
		t.Fatal("Dial succeeded")
	}
	t.Logf("after %s: %v", time.Since(start).Round(time.Millisecond), err)
	if !errors.Is(err, plugin.ErrHandshake) || !strings.Contains(err.Error(), "no handshake within connect_timeout (2s); the plugin was killed") {
		t.Errorf("error = %v, want ErrHandshake naming connect_timeout", err)
	}
	// The plugin said it started a child; the message quotes that.
	if !strings.Contains(err.Error(), "started child ") {
		t.Errorf("error does not quote the plugin's stderr: %v", err)
	}
	testutil.Eventually(t, 5*time.Second, "no plugin process, not even the child", func() bool { return len(pluginProcesses(t)) == 0 })
}

// TestHangingPluginParks: missing the handshake is a failed attempt like
// any other; the budget spent, the server parks, with nothing left
// running.
func TestHangingPluginParks(t *testing.T) {
	srv := testModePlugin(t, "slow", "hang-with-child")
	srv.ConnectTimeout = 300 * time.Millisecond
	srv.Reconnect.MaxRetries = 1
	sup := supervise(t, srv, 10*time.Millisecond)
	defer sup.Stop(context.Background())
	testutil.Eventually(t, 20*time.Second, "parked", func() bool { return sup.Status().State == "parked" })
	st := sup.Status()
	if !strings.Contains(st.LastError, "plugin handshake failed: no handshake within connect_timeout") {
		t.Errorf("last error = %q", st.LastError)
	}
	testutil.Eventually(t, 5*time.Second, "no plugin process left", func() bool { return len(pluginProcesses(t)) == 0 })
}

// TestStopDuringHandshake: stopping a server whose plugin is still in its
// handshake does not wait out connect_timeout, and leaves nothing behind.
func TestStopDuringHandshake(t *testing.T) {
	srv := testModePlugin(t, "slow", "hang-with-child")
	srv.ConnectTimeout = 5 * time.Minute
	sup := supervise(t, srv, 0)
	testutil.Eventually(t, 20*time.Second, "the plugin and its child", func() bool { return len(pluginProcesses(t)) == 2 })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	if err := sup.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	t.Logf("stopped in %s", time.Since(start).Round(time.Millisecond))
	if ctx.Err() != nil {
		t.Errorf("Stop waited for the minute-long deadline")
	}
	testutil.Eventually(t, 5*time.Second, "no plugin process left", func() bool { return len(pluginProcesses(t)) == 0 })
}

// TestStderrFloodIsRateLimited: a plugin flooding stderr gets a burst of
// lines into the log, the rest summarized as dropped; its last words still
// reach the error.
func TestStderrFloodIsRateLimited(t *testing.T) {
	srv := testModePlugin(t, "noisy", "flood")
	var log testutil.Buffer
	d, err := plugin.NewDialer(srv, hclogTo(&log))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), srv.ConnectTimeout)
	defer cancel()
	link, err := d.Dial(ctx)
	if err == nil {
		link.Close(context.Background())
		t.Fatal("Dial succeeded")
	}
	if !errors.Is(err, plugin.ErrCrashed) || !strings.Contains(err.Error(), "fatal: giving up after the flood") {
		t.Errorf("error = %v, want ErrCrashed quoting the last stderr line", err)
	}

	text := log.String()
	logged := strings.Count(text, "flood line ") + strings.Count(text, "] fatal: giving up")
	dropped := 0
	for _, m := range regexp.MustCompile(`lines dropped: .*dropped=(\d+)`).FindAllStringSubmatch(text, -1) {
		n, _ := strconv.Atoi(m[1])
		dropped += n
	}
	t.Logf("%d lines logged, %d dropped", logged, dropped)
	if total := floodLines + 1; logged+dropped != total || dropped == 0 || logged == 0 {
		t.Errorf("%d lines logged and %d dropped; want a part logged and the rest, of %d, counted as dropped\n%s", logged, dropped, total, lastLines(text, 20))
	}
}

// TestLockedPlugin: a plugin is started only when its binary has the hash
// its lock file entry records; without one it runs, with one warning.
func TestLockedPlugin(t *testing.T) {
	dir := t.TempDir()
	configFile := filepath.Join(dir, "config.hcl")
	lockFile := filepath.Join(dir, config.LockFileName)
	good := sha256Of(t, bin("testpeer"))
	locked := func(sum string) *config.Server {
		srv := selfPlugin("self")
		srv.Plugin.Lock = &config.PluginLock{ConfigFile: configFile, File: lockFile, Path: bin("testpeer"), SHA256: sum}
		return srv
	}

	// go-plugin makes a directory in TMPDIR for each plugin's socket;
	// nothing of it may be left, whether the plugin ran or was refused.
	noSocketDirs := func(t *testing.T) func() {
		tmp := t.TempDir()
		t.Setenv("TMPDIR", tmp)
		return func() {
			if left, _ := os.ReadDir(tmp); len(left) > 0 {
				t.Errorf("left in TMPDIR: %v", left)
			}
		}
	}

	t.Run("match", func(t *testing.T) {
		defer noSocketDirs(t)()
		callSelf(t, locked(good))
	})

	t.Run("mismatch", func(t *testing.T) {
		defer noSocketDirs(t)()
		wrong := strings.Repeat("0", 64)
		_, err := dial(t, locked(wrong))
		if !errors.Is(err, plugin.ErrChecksumMismatch) {
			t.Fatalf("err = %v, want ErrChecksumMismatch", err)
		}
		for _, want := range []string{
			`server "self": plugin "testpeer": checksum mismatch: `,
			bin("testpeer") + " has SHA-256 " + good,
			"but " + lockFile + " records " + wrong,
			"refuses to start it",
			"run `mcpvisor plugins lock -config " + configFile + "`",
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q: %v", want, err)
			}
		}
		if left := pluginProcesses(t); len(left) > 0 {
			t.Errorf("plugin processes: %v", left)
		}
	})

	t.Run("sha256 wins", func(t *testing.T) {
		srv := locked(strings.Repeat("0", 64))
		srv.Plugin.SHA256 = strings.ToUpper(good)
		callSelf(t, srv)
	})

	t.Run("unlocked warns once", func(t *testing.T) {
		var log testutil.Buffer
		srv := locked("")
		d, err := plugin.NewDialer(srv, hclogTo(&log))
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			ctx, cancel := context.WithTimeout(context.Background(), srv.ConnectTimeout)
			link, err := d.Dial(ctx)
			cancel()
			if err != nil {
				t.Fatalf("Dial: %v", err)
			}
			link.Close(context.Background())
		}
		text := log.String()
		if n := strings.Count(text, "plugin not locked"); n != 1 {
			t.Errorf("%d warnings about the unlocked plugin in two starts, want 1:\n%s", n, text)
		}
		for _, want := range []string{"`mcpvisor plugins lock`", "sha256=" + good, "command=\"mcpvisor plugins lock -config " + configFile + "\""} {
			if !strings.Contains(text, want) {
				t.Errorf("warning lacks %q:\n%s", want, text)
			}
		}
	})
}

// callSelf dials the self-serving test peer and calls its echo tool.
func callSelf(t *testing.T, srv *config.Server) {
	t.Helper()
	link, err := dial(t, srv)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer link.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, link.Transport(), nil)
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "locked"}})
	if err != nil || resultText(res) != "locked" {
		t.Fatalf("echo = %q, %v", resultText(res), err)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
