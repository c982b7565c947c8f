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
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host"
	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
	"github.com/mcpvisor/mcpvisor/host/internal/wire"
)

var bins map[string]string

func TestMain(m *testing.M) {
	servePeerRequest() // a peer process of TestControlSocketRefusesAnotherUser
	os.Exit(testutil.BuildAndRun(m, func(b map[string]string) {
		bins = b
		// The test peer as a plugin serving its tools in-process (-plugin).
		bins["testpeer"] = filepath.Join(filepath.Dir(b["echo"]), "testpeer")
		if err := testutil.GoBuild(bins["testpeer"], "./plugins/internal/testpeer"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			delete(bins, "testpeer")
		}
	}, "echo", "notes", "everything", testutil.Mcpvisor))
}

// testLogOutput, when set, receives the host's logs (server stderr lines
// included) of the hosts a test starts.
var testLogOutput io.Writer

func logger(t *testing.T) hclog.Logger {
	if testLogOutput != nil {
		return hclog.New(&hclog.LoggerOptions{Output: testLogOutput, Level: hclog.Info})
	}
	if testing.Verbose() {
		return hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Debug})
	}
	return hclog.New(&hclog.LoggerOptions{Output: io.Discard})
}

// startHost loads src as config.hcl and starts a host with a downstream
// go-sdk client connected to its gateway over in-memory transports.
func startHost(t *testing.T, src string, clientOpts *mcp.ClientOptions) (*host.Host, *mcp.ClientSession) {
	t.Helper()
	return startHostWithClient(t, src, clientOpts, nil, inMemory, nil)
}

// downstreamLink connects a test's client to gateway g: it starts serving
// (until the test ends) and returns the client's transport.
type downstreamLink func(t *testing.T, h *host.Host) mcp.Transport

// serveOver serves h on st until the test ends.
func serveOver(t *testing.T, h *host.Host, st mcp.Transport) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.ServeTransport(ctx, st) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

func inMemory(t *testing.T, h *host.Host) mcp.Transport {
	ct, st := mcp.NewInMemoryTransports()
	serveOver(t, h, st)
	return ct
}

// linePipes joins the client over OS pipes to the host's own line
// transport: what `run --stdio` serves on stdin and stdout.
func linePipes(t *testing.T, h *host.Host) mcp.Transport {
	t.Helper()
	upR, upW, err := os.Pipe() // client → gateway
	if err != nil {
		t.Fatal(err)
	}
	downR, downW, err := os.Pipe() // gateway → client
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, f := range []*os.File{upR, upW, downR, downW} {
			f.Close()
		}
	})
	serveOver(t, h, wire.NewLineTransport(upR, downW))
	return &mcp.IOTransport{Reader: downR, Writer: upW}
}

// overHTTP serves the host's HTTP handler on a loopback httptest server.
func overHTTP(t *testing.T, h *host.Host) mcp.Transport {
	srv := httptest.NewServer(h.Handler())
	t.Cleanup(srv.Close)
	return &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp"}
}

// overServe serves the host with Serve (what `mcpvisor run` does) on a
// loopback port.
func overServe(t *testing.T, h *host.Host) mcp.Transport {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return &mcp.StreamableClientTransport{Endpoint: "http://" + ln.Addr().String() + "/mcp"}
}

func startHostWithClient(t *testing.T, src string, clientOpts *mcp.ClientOptions, setup func(*mcp.Client), link downstreamLink, so *mcp.ClientSessionOptions) (*host.Host, *mcp.ClientSession) {
	t.Helper()
	h := readyHost(t, src)
	ct := link(t, h)
	client := mcp.NewClient(&mcp.Implementation{Name: "test"}, clientOpts)
	if setup != nil {
		setup(client)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, ct, so)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return h, cs
}

// readyHost loads src as config.hcl, starts a host on it and returns once
// every server is ready. The host is closed when the test ends.
func readyHost(t *testing.T, src string) *host.Host {
	t.Helper()
	h := settledHost(t, src)
	for _, st := range h.Status() {
		if st.State != "ready" {
			t.Fatalf("server %s is %s: %s", st.Name, st.State, st.LastError)
		}
	}
	return h
}

// settledHost loads src as config.hcl, starts a host on it with opts and
// returns once every server has settled (ready or not). The host is
// closed, without error, when the test ends.
func settledHost(t *testing.T, src string, opts ...host.Option) *host.Host {
	t.Helper()
	cfg, err := config.Parse([]byte(src), filepath.Join(t.TempDir(), "config.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(cfg, append([]host.Option{host.WithLogger(logger(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h.Start(ctx)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := h.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	if err := h.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	return h
}

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	var names []string
	for tool, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	return names
}

func textOf(t *testing.T, c mcp.Content) string {
	t.Helper()
	tc, ok := c.(*mcp.TextContent)
	if !ok {
		t.Fatalf("content %T, want text", c)
	}
	return tc.Text
}

func TestTwoServersAggregated(t *testing.T) {
	src := fmt.Sprintf(`
server "echo" {
  command = %q
  tools {
    exclude = ["crash", "progress", "image", "roots", "meta", "hang"]
  }
}
server "notes" {
  command = %q
  tools {
    include = ["add_note", "p*"]
    exclude = ["pid"]
  }
}
`, bins["echo"], bins["notes"])
	h, cs := startHost(t, src, nil)
	ctx := context.Background()

	// notes: include makes an allow-list, and pid matches both lists:
	// include wins.
	want := []string{"echo__add", "echo__echo", "echo__fail", "echo__jsonrpc_error", "echo__pid", "echo__sleep",
		"notes__add_note", "notes__pid"}
	if got := toolNames(t, cs); !slices.Equal(got, want) {
		t.Fatalf("tools\n got %v\nwant %v", got, want)
	}

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__echo", Arguments: map[string]any{"text": "routed"}})
	if err != nil || textOf(t, res.Content[0]) != "routed" {
		t.Fatalf("echo__echo: %v %+v", err, res)
	}
	// Each prefix reaches its own process.
	p1, _ := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__pid"})
	p2, _ := cs.CallTool(ctx, &mcp.CallToolParams{Name: "notes__pid"})
	if textOf(t, p1.Content[0]) == textOf(t, p2.Content[0]) {
		t.Fatal("echo__pid and notes__pid answered from one process")
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__add", Arguments: map[string]any{"a": 2, "b": 40}})
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := res.StructuredContent.(map[string]any); !ok || m["sum"] != float64(42) {
		t.Errorf("structuredContent %#v, want sum 42", res.StructuredContent)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__fail", Arguments: map[string]any{"message": "nope"}})
	if err != nil || !res.IsError {
		t.Errorf("fail: err=%v isError=%v", err, res != nil && res.IsError)
	}
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__jsonrpc_error"})
	if err == nil || !strings.Contains(err.Error(), "custom failure") {
		t.Errorf("jsonrpc_error: %v", err)
	}

	// Resources and prompts are routed back to the notes server.
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "notes://list"})
	if err != nil || !strings.Contains(rr.Contents[0].Text, "welcome") {
		t.Fatalf("notes://list: %v %+v", err, rr)
	}
	rr, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "notes://note/todo"})
	if err != nil || len(rr.Contents) == 0 {
		t.Fatalf("template read: %v", err)
	}
	gp, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "notes__summarize", Arguments: map[string]string{"name": "welcome"}})
	if err != nil || len(gp.Messages) == 0 {
		t.Fatalf("notes__summarize: %v", err)
	}
	comp, err := cs.Complete(ctx, &mcp.CompleteParams{
		Ref:      &mcp.CompleteReference{Type: "ref/prompt", Name: "notes__summarize"},
		Argument: mcp.CompleteParamsArgument{Name: "name", Value: "we"},
	})
	if err != nil || !slices.Contains(comp.Completion.Values, "welcome") {
		t.Fatalf("completion: %v %+v", err, comp)
	}

	// The library path is the same path.
	lres, err := h.CallTool(ctx, "echo__echo", map[string]any{"text": "library"})
	if err != nil || textOf(t, lres.Content[0]) != "library" {
		t.Fatalf("host.CallTool: %v", err)
	}
	if _, err := h.CallTool(ctx, "nope__nothing", nil); !errors.Is(err, host.ErrUnknownTool) {
		t.Fatalf("unknown tool: %v", err)
	}
}

func TestCollisionIsDeterministicAndReported(t *testing.T) {
	src := fmt.Sprintf(`
server "b" {
  command = %q
  prefix  = ""
}
server "a" {
  command = %q
  prefix  = ""
}
`, bins["echo"], bins["echo"])
	h, cs := startHost(t, src, nil)
	names := toolNames(t, cs)
	if !slices.Contains(names, "echo") || !slices.Contains(names, "pid") {
		t.Fatalf("tools %v", names)
	}
	for _, tool := range h.Tools() {
		if tool.Tool.Name == "echo" && tool.Server != "a" {
			t.Fatalf("echo routed to %q, want the server that sorts first (a)", tool.Server)
		}
	}
	found := false
	for _, c := range host.Collisions(h) {
		if c.Name == "echo" && c.Winner == "a" && slices.Contains(c.Losers, "b") {
			found = true
		}
	}
	if !found {
		t.Fatalf("collision not reported: %+v", host.Collisions(h))
	}
}

// An upstream's own list_changed (a new note) reaches the downstream client.
func TestUpstreamListChangedReachesClient(t *testing.T) {
	changed := make(chan struct{}, 10)
	src := fmt.Sprintf(`server "notes" {
  command = %q
}
`, bins["notes"])
	_, cs := startHost(t, src, &mcp.ClientOptions{
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "notes__add_note",
		Arguments: map[string]any{"name": "fresh", "text": "new"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("no resources list_changed after the upstream added a note")
	}
	for r, err := range cs.Resources(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if r.URI == "notes://note/fresh" {
			return
		}
	}
	t.Fatal("the new note's resource is not listed")
}

// Progress notifications reach the client that asked, with its own token,
// before the result.
func TestProgressForwarded(t *testing.T) {
	var got []float64
	progress := make(chan *mcp.ProgressNotificationParams, 100)
	src := fmt.Sprintf(`server "echo" {
  command = %q
}
`, bins["echo"])
	_, cs := startHost(t, src, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			progress <- r.Params
		},
	})
	p := &mcp.CallToolParams{Name: "echo__progress", Arguments: map[string]any{"steps": 3}}
	p.SetProgressToken("tok-1")
	if _, err := cs.CallTool(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
	for len(got) < 3 {
		select {
		case n := <-progress:
			if n.ProgressToken != "tok-1" {
				t.Fatalf("token %v, want tok-1", n.ProgressToken)
			}
			got = append(got, n.Progress)
		case <-timeout:
			t.Fatalf("got %d progress notifications, want 3", len(got))
		}
	}
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// SIGTERM to `mcpvisor run` shuts down gracefully: exit 0 and no process
// it started is left, wrappers' children included.
func TestRunSIGTERMLeavesNoDescendants(t *testing.T) {
	addr := freePort(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.hcl")
	src := fmt.Sprintf(`host {
  listen = %q
}
server "echo" {
  command = %q
}
server "wrapped" {
  command = "sh"
  args    = ["-c", "%s; exit $?"]
}
`, addr, bins["echo"], bins["notes"])
	if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bins["mcpvisor"], "run", "-config", cfgPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)

	testutil.Eventually(t, 60*time.Second, "both servers ready", func() bool {
		resp, err := http.Get("http://" + addr + "/status")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Count(string(b), `"state": "ready"`) == 2
	})
	// `mcpvisor status` reads the running host.
	out, err := exec.Command(bins["mcpvisor"], "status", "-config", cfgPath).CombinedOutput()
	if err != nil || strings.Count(string(out), " ready ") != 2 || !strings.Contains(string(out), "wrapped") {
		t.Fatalf("mcpvisor status: %v\n%s", err, out)
	}
	desc := testutil.Descendants(cmd.Process.Pid)
	if len(desc) < 3 { // echo, sh, notes
		t.Fatalf("descendants %v, want at least echo, sh and its child", desc)
	}
	terminate(t, cmd, desc, stderr.String)
}

// An upstream's roots/list during a call is answered by the downstream
// client that made the call. (Server-to-client requests exist only on the
// session-based protocol; 2026-07-28 replaces them with input-required
// results.)
//
// Over stdio the call is forwarded as bytes; over HTTP it goes through the
// go-sdk server, whose answer stream carries the roots/list request.
func TestRootsForwarded(t *testing.T) {
	for name, link := range map[string]downstreamLink{"in-memory": inMemory, "line": linePipes, "http": overHTTP, "serve": overServe} {
		t.Run(name, func(t *testing.T) {
			src := fmt.Sprintf(`server "echo" {
  command = %q
}
`, bins["echo"])
			h, cs := startHostWithClient(t, src, nil, func(c *mcp.Client) {
				c.AddRoots(&mcp.Root{URI: "file:///work/project", Name: "project"})
			}, link, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
			before := host.Forwarded(h)
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo__roots"})
			if err != nil {
				t.Fatal(err)
			}
			if got := textOf(t, res.Content[0]); got != "file:///work/project" {
				t.Fatalf("upstream saw roots %q, want the downstream client's", got)
			}
			// Every link forwards the call as bytes: stdio-like ones and,
			// since results pass through (#35 item 2), 2025-11-25 HTTP
			// sessions with a standalone stream for the roots request.
			if forwarded := host.Forwarded(h) > before; !forwarded {
				t.Errorf("%s: not forwarded as bytes; want the upstream's bytes on every link", name)
			}
		})
	}
}

// A client that asked for log messages gets a call's log messages over
// HTTP, on the call's own stream. (The go-sdk client runs notification
// handlers on goroutines of their own, so the last one may finish after
// CallTool returns.)
func TestLogsReachLoggingClientOverHTTP(t *testing.T) {
	src := fmt.Sprintf(`server "ev" {
  command = %q
}
`, bins["everything"])
	var (
		mu   sync.Mutex
		logs []string
	)
	client := &mcp.ClientOptions{LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
		mu.Lock()
		logs = append(logs, fmt.Sprint(req.Params.Data))
		mu.Unlock()
	}}
	_, cs := startHostWithClient(t, src, client, nil, overHTTP, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ev__test_tool_with_logging"}); err != nil {
		t.Fatal(err)
	}
	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	logs = nil
	mu.Unlock()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ev__test_tool_with_logging"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the tool's three log messages", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(logs, "Tool execution started") && slices.Contains(logs, "Tool processing data") &&
			slices.Contains(logs, "Tool execution completed") && len(logs) == 3
	})
}

// A tool set that changes across a restart is picked up: the respawned
// server is re-listed, the registry applies the difference and the client
// is told.
func TestToolSetChangeAcrossRestart(t *testing.T) {
	suffix := filepath.Join(t.TempDir(), "suffix")
	if err := os.WriteFile(suffix, []byte("A"), 0o600); err != nil {
		t.Fatal(err)
	}
	changed := make(chan struct{}, 10)
	src := fmt.Sprintf(`server "echo" {
  command = "sh"
  args    = ["-c", "exec %s -tools-suffix \"$(cat %s)\""]
}
`, bins["echo"], suffix)
	h, cs := startHost(t, src, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
	if names := toolNames(t, cs); !slices.Contains(names, "echo__extraA") {
		t.Fatalf("tools %v lack echo__extraA", names)
	}
	if err := os.WriteFile(suffix, []byte("B"), 0o600); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(statusOf(t, h, "echo").Pid, syscall.SIGKILL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		names := toolNames(t, cs)
		if slices.Contains(names, "echo__extraB") {
			if slices.Contains(names, "echo__extraA") {
				t.Fatalf("the old tool is still exposed: %v", names)
			}
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("echo__extraB never appeared; tools %v", names)
		}
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__extraB", Arguments: map[string]any{"value": "v"}})
	if err != nil || !strings.Contains(textOf(t, res.Content[0]), "extraB") {
		t.Fatalf("new tool: %v", err)
	}
}

// Reload touches only the blocks that changed: an unchanged server keeps
// its process, a removed one stops and its tools go, an added one starts.
func TestReloadTouchesOnlyChangedBlocks(t *testing.T) {
	first := fmt.Sprintf(`
server "echo" {
  command = %q
}
server "notes" {
  command = %q
}
`, bins["echo"], bins["notes"])
	h, cs := startHost(t, first, nil)
	echoPid := statusOf(t, h, "echo").Pid
	notesPid := statusOf(t, h, "notes").Pid

	second := fmt.Sprintf(`
server "echo" {
  command = %q
}
server "more" {
  command = %q
  prefix  = "more"
}
`, bins["echo"], bins["echo"])
	// The same file, rewritten (what SIGHUP reloads).
	cfg, err := config.Parse([]byte(second), h.Config().Filename)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := h.Reload(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Unchanged, []string{"echo"}) || !slices.Equal(res.Added, []string{"more"}) ||
		!slices.Equal(res.Removed, []string{"notes"}) || len(res.Restarted) != 0 {
		t.Fatalf("reload result %+v", res)
	}
	if err := h.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	if got := statusOf(t, h, "echo"); got.Pid != echoPid || got.Generation != 1 {
		t.Errorf("unchanged server was touched: pid %d→%d, generation %d", echoPid, got.Pid, got.Generation)
	}
	if testutil.Alive(notesPid) {
		t.Error("removed server's process still running")
	}
	names := toolNames(t, cs)
	if slices.Contains(names, "notes__add_note") || !slices.Contains(names, "more__echo") || !slices.Contains(names, "echo__echo") {
		t.Errorf("tools after reload: %v", names)
	}
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "more__echo", Arguments: map[string]any{"text": "new"}})
	if err != nil || textOf(t, r.Content[0]) != "new" {
		t.Fatalf("added server's tool: %v", err)
	}

	// A changed block restarts that server only.
	third := strings.Replace(second, `prefix  = "more"`, `prefix  = "again"`, 1)
	third = strings.Replace(third, "server \"more\" {", "server \"more\" {\n  timeout = \"10s\"", 1)
	cfg, err = config.Parse([]byte(third), h.Config().Filename)
	if err != nil {
		t.Fatal(err)
	}
	res, err = h.Reload(ctx, cfg)
	if err != nil || !slices.Equal(res.Restarted, []string{"more"}) || !slices.Equal(res.Unchanged, []string{"echo"}) {
		t.Fatalf("second reload: %+v %v", res, err)
	}
	h.WaitSettled(ctx)
	if names := toolNames(t, cs); !slices.Contains(names, "again__echo") || slices.Contains(names, "more__echo") {
		t.Errorf("tools after the prefix change: %v", names)
	}
}

// SIGHUP reloads the file; an invalid file keeps the running configuration.
func TestRunSIGHUPReloads(t *testing.T) {
	addr := freePort(t)
	cfgPath := filepath.Join(t.TempDir(), "config.hcl")
	write := func(src string) {
		if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	base := fmt.Sprintf("host {\n  listen = %q\n}\nserver \"echo\" {\n  command = %q\n}\n", addr, bins["echo"])
	write(base)
	cmd := exec.Command(bins["mcpvisor"], "run", "-config", cfgPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr := &testutil.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	status := func() string {
		resp, err := http.Get("http://" + addr + "/status")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	testutil.Eventually(t, 60*time.Second, "echo ready", func() bool { return strings.Contains(status(), `"state": "ready"`) })

	write("server \"broken\" {\n  comand = \"x\"\n}\n")
	cmd.Process.Signal(syscall.SIGHUP)
	testutil.Eventually(t, 30*time.Second, "the invalid reload to be reported", func() bool {
		return strings.Contains(stderr.String(), "keeping the running one")
	})
	if !strings.Contains(status(), `"name": "echo"`) {
		t.Fatal("an invalid reload changed the running servers")
	}

	write(base + fmt.Sprintf("server \"notes\" {\n  command = %q\n}\n", bins["notes"]))
	cmd.Process.Signal(syscall.SIGHUP)
	testutil.Eventually(t, 60*time.Second, "notes ready after reload", func() bool {
		return strings.Count(status(), `"state": "ready"`) == 2
	})
}

// A client on the session-based protocol over a stdio-like connection gets
// tools/call forwarded as bytes; what it sees must be what the SDK path
// gives: every content type, structuredContent, isError, _meta, the
// upstream's JSON-RPC error with code and data, crash handling, and cancel.
// The same checks run with the client on in-memory transports, on the line
// transport `run --stdio` serves (which writes results as the upstream's
// bytes), and on streamable HTTP (the go-sdk server).
func TestForwardFidelity(t *testing.T) {
	t.Run("in-memory", func(t *testing.T) { testForwardFidelity(t, inMemory, true) })
	t.Run("line", func(t *testing.T) { testForwardFidelity(t, linePipes, true) })
	// 2025-11-25 HTTP sessions too: results pass through (#35 item 2).
	t.Run("http", func(t *testing.T) { testForwardFidelity(t, overHTTP, true) })
	t.Run("serve", func(t *testing.T) { testForwardFidelity(t, overServe, true) })
}

func testForwardFidelity(t *testing.T, link downstreamLink, forwarded bool) {
	h, cs, logs := echoHostWithLogs(t, link)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	before := host.Forwarded(h)

	checkResultKinds(t, ctx, cs)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__image"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Content) != 4 || res.Meta == nil {
		t.Errorf("image: %d contents, _meta %v; want 4 and _meta kept", len(res.Content), res.Meta)
	}
	for _, c := range res.Content {
		if _, ok := c.(*mcp.ImageContent); ok {
			if c.(*mcp.ImageContent).Meta == nil {
				t.Error("content _meta dropped")
			}
		}
	}

	// A canceled call returns at once, the cancellation reaches the
	// upstream (its sleep says so on stderr, which the host logs), and the
	// server stays usable.
	cancelSleep(t, cs, inLogs(t, logs))

	// A crash mid-call: outcome unknown, not replayed; then the respawned
	// server answers.
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__crash"})
	if err == nil || !strings.Contains(err.Error(), "outcome is unknown") {
		t.Errorf("crash: %v", err)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__echo", Arguments: map[string]any{"text": "after"}})
	if err != nil || textOf(t, res.Content[0]) != "after" {
		t.Fatalf("after crash: %v", err)
	}
	// Unknown tools still get the SDK's answer.
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__nope"}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
		t.Errorf("unknown tool: %v", err)
	}
	n := host.Forwarded(h) - before
	if forwarded && n < 7 {
		t.Errorf("%d calls were forwarded as bytes, want every known-tool call (7)", n)
	}
	if !forwarded && n != 0 {
		t.Errorf("%d calls were forwarded as bytes, want none over HTTP", n)
	}
}

// On the SDK path too (a client on 2026-07-28), a downstream cancel
// reaches the upstream.
func TestCancelReachesUpstream(t *testing.T) {
	src := fmt.Sprintf(`server "echo" {
  command = %q
}
`, bins["echo"])
	logs := &testutil.Buffer{}
	testLogOutput = logs
	defer func() { testLogOutput = nil }()
	h, cs := startHost(t, src, nil)
	before := host.Forwarded(h)
	cancelSleep(t, cs, inLogs(t, logs))
	if host.Forwarded(h) != before {
		t.Error("a 2026-07-28 client's call was forwarded as bytes")
	}
}

// cancelSleep starts a long echo__sleep, cancels it once in flight, checks
// the caller gets the cancellation, and calls reached, which must wait
// until the upstream reports that the cancellation reached it.
func cancelSleep(t *testing.T, cs *mcp.ClientSession, reached func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__sleep", Arguments: map[string]any{"ms": 60000}})
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("canceled call: %v", err)
	}
	reached()
}

// echoHostWithLogs starts a host with the echo server, whose logs (the
// upstream's stderr among them) it captures, and a client on a
// session-based protocol over link.
func echoHostWithLogs(t *testing.T, link downstreamLink) (*host.Host, *mcp.ClientSession, *testutil.Buffer) {
	t.Helper()
	src := fmt.Sprintf(`server "echo" {
  command = %q
}
`, bins["echo"])
	logs := &testutil.Buffer{}
	testLogOutput = logs
	t.Cleanup(func() { testLogOutput = nil })
	h, cs := startHostWithClient(t, src, nil, nil, link, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	return h, cs, logs
}

// inLogs waits until the host's logs (the upstream's stderr among them)
// say the upstream saw a cancellation.
func inLogs(t *testing.T, logs *testutil.Buffer) func() {
	return func() {
		testutil.Eventually(t, 30*time.Second, "the upstream to see the cancellation", func() bool {
			return strings.Contains(logs.String(), "sleep canceled")
		})
	}
}

// checkResultKinds calls echo tools whose answers are a structured
// result, a tool error and a JSON-RPC error, and checks each arrives as
// the upstream sent it.
func checkResultKinds(t *testing.T, ctx context.Context, cs *mcp.ClientSession) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__add", Arguments: map[string]any{"a": 1, "b": 2}})
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := res.StructuredContent.(map[string]any); !ok || m["sum"] != float64(3) {
		t.Errorf("structuredContent %#v", res.StructuredContent)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__fail", Arguments: map[string]any{"message": "nope"}})
	if err != nil || !res.IsError || textOf(t, res.Content[0]) != "nope" {
		t.Errorf("fail: %v %+v", err, res)
	}
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__jsonrpc_error"})
	var wire *jsonrpc.Error
	if !errors.As(err, &wire) || wire.Code != -32042 || wire.Message != "custom failure" || !strings.Contains(string(wire.Data), "requested by jsonrpc_error") {
		t.Errorf("jsonrpc_error: %#v", err)
	}
}

// A forwarded call to a streamable HTTP upstream (which goes through the
// go-sdk client): results and errors as the SDK path gives them, a
// server-to-client request during the call (roots/list: on the call's SSE
// stream, or on the session's own stream when the upstream answers with
// JSON) answered by the calling client, and a cancel that reaches the
// upstream.
func TestHTTPUpstream(t *testing.T) {
	t.Run("sse", func(t *testing.T) { testHTTPUpstream(t) })
	t.Run("json", func(t *testing.T) { testHTTPUpstream(t, "-json-response") })
}

func testHTTPUpstream(t *testing.T, flags ...string) {
	up := testutil.StartServer(t, bins["echo"], append([]string{"-http", "127.0.0.1:0"}, flags...)...)
	src := fmt.Sprintf(`server "echo" {
  url = %q
}
`, up.URL)
	h, cs := startHostWithClient(t, src, nil, func(c *mcp.Client) {
		c.AddRoots(&mcp.Root{URI: "file:///work/project", Name: "project"})
	}, linePipes, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	before := host.Forwarded(h)

	checkResultKinds(t, ctx, cs)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__roots"})
	if err != nil {
		t.Fatal(err)
	}
	if got := textOf(t, res.Content[0]); got != "file:///work/project" {
		t.Errorf("upstream saw roots %q, want the downstream client's", got)
	}
	if n := host.Forwarded(h) - before; n != 4 {
		t.Errorf("%d calls were forwarded, want 4", n)
	}

	cancelSleep(t, cs, func() { up.WaitLine(t, "sleep canceled", 30*time.Second) })
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__echo", Arguments: map[string]any{"text": "after"}})
	if err != nil || textOf(t, res.Content[0]) != "after" {
		t.Fatalf("after cancel: %v", err)
	}
}

// A tools/call POST is refused when the go-sdk handler or the host's
// ingress would refuse it, on the host's handler and on Serve alike.
func TestHTTPRefusals(t *testing.T) {
	for _, link := range []struct {
		name string
		link downstreamLink
	}{{"handler", overHTTP}, {"serve", overServe}} {
		t.Run(link.name, func(t *testing.T) { testHTTPRefusals(t, link.link) })
	}
}

func testHTTPRefusals(t *testing.T, link downstreamLink) {
	src := fmt.Sprintf(`server "echo" {
  command = %q
}
`, bins["echo"])
	h := readyHost(t, src)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ct := link(t, h).(*mcp.StreamableClientTransport)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo__echo","arguments":{"text":"raw"}}}`
	post := func(mutate func(*http.Request)) (*http.Response, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ct.Endpoint, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", cs.ID())
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		mutate(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	resp, got := post(func(*http.Request) {})
	if resp.StatusCode != http.StatusOK || !strings.Contains(got, `"text":"raw"`) {
		t.Fatalf("plain call: %d %s", resp.StatusCode, got)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*http.Request)
		want   int
	}{
		{"non-loopback Host", func(r *http.Request) { r.Host = "evil.example:80" }, http.StatusForbidden},
		{"upper-case localhost Host", func(r *http.Request) { r.Host = "LOCALHOST:80" }, http.StatusForbidden},
		{"foreign Origin", func(r *http.Request) { r.Header.Set("Origin", "http://evil.example") }, http.StatusForbidden},
		{"unknown session", func(r *http.Request) { r.Header.Set("Mcp-Session-Id", "no-such-session") }, http.StatusNotFound},
		{"text body", func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") }, http.StatusUnsupportedMediaType},
		{"no event-stream in Accept", func(r *http.Request) { r.Header.Set("Accept", "application/json") }, http.StatusBadRequest},
		{"unsupported protocol version", func(r *http.Request) { r.Header.Set("Mcp-Protocol-Version", "1999-01-01") }, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if resp, body := post(tc.mutate); resp.StatusCode != tc.want {
				t.Errorf("status %d (%s), want %d", resp.StatusCode, strings.TrimSpace(body), tc.want)
			}
		})
	}
}

// `run --stdio` with its stdin still open (the client is idle) shuts down
// on SIGTERM at once, exits 0 and leaves no server process behind. With no
// HTTP listener there is nothing to drain: a drain of an hour is not
// waited for.
func TestRunStdioSIGTERMWhileIdle(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "config.hcl")
	src := fmt.Sprintf(`host {
  drain = "1h"
}
server "echo" {
  command = %q
}
`, bins["echo"])
	if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bins["mcpvisor"], "run", "--stdio", "-config", cfgPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testutil.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)

	// One round trip proves it is serving (and reading stdin).
	io.WriteString(stdin, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.Contains(line, `"id":1`) {
		t.Fatalf("initialize: %v %q\n%s", err, line, stderr.String())
	}
	testutil.Eventually(t, 30*time.Second, "the echo server to start", func() bool {
		return len(testutil.Descendants(cmd.Process.Pid)) > 0
	})
	desc := testutil.Descendants(cmd.Process.Pid)

	terminate(t, cmd, desc, stderr.String)
}

// terminate sends SIGTERM to a running mcpvisor and checks that it exits 0
// within 30s and that none of desc (its descendants) outlives it. stderr
// says what mcpvisor wrote, for the failure message.
func terminate(t *testing.T, cmd *exec.Cmd, desc []int, stderr func() string) {
	t.Helper()
	cmd.Process.Signal(syscall.SIGTERM)
	errc := make(chan error, 1)
	go func() { errc <- cmd.Wait() }()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("mcpvisor exited with %v after SIGTERM\n%s", err, stderr())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("mcpvisor did not exit within 30s of SIGTERM\n%s", stderr())
	}
	for _, pid := range desc {
		if testutil.Alive(pid) {
			t.Errorf("process %d outlived mcpvisor", pid)
		}
	}
}

// statusOf returns the named server's status.
func statusOf(t *testing.T, h *host.Host, name string) host.ServerStatus {
	t.Helper()
	for _, st := range h.Status() {
		if st.Name == name {
			return st
		}
	}
	t.Fatalf("no server %q", name)
	return host.ServerStatus{}
}

// A legacy SSE upstream becomes ready and answers calls, its session
// outlives the connect handshake, and after the server restarts on the
// same address the supervisor reconnects and calls succeed again.
func TestSSEUpstreamServesAndReconnects(t *testing.T) {
	up := testutil.StartServer(t, bins["echo"], "-sse", "127.0.0.1:0")
	addr := strings.TrimSuffix(strings.TrimPrefix(up.URL, "http://"), "/sse")
	src := fmt.Sprintf(`server "echo" {
  url       = %q
  transport = "sse"
}
`, up.URL)
	h, cs := startHost(t, src, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	call := func(text string) error {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__echo", Arguments: map[string]any{"text": text}})
		if err == nil && textOf(t, res.Content[0]) != text {
			err = fmt.Errorf("answer %q", textOf(t, res.Content[0]))
		}
		return err
	}
	if err := call("first"); err != nil {
		t.Fatal(err)
	}
	// Past the connect handshake's own lifetime, the stream still serves.
	time.Sleep(200 * time.Millisecond)
	if err := call("second"); err != nil {
		t.Fatal(err)
	}
	gen := statusOf(t, h, "echo").Generation

	syscall.Kill(-up.Cmd.Process.Pid, syscall.SIGKILL)
	up.Cmd.Wait()
	testutil.StartServer(t, bins["echo"], "-sse", addr)
	testutil.Eventually(t, 30*time.Second, "a new session with the restarted server", func() bool {
		st := statusOf(t, h, "echo")
		return st.State == "ready" && st.Generation > gen
	})
	if err := call("after restart"); err != nil {
		t.Fatal(err)
	}
}

// SIGTERM to `mcpvisor run` with idle HTTP clients connected (a
// session-based client holds its GET stream open) exits 0 within 2 s: the
// streams are ended at once instead of holding the shutdown for its grace.
func TestRunSIGTERMWithIdleHTTPClients(t *testing.T) {
	addr := freePort(t)
	cfgPath := filepath.Join(t.TempDir(), "config.hcl")
	// The default drain period: nothing asks /readyz here, so no load
	// balancer is watching and it is not waited (TestRunSIGTERMDrains
	// covers the case where one is).
	src := fmt.Sprintf("host {\n  listen = %q\n}\nserver \"echo\" {\n  command = %q\n}\n", addr, bins["echo"])
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
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	testutil.Eventually(t, 60*time.Second, "mcpvisor serving", func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "idle"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__echo", Arguments: map[string]any{"text": "x"}}); err != nil {
			t.Fatal(err)
		}
	}
	desc := testutil.Descendants(cmd.Process.Pid)

	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	errc := make(chan error, 1)
	go func() { errc <- cmd.Wait() }()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("mcpvisor exited with %v after SIGTERM\n%s", err, stderr.String())
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("SIGTERM to exit took %s, want at most 2s\n%s", took.Round(time.Millisecond), stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("mcpvisor did not exit within 30s of SIGTERM\n%s", stderr.String())
	}
	for _, pid := range desc {
		if testutil.Alive(pid) {
			t.Errorf("process %d outlived mcpvisor", pid)
		}
	}
}

// A parked server comes back by use: a client that still has the old tool
// list calls one of its tools. Before the breaker's cooldown the call says
// the server is parked and when it will be tried; after it, the call is the
// half-open probe: the server starts, the call goes through, and the tools
// return (the client is told). A tools/list after the cooldown also nudges
// a parked server to start, without waiting for it.
func TestParkedServerRevivedByUse(t *testing.T) {
	src := fmt.Sprintf(`server "echo" {
  command = %q
  reconnect {
    max_retries  = 0
    parked_retry = "1h"
  }
  breaker {
    cooldown = "500ms"
  }
}
`, bins["echo"])
	changed := make(chan struct{}, 16)
	h, cs := startHost(t, src, &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	park := func() {
		t.Helper()
		syscall.Kill(statusOf(t, h, "echo").Pid, syscall.SIGKILL)
		testutil.Eventually(t, 30*time.Second, "the server to park", func() bool {
			return statusOf(t, h, "echo").State == "parked"
		})
		testutil.Eventually(t, 30*time.Second, "its tools to be withdrawn", func() bool {
			return !slices.Contains(toolNames(t, cs), "echo__echo")
		})
	}
	park()

	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__echo", Arguments: map[string]any{"text": "too early"}})
	if err == nil || !strings.Contains(err.Error(), "parked") || !strings.Contains(err.Error(), "next attempt") {
		t.Fatalf("call before the cooldown: %v, want an error saying the server is parked and when it is tried next", err)
	}
	time.Sleep(600 * time.Millisecond) // past the cooldown
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__echo", Arguments: map[string]any{"text": "revived"}})
	if err != nil || textOf(t, res.Content[0]) != "revived" {
		t.Fatalf("call after the cooldown: %v, want it to revive the server and go through", err)
	}
	testutil.Eventually(t, 30*time.Second, "the tools to return", func() bool {
		return slices.Contains(toolNames(t, cs), "echo__echo")
	})

	park()
	time.Sleep(600 * time.Millisecond)
	toolNames(t, cs) // a tools/list nudges the parked server
	testutil.Eventually(t, 30*time.Second, "the server revived by a tools/list", func() bool {
		return statusOf(t, h, "echo").State == "ready"
	})
}

// A reload that changes a server's block starts the new process and lets
// it get ready before the old one stops: calls made all through the reload
// never fail, never meet "unknown tool", and end up on the new process.
func TestReloadOfChangedServerDropsNoCall(t *testing.T) {
	block := func(v string) string {
		return fmt.Sprintf("server \"echo\" {\n  command = %q\n  env = { RELOAD_VERSION = %q }\n}\n", bins["echo"], v)
	}
	h, cs := startHost(t, block("1"), nil)
	oldPid := statusOf(t, h, "echo").Pid

	ctx, cancel := context.WithCancel(context.Background())
	var calls, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo__echo", Arguments: map[string]any{"text": "x"}})
				calls.Add(1)
				if err != nil || res.IsError {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprint(err, res))
				}
			}
		})
	}
	time.Sleep(100 * time.Millisecond)
	cfg, err := config.Parse([]byte(block("2")), filepath.Join(t.TempDir(), "config.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	res, err := h.Reload(rctx, cfg)
	rcancel()
	if err != nil || !slices.Equal(res.Restarted, []string{"echo"}) {
		t.Fatalf("reload: %+v, %v", res, err)
	}
	time.Sleep(100 * time.Millisecond)
	cancel()
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d calls failed during the reload; first: %v", n, calls.Load(), firstErr.Load())
	}
	if st := statusOf(t, h, "echo"); st.Pid == oldPid || st.State != "ready" {
		t.Errorf("after the reload: pid %d (old %d), state %s; want a new ready process", st.Pid, oldPid, st.State)
	}
	if testutil.Alive(oldPid) {
		t.Error("the old process still runs after the reload")
	}
}

// A stdio server runs in the config file's directory, so a relative path
// inside it means what it means in command: `sh -c "exec ./echo-here"`
// finds the binary next to the config file, wherever mcpvisor runs.
func TestStdioServerRunsInConfigDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink(bins["echo"], filepath.Join(dir, "echo-here")); err != nil {
		t.Fatal(err)
	}
	src := "server \"echo\" {\n  command = \"sh\"\n  args    = [\"-c\", \"exec ./echo-here\"]\n}\n"
	cfg, err := config.Parse([]byte(src), filepath.Join(dir, "config.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(cfg, host.WithLogger(logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h.Start(ctx)
	defer h.Close(context.Background())
	h.WaitSettled(ctx)
	if st := statusOf(t, h, "echo"); st.State != "ready" {
		t.Fatalf("server is %s: %s", st.State, st.LastError)
	}
	if _, err := h.CallTool(ctx, "echo__echo", map[string]any{"text": "here"}); err != nil {
		t.Fatal(err)
	}
}

// The CLI reaches every running host of a config: two `run --stdio`
// instances (which bind no TCP port, so they coexist with each other and
// with `run`) and one `run`, through their control sockets. `status`
// shows all three, `call` uses a running host instead of starting the
// servers again, `status -addr` needs no config file, and `revive` brings
// a parked server back while a client is connected: its tools return and
// the client is told.
func TestCLIReachesEveryRunningInstance(t *testing.T) {
	dir := t.TempDir()
	env := append(os.Environ(), "XDG_RUNTIME_DIR="+t.TempDir())
	addr := freePort(t)
	cfgPath := filepath.Join(dir, "config.hcl")
	src := fmt.Sprintf("host {\n  listen = %q\n}\nserver \"echo\" {\n  command = %q\n  reconnect {\n    max_retries = 0\n  }\n}\n", addr, bins["echo"])
	if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func(args ...string) *exec.Cmd {
		t.Helper()
		cmd := exec.Command(bins["mcpvisor"], append(args, "-config", cfgPath)...)
		cmd.Env = env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if slices.Contains(args, "--stdio") {
			in, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { in.Close() })
		}
		var stderr testutil.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-done
			}
		})
		return cmd
	}
	cli := func(args ...string) (string, string, error) {
		t.Helper()
		cmd := exec.Command(bins["mcpvisor"], args...)
		cmd.Env = env
		cmd.Dir = dir
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}

	start("run", "--stdio")
	start("run", "--stdio")
	httpHost := start("run")
	testutil.Eventually(t, 60*time.Second, "three instances, each with echo ready", func() bool {
		out, _, err := cli("status", "-config", cfgPath)
		return err == nil && strings.Count(out, " ready ") == 3 && strings.Count(out, "mcpvisor pid ") == 3
	})

	out, errs, err := cli("call", "echo__echo", `{"text":"through a running host"}`, "-config", cfgPath)
	if err != nil || !strings.Contains(out, "through a running host") || !strings.Contains(errs, "using the running host") {
		t.Fatalf("call with flags after the arguments: %v\n%s\n%s", err, out, errs)
	}

	// status -addr from a directory without a config file.
	if out, errs, err := cli("status", "-addr", addr, "-config", filepath.Join(t.TempDir(), "none.hcl")); err == nil || !strings.Contains(errs, "none.hcl") {
		t.Errorf("status with a missing explicit -config: %v\n%s%s", err, out, errs)
	}
	nodir := t.TempDir()
	cmd := exec.Command(bins["mcpvisor"], "status", "-addr", addr)
	cmd.Env, cmd.Dir = env, nodir
	if b, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(b), " ready ") {
		t.Errorf("status -addr without a config file: %v\n%s", err, b)
	}

	// A client on the HTTP instance; its echo server parks.
	changed := make(chan struct{}, 16)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "watcher"}, &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	// Its echo is its child: /status shows no pid to an anonymous caller,
	// who is no operator (docs/security.md, "The operator's door").
	// Its children are echo and the group's reaper (a shell that kills
	// the group when mcpvisor dies); the one to kill is echo.
	echoPid := 0
	for _, pid := range testutil.Descendants(httpHost.Process.Pid) {
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && exe == bins["echo"] {
			echoPid = pid
		}
	}
	if echoPid == 0 {
		t.Fatal("the HTTP instance runs no echo server")
	}
	syscall.Kill(echoPid, syscall.SIGKILL)
	testutil.Eventually(t, 30*time.Second, "the HTTP instance's echo to park", func() bool {
		return httpStatus(t, addr).Servers[0].State == "parked"
	})
	for len(changed) > 0 {
		<-changed
	}
	// Through the control sockets: over TCP a host without auth has no
	// operator (docs/security.md, "The operator's door").
	out, errs, err = cli("revive", "echo", "-config", cfgPath)
	if err != nil || !strings.Contains(out, "revived: ready") {
		t.Fatalf("revive: %v\n%s%s", err, out, errs)
	}
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("the connected client was not told the tools changed")
	}
	if names := toolNames(t, cs); !slices.Contains(names, "echo__echo") {
		t.Errorf("tools after revive: %v", names)
	}

	out, errs, err = cli("restart", "echo", "-config", cfgPath)
	if err != nil || strings.Count(out, "restarted: ready") != 3 {
		t.Errorf("restart on every instance: %v\n%s%s", err, out, errs)
	}
}

// httpStatus reads /status from a host listening at addr.
func httpStatus(t *testing.T, addr string) host.StatusReport {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc host.StatusReport
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// An error mcpvisor itself gives a client (not the upstream's own) is a
// JSON-RPC error with code -32010 and its kind in data: "crashed" for a
// call the server died during, "parked" for a parked server's tool.
func TestCallErrorsCarryTheirKind(t *testing.T) {
	src := fmt.Sprintf("server \"echo\" {\n  command = %q\n  reconnect {\n    max_retries = 0\n  }\n}\n", bins["echo"])
	h, cs := startHost(t, src, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kind := func(err error) (int64, string) {
		t.Helper()
		var wire *jsonrpc.Error
		if !errors.As(err, &wire) {
			t.Fatalf("error %v is not a JSON-RPC error", err)
		}
		var data struct{ Kind, Server string }
		json.Unmarshal(wire.Data, &data)
		return wire.Code, data.Kind
	}
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__crash"})
	if code, k := kind(err); code != -32010 || k != "crashed" {
		t.Errorf("crash: code %d kind %q, want -32010 crashed", code, k)
	}
	testutil.Eventually(t, 30*time.Second, "the respawned server", func() bool {
		st := statusOf(t, h, "echo")
		return st.State == "ready" && st.Generation >= 2
	})
	syscall.Kill(statusOf(t, h, "echo").Pid, syscall.SIGKILL)
	testutil.Eventually(t, 30*time.Second, "the server to park", func() bool { return statusOf(t, h, "echo").State == "parked" })
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__echo", Arguments: map[string]any{"text": "x"}})
	if code, k := kind(err); code != -32010 || k != "parked" {
		t.Errorf("parked: code %d kind %q, want -32010 parked (%v)", code, k, err)
	}
}

// `status -watch` redraws the table until interrupted, then exits 0.
func TestStatusWatchRedrawsUntilInterrupted(t *testing.T) {
	addr := freePort(t)
	cfgPath := filepath.Join(t.TempDir(), "config.hcl")
	src := fmt.Sprintf("host {\n  listen = %q\n}\nserver \"echo\" {\n  command = %q\n}\n", addr, bins["echo"])
	if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "XDG_RUNTIME_DIR="+t.TempDir())
	run := exec.Command(bins["mcpvisor"], "run", "-config", cfgPath)
	run.Env = env
	run.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		run.Process.Signal(syscall.SIGTERM)
		run.Wait()
	}()
	testutil.Eventually(t, 60*time.Second, "echo ready", func() bool {
		resp, err := http.Get("http://" + addr + "/status")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), `"state": "ready"`)
	})

	watch := exec.Command(bins["mcpvisor"], "status", "-watch", "-interval", "100ms", "-config", cfgPath)
	watch.Env = env
	var out testutil.Buffer
	watch.Stdout = &out
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "three redraws", func() bool {
		return strings.Count(out.String(), "SERVER") >= 3
	})
	watch.Process.Signal(os.Interrupt)
	if err := watch.Wait(); err != nil {
		t.Fatalf("status -watch after SIGINT: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "echo") || !strings.Contains(out.String(), "ready") {
		t.Errorf("the table lacks the server:\n%s", out.String())
	}
}
