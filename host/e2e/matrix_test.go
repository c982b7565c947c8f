//go:build unix

package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

/*
TestInteropMatrix: downstream clients on every protocol version × every
kind of upstream × every operation a proxy forwards. Each cell makes the
same request with the same client (same version, same handlers, same
roots) once directly to the upstream and once through mcpvisor, and
compares what came back. The table is printed; only a difference fails,
unless it is listed in matrixExpected with the reason it cannot be
otherwise.

Notifications are counted, not ordered, here: the go-sdk client hands them
to its handlers after the result, so a cell waits until the count stops
growing. That they reach the client before the result is checked on the
wire by host/hardening (TestProgressPrecedesResult,
TestLogsPrecedeResult) and by the conformance suite
(host/conformance).
*/

// matrixOps are the operations of the matrix, in the order printed.
var matrixOps = []string{
	"tools/call", "progress", "logging", "resources/read", "prompts/get", "completion",
	"sampling", "elicitation", "roots", "cancellation", "subscribe",
}

// toolCall is a tool and its arguments; the zero value means the family
// has no such tool.
type toolCall struct {
	name string
	args map[string]any
}

// family says how to exercise one upstream server program.
type family struct {
	echo, progress, logging, sampling, elicitation, roots, slow toolCall
	// completion: a prompt and one of its arguments to complete.
	completePrompt, completeArg string
	// subscribeURI is a resource that accepts resources/subscribe.
	subscribeURI string
}

// npmEverything is npm's @modelcontextprotocol/server-everything.
var npmEverything = family{
	echo:           toolCall{"echo", map[string]any{"message": "matrix"}},
	progress:       toolCall{"trigger-long-running-operation", map[string]any{"duration": 0.3, "steps": 3}},
	sampling:       toolCall{"trigger-sampling-request", map[string]any{"prompt": "matrix", "maxTokens": 10}},
	elicitation:    toolCall{"trigger-elicitation-request", map[string]any{}},
	roots:          toolCall{"get-roots-list", map[string]any{}},
	slow:           toolCall{"trigger-long-running-operation", map[string]any{"duration": 30, "steps": 30}},
	completePrompt: "completable-prompt",
	completeArg:    "department",
	// It has no tool that logs during the call: its log messages come
	// from a timer (toggle-simulated-logging), not from a request.
}

// goEverything is the everything example server (examples/servers/everything).
var goEverything = family{
	echo:           toolCall{"test_simple_text", map[string]any{}},
	progress:       toolCall{"test_tool_with_progress", map[string]any{}},
	logging:        toolCall{"test_tool_with_logging", map[string]any{}},
	sampling:       toolCall{"test_sampling", map[string]any{"prompt": "matrix"}},
	elicitation:    toolCall{"test_elicitation", map[string]any{"message": "matrix"}},
	roots:          toolCall{"list_roots", map[string]any{}},
	slow:           toolCall{"sleep", map[string]any{"ms": 30000}},
	completePrompt: "test_prompt_with_arguments",
	completeArg:    "arg1",
	subscribeURI:   "test://watched-resource",
}

// matrixExpected lists the cells (kind name/version/op) where through
// mcpvisor cannot equal directly, and why. A listed cell that turns out
// equal fails too, so the list cannot go stale.
var matrixExpected = map[string]string{
	"npm server-everything, stdio; client over mcpvisor's stdio/2026-07-28/roots": "server-everything asks for roots " +
		"once, right after its own initialize and outside any call, and caches them; a 2026-07-28 client cannot be " +
		"asked anything outside its own requests, so the upstream heard no roots (an empty list, never the host's). " +
		"Directly, the same client falls back to a 2025-11-25 session, which can be asked. (Over HTTP the cell " +
		"matches only because an earlier client with the same roots was connected to the same mcpvisor.)",
}

// matrixCell is one cell's outcome on both paths.
type matrixCell struct {
	direct, via string
}

// TestInteropMatrix: see the comment at the top of the file.
func TestInteropMatrix(t *testing.T) {
	t.Parallel()
	tl := requireTools(t)
	bin := filepath.Dir(tl.Mcpvisor)
	goServer := filepath.Join(bin, "everything")
	unixPlugin := filepath.Join(bin, "mcpvisor-transport-unix")
	for _, p := range []string{goServer, unixPlugin} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("missing %v (make build)", err)
		}
	}

	type kind struct {
		name  string
		fam   family
		block func(t *testing.T) (attrs string, direct func() mcp.Transport)
		// viaStdio: the client reaches mcpvisor over stdio (`mcpvisor run
		// --stdio`, where tools/call is forwarded as bytes), not HTTP.
		viaStdio bool
	}
	httpKind := func(name string, fam family, start func(t *testing.T) string, sse bool) kind {
		return kind{name: name, fam: fam, block: func(t *testing.T) (string, func() mcp.Transport) {
			url := start(t)
			attrs := fmt.Sprintf("url = %s", hclString(url))
			if sse {
				attrs += "\n  transport = \"sse\""
				return attrs, func() mcp.Transport { return &mcp.SSEClientTransport{Endpoint: url} }
			}
			return attrs, func() mcp.Transport { return &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1} }
		}}
	}
	stdioKind := func(name string, fam family, command string, args ...string) kind {
		return kind{name: name, fam: fam, block: func(t *testing.T) (string, func() mcp.Transport) {
			quoted := make([]string, len(args))
			for i, a := range args {
				quoted[i] = hclString(a)
			}
			attrs := fmt.Sprintf("command = %s\n  args = [%s]", hclString(command), strings.Join(quoted, ", "))
			return attrs, func() mcp.Transport { return &mcp.CommandTransport{Command: exec.Command(command, args...)} }
		}}
	}
	npmHTTP := func(mode, path string) func(t *testing.T) string {
		return func(t *testing.T) string { return "http://" + startEverythingHTTP(t, tl, mode) + path }
	}
	goHTTP := func(flag, path string) func(t *testing.T) string {
		return func(t *testing.T) string {
			addr := freeAddr(t)
			url := "http://" + addr + path
			startServer(t, "everything "+flag, false, newTestEnv(t), exec.Command(goServer, flag, addr), url)
			return url
		}
	}
	kinds := []kind{
		stdioKind("npm server-everything, stdio", npmEverything, tl.Node22, tl.Everything, "stdio"),
		httpKind("npm server-everything, streamable HTTP", npmEverything, npmHTTP("streamableHttp", "/mcp"), false),
		httpKind("npm server-everything, SSE", npmEverything, npmHTTP("sse", "/sse"), true),
		stdioKind("Go everything, stdio", goEverything, goServer),
		httpKind("Go everything, streamable HTTP", goEverything, goHTTP("-http", "/mcp"), false),
		httpKind("Go everything, SSE", goEverything, goHTTP("-sse", "/sse"), true),
		{name: "Go everything, unix plugin", fam: goEverything, block: func(t *testing.T) (string, func() mcp.Transport) {
			sock := startUnixServer(t, goServer)
			attrs := fmt.Sprintf("plugin \"unix\" {\n    command = %s\n    config = { socket = %s }\n  }", hclString(unixPlugin), hclString(sock))
			return attrs, func() mcp.Transport { return &unixTransport{path: sock} }
		}},
	}
	// The same two upstreams once more with the client on mcpvisor's stdio.
	for _, k := range []kind{kinds[0], kinds[3]} {
		k.name += "; client over mcpvisor's stdio"
		k.viaStdio = true
		kinds = append(kinds, k)
	}

	var mu sync.Mutex
	tables := map[string]string{}
	t.Cleanup(func() {
		var b strings.Builder
		for _, k := range kinds {
			if tab, ok := tables[k.name]; ok {
				b.WriteString(tab)
			}
		}
		t.Logf("interop matrix (ok: same answer directly and through mcpvisor; err: both failed the same way; "+
			"+: works through mcpvisor, fails directly; x: expected difference; ≠: difference; -: the server has no such feature)\n%s", b.String())
	})
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			attrs, direct := k.block(t)
			env := newTestEnv(t)
			listen := freeAddr(t)
			cfg := writeConfig(t, fmt.Sprintf("host { listen = %s }\n\nserver \"up\" {\n  %s\n}\n", hclString(listen), attrs))
			via := func() mcp.Transport {
				cmd := exec.Command(tl.Mcpvisor, "run", "--stdio", "-config", cfg)
				cmd.Env = env.environ()
				return &mcp.CommandTransport{Command: cmd}
			}
			if !k.viaStdio {
				h := startHost(t, tl, env, cfg, listen)
				via = func() mcp.Transport { return &mcp.StreamableClientTransport{Endpoint: h.URL, MaxRetries: -1} }
			}

			var tab strings.Builder
			fmt.Fprintf(&tab, "\n%s\n  %-15s", k.name, "")
			for _, v := range protocolVersions {
				fmt.Fprintf(&tab, " %-11s", v)
			}
			cells := map[string]map[string]matrixCell{}
			for _, version := range protocolVersions {
				d := newMatrixSession(t, direct(), version, "")
				v := newMatrixSession(t, via(), version, "up__")
				waitForTool(t, t.Context(), v.cs, "up__"+k.fam.echo.name)
				for _, op := range matrixOps {
					dc := d.run(t, op, k.fam)
					vc := v.run(t, op, k.fam)
					if op == "roots" && dc != vc && !strings.HasPrefix(dc, "error") {
						// A server that caches roots hears of a new client's
						// roots a moment after it connected (TestRootsReachEverything).
						vc = v.retryUntil(t, op, k.fam, dc, 10*time.Second)
					}
					if testing.Verbose() {
						t.Logf("%s, %s, %s:\n  directly:         %s\n  through mcpvisor: %s", k.name, version, op, dc, vc)
					}
					if cells[op] == nil {
						cells[op] = map[string]matrixCell{}
					}
					cells[op][version] = matrixCell{dc, vc}
				}
			}
			for _, op := range matrixOps {
				fmt.Fprintf(&tab, "\n  %-15s", op)
				for _, version := range protocolVersions {
					c := cells[op][version]
					key := k.name + "/" + version + "/" + op
					why, expected := matrixExpected[key]
					mark := "ok"
					switch {
					case c.direct == "n/a" && c.via == "n/a":
						mark = "-"
					case failed(c.direct) && failed(c.via):
						// Error texts differ between peers; failing is the
						// same outcome.
						mark = "err"
					case c.direct == c.via:
					case failed(c.direct):
						mark = "+"
					case expected:
						mark = "x"
					default:
						mark = "≠"
						t.Errorf("%s, client %s, %s:\n  directly:        %s\n  through mcpvisor: %s", k.name, version, op, c.direct, c.via)
					}
					if expected && mark != "x" {
						t.Errorf("%s, client %s, %s: listed as an expected difference (%s), but the cell is %q (directly %s, through mcpvisor %s); update matrixExpected",
							k.name, version, op, why, mark, c.direct, c.via)
					}
					fmt.Fprintf(&tab, " %-11s", mark)
				}
			}
			mu.Lock()
			tables[k.name] = tab.String()
			mu.Unlock()
		})
	}
}

// failed reports whether an outcome is a failure: a JSON-RPC error or a
// tool's error result.
func failed(outcome string) bool {
	return strings.HasPrefix(outcome, "error") || strings.HasPrefix(outcome, "tool error")
}

// matrixSession is one client session and what its handlers saw.
type matrixSession struct {
	cs      *mcp.ClientSession
	version string
	prefix  string // of names through mcpvisor

	mu       sync.Mutex
	progress map[string]int // notifications by progress token
	logs     int
	seq      int
}

// matrixRoot is the root every matrix client has.
const matrixRoot = "file:///matrix/root"

func newMatrixSession(t *testing.T, tr mcp.Transport, version, prefix string) *matrixSession {
	t.Helper()
	s := &matrixSession{version: version, prefix: prefix, progress: map[string]int{}}
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e-matrix", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			s.mu.Lock()
			s.progress[fmt.Sprint(req.Params.ProgressToken)]++
			s.mu.Unlock()
		},
		LoggingMessageHandler: func(context.Context, *mcp.LoggingMessageRequest) {
			s.mu.Lock()
			s.logs++
			s.mu.Unlock()
		},
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Role: "assistant", Model: "matrix-model",
				Content: &mcp.TextContent{Text: fmt.Sprintf("sampled %d messages", len(req.Params.Messages))}}, nil
		},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: fillSchema(req.Params.RequestedSchema)}, nil
		},
	})
	c.AddRoots(&mcp.Root{URI: matrixRoot, Name: "matrix"})
	// The test's context, not one that ends with Connect: the legacy SSE
	// client's event stream lives as long as that context.
	cs, err := c.Connect(t.Context(), tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connecting a %s client (%s): %v", version, prefix, err)
	}
	t.Cleanup(func() { cs.Close() })
	s.cs = cs
	return s
}

// fillSchema answers an elicitation form: a value of the right type for
// every property (its default, else its first enum value, else a fixed one).
func fillSchema(schema any) map[string]any {
	b, _ := json.Marshal(schema)
	var s struct {
		Properties map[string]struct {
			Type    string `json:"type"`
			Enum    []any  `json:"enum"`
			Default any    `json:"default"`
		} `json:"properties"`
	}
	json.Unmarshal(b, &s)
	out := map[string]any{}
	for name, p := range s.Properties {
		switch {
		case p.Default != nil:
			out[name] = p.Default
		case len(p.Enum) > 0:
			out[name] = p.Enum[0]
		case p.Type == "number" || p.Type == "integer":
			out[name] = 7
		case p.Type == "boolean":
			out[name] = true
		case strings.Contains(name, "mail"):
			out[name] = "ada@example.com"
		default:
			out[name] = "Ada"
		}
	}
	return out
}

// run performs op and describes the outcome: "n/a" if the family lacks the
// feature, "error" (any failure: messages differ between peers) or what came
// back.
func (s *matrixSession) run(t *testing.T, op string, fam family) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	switch op {
	case "tools/call":
		return s.call(ctx, fam.echo, nil)
	case "progress":
		if fam.progress.name == "" {
			return "n/a"
		}
		s.mu.Lock()
		s.seq++
		token := fmt.Sprintf("matrix-%d", s.seq)
		s.mu.Unlock()
		out := s.call(ctx, fam.progress, token)
		n := s.settle(func() int { return s.progress[token] })
		return fmt.Sprintf("%s; %d progress notifications", out, n)
	case "logging":
		if fam.logging.name == "" {
			return "n/a"
		}
		// From 2026-07-28 on a client asks for log messages per request
		// (_meta io.modelcontextprotocol/logLevel); logging/setLevel is of
		// the session-based versions, and a stateless server (mcpvisor
		// serves 2026-07-28 statelessly) refuses the go-sdk client's,
		// which lacks the per-request _meta. Only the earlier versions
		// must set the level.
		setLevel := "level set"
		if err := s.cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil && s.version < "2026-07-28" {
			setLevel = "level not set: " + err.Error()
		}
		s.mu.Lock()
		before := s.logs
		s.mu.Unlock()
		p := &mcp.CallToolParams{Name: s.prefix + fam.logging.name, Arguments: fam.logging.args,
			Meta: mcp.Meta{mcp.MetaKeyLogLevel: "debug"}}
		out := describeCall(s.cs.CallTool(ctx, p))
		n := s.settle(func() int { return s.logs }) - before
		return fmt.Sprintf("%s; %s; %d log messages", out, setLevel, n)
	case "resources/read":
		res, err := s.cs.ListResources(ctx, nil)
		if err != nil || len(res.Resources) == 0 {
			return fmt.Sprintf("error: resources/list: %v", err)
		}
		// The first resource whose URI does not depend on the session.
		for _, r := range res.Resources {
			if strings.Contains(r.URI, "session") {
				continue
			}
			rr, err := s.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: r.URI})
			if err != nil {
				return "error"
			}
			return r.URI + " " + compactJSON(t, rr.Contents)
		}
		return "n/a"
	case "prompts/get":
		res, err := s.cs.ListPrompts(ctx, nil)
		if err != nil {
			return "error: prompts/list"
		}
		for _, p := range res.Prompts {
			if len(p.Arguments) > 0 {
				continue
			}
			g, err := s.cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: p.Name})
			if err != nil {
				return "error"
			}
			return strings.TrimPrefix(p.Name, s.prefix) + " " + compactJSON(t, g.Messages)
		}
		return "n/a"
	case "completion":
		if fam.completePrompt == "" {
			return "n/a"
		}
		res, err := s.cs.Complete(ctx, &mcp.CompleteParams{
			Ref:      &mcp.CompleteReference{Type: "ref/prompt", Name: s.prefix + fam.completePrompt},
			Argument: mcp.CompleteParamsArgument{Name: fam.completeArg, Value: ""},
		})
		if err != nil {
			return "error"
		}
		return compactJSON(t, res.Completion)
	case "sampling":
		return s.call(ctx, fam.sampling, nil)
	case "elicitation":
		return s.call(ctx, fam.elicitation, nil)
	case "roots":
		return s.call(ctx, fam.roots, nil)
	case "cancellation":
		if fam.slow.name == "" {
			return "n/a"
		}
		cctx, ccancel := context.WithCancel(ctx)
		time.AfterFunc(300*time.Millisecond, ccancel)
		start := time.Now()
		_, err := s.cs.CallTool(cctx, &mcp.CallToolParams{Name: s.prefix + fam.slow.name, Arguments: fam.slow.args})
		ccancel()
		out := "completed"
		if err != nil {
			out = "error"
			if errors.Is(err, context.Canceled) && time.Since(start) < 20*time.Second {
				out = "cancelled"
			}
		}
		// The server must still answer.
		return out + "; then " + s.call(ctx, fam.echo, nil)
	case "subscribe":
		if fam.subscribeURI == "" {
			return "n/a"
		}
		out := "subscribed"
		if err := s.cs.Subscribe(ctx, &mcp.SubscribeParams{URI: fam.subscribeURI}); err != nil {
			out = "error"
		}
		if err := s.cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: fam.subscribeURI}); err != nil {
			return out + "; unsubscribe error"
		}
		return out + "; unsubscribed"
	}
	t.Fatalf("unknown matrix operation %q", op)
	return ""
}

// retryUntil repeats op until it yields want or d passes, and returns the
// last outcome.
func (s *matrixSession) retryUntil(t *testing.T, op string, fam family, want string, d time.Duration) string {
	deadline := time.Now().Add(d)
	for {
		got := s.run(t, op, fam)
		if got == want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// call calls tc (prefixed) with an optional progress token and describes
// the result.
func (s *matrixSession) call(ctx context.Context, tc toolCall, token any) string {
	if tc.name == "" {
		return "n/a"
	}
	p := &mcp.CallToolParams{Name: s.prefix + tc.name, Arguments: tc.args}
	if token != nil {
		p.SetProgressToken(token)
	}
	return describeCall(s.cs.CallTool(ctx, p))
}

// describeCall describes a tool call's outcome.
func describeCall(res *mcp.CallToolResult, err error) string {
	if err != nil {
		return "error"
	}
	b, _ := json.Marshal(res.Content)
	if res.IsError {
		return "tool error " + string(b)
	}
	return string(b)
}

// settle waits until count (read under s.mu) stops changing for a moment,
// at most 10 s, and returns it.
func (s *matrixSession) settle(count func() int) int {
	read := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return count()
	}
	last, stable := read(), time.Now()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		if n := read(); n != last {
			last, stable = n, time.Now()
		} else if time.Since(stable) > 400*time.Millisecond {
			break
		}
	}
	return last
}

func compactJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// startUnixServer starts bin serving on a Unix socket (-unix) and returns
// the socket's path once it accepts connections.
func startUnixServer(t *testing.T, bin string) string {
	t.Helper()
	// Socket paths are short (108 bytes); t.TempDir() may be too deep.
	dir, err := os.MkdirTemp("", "mcpvisor-matrix-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	cmd := exec.Command(bin, "-unix", sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = newTestEnv(t).environ()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	for deadline := time.Now().Add(readyTimeout); ; {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return sock
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s -unix %s: not accepting connections within %s", bin, sock, readyTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// unixTransport is a client transport over a Unix socket with stdio's
// framing, what the unix plugin speaks to the server.
type unixTransport struct{ path string }

func (u *unixTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", u.path)
	if err != nil {
		return nil, err
	}
	return (&mcp.IOTransport{Reader: c, Writer: c}).Connect(ctx)
}
