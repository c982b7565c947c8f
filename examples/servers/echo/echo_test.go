//go:build unix

package main_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/examples/servers/internal/servetest"
)

var echoBin string

func TestMain(m *testing.M) {
	os.Exit(servetest.Main(m, "echo", &echoBin))
}

// Protocol versions a client may speak: the newest (sessionless requests)
// and the newest with an initialize handshake.
var protocols = []string{"2026-07-28", "2025-11-25"}

func newClient(opts *mcp.ClientOptions) *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "echo-test", Version: "0"}, opts)
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func call(t *testing.T, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return res
}

// wire returns v as its JSON wire form decoded into generic values, so that
// results compare as a proxy would forward them. Fields the SDK adds for the
// protocol version in use rather than for the tool (resultType, and _meta
// keys under io.modelcontextprotocol/) are removed.
func wire(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if m, ok := out.(map[string]any); ok {
		delete(m, "resultType")
		if meta, ok := m["_meta"].(map[string]any); ok {
			for k := range meta {
				if strings.HasPrefix(k, "io.modelcontextprotocol/") {
					delete(meta, k)
				}
			}
			if len(meta) == 0 {
				delete(m, "_meta")
			}
		}
	}
	return out
}

func textResult(text string) map[string]any {
	return map[string]any{"content": []any{map[string]any{"type": "text", "text": text}}}
}

func TestListTools(t *testing.T) {
	cs, _ := servetest.ConnectStdio(t, newClient(nil), nil, echoBin)
	res, err := cs.ListTools(callCtx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	tools := make(map[string]*mcp.Tool)
	var names []string
	for _, tool := range res.Tools {
		tools[tool.Name] = tool
		names = append(names, tool.Name)
	}
	want := []string{"add", "crash", "echo", "fail", "hang", "image", "jsonrpc_error", "meta", "pid", "progress", "roots", "sleep"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Fatalf("tools (-want +got):\n%s", diff)
	}
	for name, readOnly := range map[string]bool{"echo": true, "add": true, "pid": true, "crash": false, "sleep": false} {
		if a := tools[name].Annotations; a == nil || a.ReadOnlyHint != readOnly {
			t.Errorf("%s: annotations %+v, want readOnlyHint %v", name, a, readOnly)
		}
	}

	wantEchoInput := map[string]any{
		"type":                 "object",
		"properties":           map[string]any{"text": map[string]any{"type": "string", "description": "the text to return"}},
		"required":             []any{"text"},
		"additionalProperties": false,
	}
	if diff := cmp.Diff(wantEchoInput, wire(t, tools["echo"].InputSchema)); diff != "" {
		t.Errorf("echo input schema (-want +got):\n%s", diff)
	}
	wantAddOutput := map[string]any{
		"type":                 "object",
		"properties":           map[string]any{"sum": map[string]any{"type": "number", "description": "a + b"}},
		"required":             []any{"sum"},
		"additionalProperties": false,
	}
	if diff := cmp.Diff(wantAddOutput, wire(t, tools["add"].OutputSchema)); diff != "" {
		t.Errorf("add output schema (-want +got):\n%s", diff)
	}
}

func TestTools(t *testing.T) {
	for _, version := range protocols {
		t.Run(version, func(t *testing.T) {
			cs, cmd := servetest.ConnectStdio(t, newClient(nil), &mcp.ClientSessionOptions{ProtocolVersion: version}, echoBin)
			if got := cs.InitializeResult().ProtocolVersion; got != version {
				t.Fatalf("negotiated protocol %s, want %s", got, version)
			}

			tests := []struct {
				name string
				args any
				want any
			}{
				{"echo", map[string]any{"text": "hello, world"}, textResult("hello, world")},
				{"add", map[string]any{"a": 2, "b": 3.5}, map[string]any{
					"content":           []any{map[string]any{"type": "text", "text": `{"sum":5.5}`}},
					"structuredContent": map[string]any{"sum": 5.5},
				}},
				{"fail", map[string]any{"message": "it went wrong"}, map[string]any{
					"content": []any{map[string]any{"type": "text", "text": "it went wrong"}},
					"isError": true,
				}},
				{"sleep", map[string]any{"ms": 10}, textResult("slept 10ms")},
				{"pid", nil, textResult(strconv.Itoa(cmd.Process.Pid))},
				{"progress", map[string]any{"steps": 2}, textResult("done 2 steps")},
				{"echo", map[string]any{}, map[string]any{
					"content": []any{map[string]any{"type": "text", "text": `validating "arguments": validating root: required: missing properties: ["text"]`}},
					"isError": true,
				}},
			}
			for _, tt := range tests {
				got := wire(t, call(t, cs, tt.name, tt.args))
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("%s %v (-want +got):\n%s", tt.name, tt.args, diff)
				}
			}
		})
	}
}

func TestImage(t *testing.T) {
	cs, _ := servetest.ConnectStdio(t, newClient(nil), nil, echoBin)
	got := wire(t, call(t, cs, "image", nil))
	want := map[string]any{
		"_meta": map[string]any{"example.mcpvisor/result": "image"},
		"content": []any{
			map[string]any{
				"type":        "image",
				"mimeType":    "image/png",
				"data":        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==",
				"_meta":       map[string]any{"example.mcpvisor/content": "image"},
				"annotations": map[string]any{"audience": []any{"user"}, "priority": 0.5},
			},
			map[string]any{
				"type":     "audio",
				"mimeType": "audio/wav",
				"data":     "UklGRiwAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQgAAACAgICAgICAgA==",
				"_meta":    map[string]any{"example.mcpvisor/content": "audio"},
			},
			map[string]any{
				"type":        "resource_link",
				"uri":         "echo://resources/readme",
				"name":        "readme",
				"title":       "Read me",
				"description": "A link to a resource.",
				"mimeType":    "text/plain",
				"_meta":       map[string]any{"example.mcpvisor/content": "resource_link"},
			},
			map[string]any{
				"type": "resource",
				"resource": map[string]any{
					"uri":      "echo://resources/embedded",
					"mimeType": "text/plain",
					"text":     "embedded resource text",
				},
				"_meta": map[string]any{"example.mcpvisor/content": "resource"},
			},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("image result (-want +got):\n%s", diff)
	}
	// The data must really be a PNG, not just any base64.
	png, _ := base64.StdEncoding.DecodeString(want["content"].([]any)[0].(map[string]any)["data"].(string))
	if !strings.HasPrefix(string(png), "\x89PNG\r\n\x1a\n") {
		t.Errorf("image data is not a PNG: % x", png[:8])
	}
}

func TestJSONRPCError(t *testing.T) {
	for _, version := range protocols {
		t.Run(version, func(t *testing.T) {
			cs, _ := servetest.ConnectStdio(t, newClient(nil), &mcp.ClientSessionOptions{ProtocolVersion: version}, echoBin)
			_, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "jsonrpc_error"})
			var werr *jsonrpc.Error
			if !errors.As(err, &werr) {
				t.Fatalf("error %v (%T) does not wrap *jsonrpc.Error", err, err)
			}
			if werr.Code != -32042 || werr.Message != "custom failure" || string(werr.Data) != `{"detail":"requested by jsonrpc_error"}` {
				t.Errorf("got code %d message %q data %s", werr.Code, werr.Message, werr.Data)
			}
			// The session survives an application error.
			if got := wire(t, call(t, cs, "echo", map[string]any{"text": "still here"})); !cmp.Equal(got, wire(t, textResult("still here"))) {
				t.Errorf("echo after error: %v", got)
			}
		})
	}
}

func TestProgress(t *testing.T) {
	connect := map[string]func(t *testing.T, c *mcp.Client) *mcp.ClientSession{
		"stdio": func(t *testing.T, c *mcp.Client) *mcp.ClientSession {
			cs, _ := servetest.ConnectStdio(t, c, nil, echoBin)
			return cs
		},
		"http": func(t *testing.T, c *mcp.Client) *mcp.ClientSession {
			p := servetest.StartHTTP(t, echoBin, "-http", "127.0.0.1:0")
			cs, err := c.Connect(callCtx(t), &mcp.StreamableClientTransport{Endpoint: p.URL}, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cs.Close() })
			return cs
		},
	}
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			var (
				mu  sync.Mutex
				got []*mcp.ProgressNotificationParams
			)
			const steps = 3
			all := make(chan struct{})
			client := newClient(&mcp.ClientOptions{
				ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
					mu.Lock()
					defer mu.Unlock()
					got = append(got, req.Params)
					if len(got) == steps {
						close(all)
					}
				},
			})
			cs := connect[transport](t, client)
			params := &mcp.CallToolParams{Name: "progress", Arguments: map[string]any{"steps": steps, "interval_ms": 5}}
			params.SetProgressToken("tok-7")
			res, err := cs.CallTool(callCtx(t), params)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(textResult("done 3 steps"), wire(t, res)); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			select {
			case <-all:
			case <-time.After(10 * time.Second):
				t.Fatal("timed out waiting for progress notifications")
			}
			mu.Lock()
			defer mu.Unlock()
			var want []*mcp.ProgressNotificationParams
			for i := 1; i <= steps; i++ {
				want = append(want, &mcp.ProgressNotificationParams{
					ProgressToken: "tok-7", Progress: float64(i), Total: steps, Message: fmt.Sprintf("step %d of 3", i),
				})
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("progress notifications (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSleepCanceled(t *testing.T) {
	cs, _ := servetest.ConnectStdio(t, newClient(nil), nil, echoBin)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"ms": 60000}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("canceled sleep returned after %v", d)
	}
	// The server is still usable: the canceled sleep did not block it.
	call(t, cs, "echo", map[string]any{"text": "awake"})
}

func TestCrash(t *testing.T) {
	cs, cmd := servetest.ConnectStdio(t, newClient(nil), nil, echoBin)
	_, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "crash"})
	if err == nil {
		t.Fatal("crash call succeeded")
	}
	// The SDK reports a peer that vanished mid-call as EOF on the pipe.
	if !errors.Is(err, io.EOF) && !errors.Is(err, mcp.ErrConnectionClosed) {
		t.Errorf("crash call: got %v, want an error wrapping io.EOF or mcp.ErrConnectionClosed", err)
	}
	cs.Close() // waits for the process
	if cmd.ProcessState == nil {
		t.Fatal("process not waited for")
	}
	if code := cmd.ProcessState.ExitCode(); code != 3 {
		t.Errorf("exit code %d, want 3", code)
	}
}

func TestToolsSuffix(t *testing.T) {
	cs, _ := servetest.ConnectStdio(t, newClient(nil), nil, echoBin, "-tools-suffix", "_v2")
	res, err := cs.ListTools(callCtx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(res.Tools, func(tool *mcp.Tool) bool { return tool.Name == "extra_v2" }) {
		t.Fatalf("no tool extra_v2 among %d tools", len(res.Tools))
	}
	got := wire(t, call(t, cs, "extra_v2", map[string]any{"value": "x"}))
	if diff := cmp.Diff(textResult("extra_v2 x"), got); diff != "" {
		t.Errorf("extra_v2 (-want +got):\n%s", diff)
	}
}

func connectHTTP(t *testing.T, url string) *mcp.ClientSession {
	t.Helper()
	cs, err := newClient(nil).Connect(callCtx(t), &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func TestHTTP(t *testing.T) {
	p := servetest.StartHTTP(t, echoBin, "-http", "127.0.0.1:0")
	if !strings.HasPrefix(p.URL, "http://127.0.0.1:") || !strings.HasSuffix(p.URL, "/mcp") {
		t.Errorf("URL %q", p.URL)
	}
	if want := fmt.Sprintf("echo server starting pid=%d", p.Cmd.Process.Pid); p.Lines()[0] != want {
		t.Errorf("first stderr line %q, want %q", p.Lines()[0], want)
	}
	cs := connectHTTP(t, p.URL)
	if cs.ID() == "" {
		t.Error("stateful HTTP session has no session id")
	}
	if diff := cmp.Diff(textResult("over http"), wire(t, call(t, cs, "echo", map[string]any{"text": "over http"}))); diff != "" {
		t.Errorf("echo (-want +got):\n%s", diff)
	}
	if got := wire(t, call(t, cs, "pid", nil)); !cmp.Equal(got, wire(t, textResult(strconv.Itoa(p.Cmd.Process.Pid)))) {
		t.Errorf("pid: %v", got)
	}
	cs.Close()
	p.Stop(t)
}

func TestHTTPForgetSessionsSignal(t *testing.T) {
	p := servetest.StartHTTP(t, echoBin, "-http", "127.0.0.1:0", "-forget-sessions-signal")
	cs := connectHTTP(t, p.URL)
	call(t, cs, "echo", map[string]any{"text": "before"})

	p.Signal(t, syscall.SIGUSR1)
	if line := p.WaitLine(t, "forgot ", 10*time.Second); line != "forgot 1 sessions" {
		t.Errorf("stderr %q, want %q", line, "forgot 1 sessions")
	}
	_, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "after"}})
	if !errors.Is(err, mcp.ErrSessionMissing) {
		t.Fatalf("call after SIGUSR1: got %v, want an error wrapping mcp.ErrSessionMissing", err)
	}

	// A new session works, and the server is still the same process.
	cs2 := connectHTTP(t, p.URL)
	if cs2.ID() == cs.ID() {
		t.Errorf("new session reused id %s", cs.ID())
	}
	call(t, cs2, "echo", map[string]any{"text": "again"})
	p.Stop(t)
}

func TestHTTPSessionTTL(t *testing.T) {
	const ttl = 500 * time.Millisecond
	p := servetest.StartHTTP(t, echoBin, "-http", "127.0.0.1:0", "-session-ttl", ttl.String())
	cs := connectHTTP(t, p.URL)
	call(t, cs, "echo", map[string]any{"text": "fresh"})
	// A call in progress keeps the session alive past the TTL.
	call(t, cs, "sleep", map[string]any{"ms": 2 * ttl.Milliseconds()})

	time.Sleep(3 * ttl)
	_, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "stale"}})
	if !errors.Is(err, mcp.ErrSessionMissing) {
		t.Fatalf("call after idle TTL: got %v, want an error wrapping mcp.ErrSessionMissing", err)
	}
}

func TestHTTPStateless(t *testing.T) {
	p := servetest.StartHTTP(t, echoBin, "-http", "127.0.0.1:0", "-stateless", "-forget-sessions-signal")
	cs := connectHTTP(t, p.URL)
	if cs.ID() != "" {
		t.Errorf("stateless server gave session id %q", cs.ID())
	}
	call(t, cs, "echo", map[string]any{"text": "one"})
	// A client that starts with the initialize handshake works too.
	legacy, err := newClient(nil).Connect(callCtx(t), &mcp.StreamableClientTransport{Endpoint: p.URL}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("connect with 2025-11-25: %v", err)
	}
	defer legacy.Close()
	if diff := cmp.Diff(textResult("two"), wire(t, call(t, legacy, "echo", map[string]any{"text": "two"}))); diff != "" {
		t.Errorf("echo over 2025-11-25 (-want +got):\n%s", diff)
	}

	p.Signal(t, syscall.SIGUSR1)
	p.WaitLine(t, "forgot 0 sessions", 10*time.Second)
	if diff := cmp.Diff(wire(t, map[string]any{"content": []any{map[string]any{"type": "text", "text": `{"sum":3}`}}, "structuredContent": map[string]any{"sum": 3}}),
		wire(t, call(t, cs, "add", map[string]any{"a": 1, "b": 2}))); diff != "" {
		t.Errorf("add (-want +got):\n%s", diff)
	}
	p.Stop(t)
}

func TestSSE(t *testing.T) {
	p := servetest.StartHTTP(t, echoBin, "-sse", "127.0.0.1:0", "-forget-sessions-signal")
	if !strings.HasSuffix(p.URL, "/sse") {
		t.Errorf("URL %q", p.URL)
	}
	cs, err := newClient(nil).Connect(callCtx(t), &mcp.SSEClientTransport{Endpoint: p.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if diff := cmp.Diff(textResult("over sse"), wire(t, call(t, cs, "echo", map[string]any{"text": "over sse"}))); diff != "" {
		t.Errorf("echo (-want +got):\n%s", diff)
	}
	p.Signal(t, syscall.SIGUSR1)
	p.WaitLine(t, "forgot 1 sessions", 10*time.Second)
	if _, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "gone"}}); err == nil {
		t.Error("call on a forgotten SSE session succeeded")
	}
	p.Stop(t)
}

func TestHTTPCrash(t *testing.T) {
	p := servetest.StartHTTP(t, echoBin, "-http", "127.0.0.1:0")
	cs := connectHTTP(t, p.URL)
	if _, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "crash"}); err == nil {
		t.Fatal("crash call succeeded")
	}
	if code := servetest.ExitCode(p.Wait(t, 10*time.Second)); code != 3 {
		t.Errorf("exit code %d, want 3", code)
	}
	p.WaitLine(t, "crash requested; exiting with code 3", time.Second)
}

func TestBadUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-http", "127.0.0.1:0", "-sse", "127.0.0.1:0"},
		{"-stateless"},
		{"-session-ttl", "1s"},
		{"-forget-sessions-signal"},
		{"-tools-suffix", "bad name"},
		{"-no-such-flag"},
		{"extra-arg"},
	} {
		p := servetest.Start(t, echoBin, args...)
		if code := servetest.ExitCode(p.Wait(t, 10*time.Second)); code != 2 {
			t.Errorf("%q: exit code %d, want 2", args, code)
		}
	}
}
