package cli_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/cli"
	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// pluginDir is a configuration directory whose server "self" runs a copy
// of the test peer, in bin/, as its plugin (testpeer -plugin serves its
// tools in-process).
type pluginDir struct {
	dir, config, lock, plugin string
}

func newPluginDir(t *testing.T) *pluginDir {
	t.Helper()
	if testpeerErr != nil {
		t.Fatalf("building the test peer: %v", testpeerErr)
	}
	d := &pluginDir{dir: t.TempDir()}
	d.config = filepath.Join(d.dir, "config.hcl")
	d.lock = filepath.Join(d.dir, config.LockFileName)
	d.plugin = filepath.Join(d.dir, "bin", "testpeer")
	if err := os.MkdirAll(filepath.Dir(d.plugin), 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, testpeerBin, d.plugin)
	src := `server "self" {
  plugin "testpeer" {
    command = "./bin/testpeer"
    args    = ["-plugin"]
  }
  reconnect {
    max_retries = 0
  }
}
`
	if err := os.WriteFile(d.config, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return d
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

func fileHash(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// expect runs the CLI and checks its exit code and what it printed.
func expect(t *testing.T, code int, inStdout, inStderr []string, args ...string) (stdout, stderr string) {
	t.Helper()
	got, stdout, stderr := run(args...)
	if got != code {
		t.Fatalf("mcpvisor %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), got, code, stdout, stderr)
	}
	for _, want := range inStdout {
		if !strings.Contains(stdout, want) {
			t.Errorf("mcpvisor %s: stdout lacks %q:\n%s", strings.Join(args, " "), want, stdout)
		}
	}
	for _, want := range inStderr {
		if !strings.Contains(stderr, want) {
			t.Errorf("mcpvisor %s: stderr lacks %q:\n%s", strings.Join(args, " "), want, stderr)
		}
	}
	return stdout, stderr
}

// TestPluginsLock is the lock workflow with a real plugin binary: an
// unlocked plugin runs with a warning; `plugins lock` records it; a
// rebuilt binary (other content) is refused, by validate and at start,
// with both hashes and the command to run; `plugins lock` again, and it
// runs. The lock file round-trips: validate accepts it, and relocking an
// unchanged binary rewrites the same bytes.
func TestPluginsLock(t *testing.T) {
	d := newPluginDir(t)
	call := []string{"call", "-config", d.config, "self__echo", `{"text":"héllo \"wörld\"\n\u2028"}`}
	echoed := `"text": "héllo \"wörld\"\n\u2028"`

	// Unlocked: runs, and validate warns, naming the command.
	expect(t, cli.ExitOK, []string{"valid (1 server(s))"}, []string{"Warning: Plugin not locked", "`mcpvisor plugins lock -config " + d.config + "`"},
		"validate", "-config", d.config)
	expect(t, cli.ExitOK, []string{echoed}, []string{"plugin not locked"}, call...)

	// Locked.
	hash1 := fileHash(t, d.plugin)
	expect(t, cli.ExitOK, []string{d.lock + ": 1 plugin(s) locked", `server "self": plugin "testpeer": ` + d.plugin + " sha256 " + hash1 + " (new)"}, nil,
		"plugins", "lock", "-config", d.config)
	lockFile, err := os.ReadFile(d.lock)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`# This file is maintained automatically by "mcpvisor plugins lock".`, `path   = "bin/testpeer"`, `sha256 = "` + hash1 + `"`} {
		if !strings.Contains(string(lockFile), want) {
			t.Errorf("lock file lacks %q:\n%s", want, lockFile)
		}
	}
	_, stderr := expect(t, cli.ExitOK, []string{"valid (1 server(s))"}, nil, "validate", "-config", d.config)
	if stderr != "" {
		t.Errorf("validate of a fresh lock printed:\n%s", stderr)
	}
	if _, stderr := expect(t, cli.ExitOK, []string{echoed}, nil, call...); strings.Contains(stderr, "plugin not locked") {
		t.Errorf("a locked plugin was warned about:\n%s", stderr)
	}

	// Rebuilt with other content: refused.
	if err := testutil.GoBuild(d.plugin, "./plugins/internal/testpeer", "-ldflags", "-X main.version=2"); err != nil {
		t.Fatal(err)
	}
	hash2 := fileHash(t, d.plugin)
	if hash2 == hash1 {
		t.Fatal("the rebuilt test peer has the same hash")
	}
	expect(t, cli.ExitUsage, nil, []string{
		"Error: Plugin binary does not match the lock file",
		d.plugin + " has SHA-256 " + hash2,
		"records " + hash1,
		"run `mcpvisor plugins lock -config " + d.config + "`",
	}, "validate", "-config", d.config)
	expect(t, cli.ExitRuntime, nil, []string{
		`server "self": plugin "testpeer": checksum mismatch: ` + d.plugin + " has SHA-256 " + hash2 + ", but " + d.lock + " records " + hash1,
		"run `mcpvisor plugins lock -config " + d.config + "`",
	}, call...)

	// Relocked after the deliberate upgrade: runs again.
	expect(t, cli.ExitOK, []string{"sha256 " + hash2 + " (changed from " + hash1 + ")"}, nil, "plugins", "lock", "-config", d.config)
	expect(t, cli.ExitOK, []string{"valid (1 server(s))"}, nil, "validate", "-config", d.config)
	expect(t, cli.ExitOK, []string{echoed}, nil, call...)

	before, _ := os.ReadFile(d.lock)
	expect(t, cli.ExitOK, []string{"(unchanged)"}, nil, "plugins", "lock", "-config", d.config)
	after, _ := os.ReadFile(d.lock)
	if string(before) != string(after) {
		t.Errorf("relocking an unchanged binary changed the lock file:\n%s\n---\n%s", before, after)
	}
}

func TestPluginsLockErrors(t *testing.T) {
	d := newPluginDir(t)
	os.Remove(d.plugin)
	expect(t, cli.ExitRuntime, nil, []string{"Error: Cannot read plugin binary", d.plugin + " does not exist", "not written"},
		"plugins", "lock", "-config", d.config)
	if _, err := os.Stat(d.lock); err == nil {
		t.Error("a lock file was written")
	}
	// validate: a binary not built yet cannot be checked; not an error.
	expect(t, cli.ExitOK, []string{"valid"}, []string{"Warning: Cannot check plugin binary"}, "validate", "-config", d.config)

	expect(t, cli.ExitUsage, nil, []string{"Usage: mcpvisor plugins"}, "plugins")
	expect(t, cli.ExitUsage, nil, []string{`unknown command "unlock"`}, "plugins", "unlock")
	expect(t, cli.ExitUsage, nil, []string{`unexpected argument "x"`}, "plugins", "lock", "-config", d.config, "x")

	// A garbled lock file is an invalid configuration, for every command.
	if err := os.WriteFile(d.lock, []byte("server \"self\" {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"validate", "run", "plugins lock"} {
		args := append(strings.Fields(cmd), "-config", d.config)
		expect(t, cli.ExitUsage, nil, []string{"Unclosed configuration block", config.LockFileName, "delete the file and run `mcpvisor plugins lock`"}, args...)
	}
}

// TestRunStdioPluginHasNoStdin: under `mcpvisor run --stdio`, a plugin that
// reads its standard input from the moment it starts gets EOF at once and
// none of the client's bytes, while the client's calls through the plugin,
// pipelined, come back byte for byte.
func TestRunStdioPluginHasNoStdin(t *testing.T) {
	d := newPluginDir(t)
	cmd := exec.Command(mcpvisorBin, "run", "--stdio", "-config", d.config)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testutil.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	defer func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("mcpvisor stderr:\n%s", stderr.String())
		}
	}()

	c := &lineClient{t: t, w: stdin, r: bufio.NewReaderSize(stdout, 1<<20)}
	c.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}`)
	c.result(0)
	c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	// Calls in flight together: a plugin reading mcpvisor's stdin would
	// take some of them.
	texts := []string{
		"plain",
		"héllo \"wörld\"\n\ttab\\backslash",
		"\u2028\u2029 line separators, \u0000 NUL, \U0001F600 emoji",
		strings.Repeat("0123456789abcdef", 16<<10), // 256 KiB
		`{"looks":"like JSON"}`,
	}
	for i, text := range texts {
		arg, _ := json.Marshal(map[string]string{"text": text})
		c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"self__echo","arguments":%s}}`, i+1, arg))
	}
	for i, text := range texts {
		if got := toolText(t, c.result(i+1)); got != text {
			t.Errorf("echo %d: got %d bytes, want the %d sent, byte for byte", i+1, len(got), len(text))
		}
	}

	c.send(`{"jsonrpc":"2.0","id":100,"method":"tools/call","params":{"name":"self__stdin","arguments":{}}}`)
	var report struct {
		Bytes int64  `json:"bytes"`
		EOF   bool   `json:"eof"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(toolText(t, c.result(100))), &report); err != nil {
		t.Fatal(err)
	}
	if !report.EOF || report.Bytes != 0 || report.Error != "" {
		t.Errorf("the plugin's stdin: read %d bytes, eof %v, error %q; want EOF at once and nothing", report.Bytes, report.EOF, report.Error)
	}

	c.send(`{"jsonrpc":"2.0","id":101,"method":"tools/call","params":{"name":"self__pid","arguments":{}}}`)
	pid, err := strconv.Atoi(toolText(t, c.result(101)))
	if err != nil {
		t.Fatal(err)
	}

	// The client goes away: mcpvisor shuts down and takes the plugin along.
	stdin.Close()
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("mcpvisor exited with %v", waitErr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("mcpvisor still running 30s after its stdin closed")
	}
	testutil.Eventually(t, 5*time.Second, "the plugin process to be gone", func() bool { return !testutil.Alive(pid) })
}

// lineClient speaks newline-delimited JSON-RPC to a process.
type lineClient struct {
	t    *testing.T
	w    io.Writer
	r    *bufio.Reader
	seen map[int]json.RawMessage // responses read before they were asked for
}

func (c *lineClient) send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.w, line+"\n"); err != nil {
		c.t.Fatalf("writing to mcpvisor: %v", err)
	}
}

// result returns the result of the response with id, reading messages
// until it comes; responses to calls in flight together may come in any
// order, and notifications are skipped.
func (c *lineClient) result(id int) json.RawMessage {
	c.t.Helper()
	if c.seen == nil {
		c.seen = map[int]json.RawMessage{}
	}
	type answer struct {
		line []byte
		err  error
	}
	deadline := time.After(30 * time.Second)
	for {
		if res, ok := c.seen[id]; ok {
			delete(c.seen, id)
			return res
		}
		ch := make(chan answer, 1)
		go func() {
			line, err := c.r.ReadBytes('\n')
			ch <- answer{line, err}
		}()
		var a answer
		select {
		case a = <-ch:
		case <-deadline:
			c.t.Fatalf("no response %d within 30s", id)
		}
		if a.err != nil {
			c.t.Fatalf("reading response %d: %v", id, a.err)
		}
		var msg struct {
			ID     *int            `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(a.line, &msg); err != nil {
			c.t.Fatalf("mcpvisor wrote %.300q: %v", a.line, err)
		}
		switch {
		case msg.ID == nil:
		case msg.Error != nil:
			c.t.Fatalf("response %d: error %s", *msg.ID, msg.Error)
		default:
			c.seen[*msg.ID] = msg.Result
		}
	}
}

// toolText is the text of a tools/call result's only content.
func toolText(t *testing.T, result json.RawMessage) string {
	t.Helper()
	var r struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if err := json.Unmarshal(result, &r); err != nil || r.IsError || len(r.Content) != 1 || r.Content[0].Type != "text" {
		t.Fatalf("tools/call result %.300s: %v", result, err)
	}
	return r.Content[0].Text
}
