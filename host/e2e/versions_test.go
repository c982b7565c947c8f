//go:build unix

package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// protocolVersions are the versions a downstream client may speak.
var protocolVersions = []string{"2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"}

// startEverythingHTTP starts npm's server-everything in mode
// ("streamableHttp" or "sse") on a free loopback port and returns its
// address.
func startEverythingHTTP(t *testing.T, tl e2eTools, mode string) string {
	t.Helper()
	env := newTestEnv(t)
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(tl.Node22, tl.Everything, mode)
	cmd.Env = []string{"PORT=" + port}
	path := "/mcp"
	if mode == "sse" {
		path = "/sse"
	}
	startServer(t, "server-everything "+mode, false, env, cmd, "http://"+addr+path)
	return addr
}

// TestVersionBridging: clients on every protocol version call npm's
// server-everything through mcpvisor, over each of the server's
// transports, and get what the same client gets directly from a
// server-everything on its streamable HTTP endpoint. Each upstream session
// speaks the version mcpvisor negotiated with it, whatever the client
// speaks; a client's own per-request fields of 2026-07-28 never reach an
// upstream on an older version (where they made it refuse every request).
func TestVersionBridging(t *testing.T) {
	t.Parallel()
	tl := requireTools(t)
	directAddr := startEverythingHTTP(t, tl, "streamableHttp")

	upstreams := map[string]string{
		"stdio":           fmt.Sprintf("command = %s\n  args = [%s, \"stdio\"]", hclString(tl.Node22), hclString(tl.Everything)),
		"streamable-http": fmt.Sprintf("url = %s", hclString("http://"+startEverythingHTTP(t, tl, "streamableHttp")+"/mcp")),
		"sse":             fmt.Sprintf("url = %s\n  transport = \"sse\"", hclString("http://"+startEverythingHTTP(t, tl, "sse")+"/sse")),
	}
	for _, kind := range []string{"stdio", "streamable-http", "sse"} {
		t.Run(kind, func(t *testing.T) {
			// Each mcpvisor runs under an environment of its own: its
			// leak check must only see what it started.
			env := newTestEnv(t)
			listen := freeAddr(t)
			cfg := writeConfig(t, fmt.Sprintf("host { listen = %s }\n\nserver \"everything\" {\n  %s\n}\n", hclString(listen), upstreams[kind]))
			h := startHost(t, tl, env, cfg, listen)
			for _, version := range protocolVersions {
				t.Run(version, func(t *testing.T) {
					direct := connectAt(t, "http://"+directAddr+"/mcp", version)
					via := connectAt(t, h.URL, version)
					compareOperations(t, direct, via)
				})
			}
		})
	}
}

// connectAt connects a go-sdk client speaking version to a streamable HTTP
// endpoint.
func connectAt(t *testing.T, url, version string) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-versions", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connecting at %s (%s): %v", url, version, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// compareOperations makes the same requests on direct (server-everything
// itself) and via (mcpvisor in front of one), the names on via prefixed,
// and fails on any difference in what comes back.
func compareOperations(t *testing.T, direct, via *mcp.ClientSession) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const prefix = "everything__"

	waitForTool(t, ctx, via, prefix+"echo")
	call := func(cs *mcp.ClientSession, name string, args map[string]any) string {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			return "error: " + err.Error()
		}
		return jsonOf(t, res.Content)
	}
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"echo", map[string]any{"message": "bridged"}},
		{"get-sum", map[string]any{"a": 2, "b": 3}},
	} {
		if d, v := call(direct, tc.tool, tc.args), call(via, prefix+tc.tool, tc.args); d != v {
			t.Errorf("tools/call %s: direct %s, through mcpvisor %s", tc.tool, d, v)
		}
	}

	prompts, err := direct.ListPrompts(ctx, nil)
	if err != nil {
		t.Fatalf("direct prompts/list: %v", err)
	}
	for _, p := range prompts.Prompts {
		if len(p.Arguments) > 0 {
			continue
		}
		d, derr := direct.GetPrompt(ctx, &mcp.GetPromptParams{Name: p.Name})
		v, verr := via.GetPrompt(ctx, &mcp.GetPromptParams{Name: prefix + p.Name})
		if (derr == nil) != (verr == nil) {
			t.Errorf("prompts/get %s: direct error %v, through mcpvisor %v", p.Name, derr, verr)
			continue
		}
		if derr == nil {
			if diff := cmp.Diff(jsonOf(t, d.Messages), jsonOf(t, v.Messages)); diff != "" {
				t.Errorf("prompts/get %s: messages differ (-direct +mcpvisor):\n%s", p.Name, diff)
			}
		}
		break
	}

	resources, err := direct.ListResources(ctx, nil)
	if err != nil {
		t.Fatalf("direct resources/list: %v", err)
	}
	if len(resources.Resources) > 0 {
		uri := resources.Resources[0].URI
		d, derr := direct.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		v, verr := via.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		switch {
		case (derr == nil) != (verr == nil):
			t.Errorf("resources/read %s: direct error %v, through mcpvisor %v", uri, derr, verr)
		case derr == nil:
			if diff := cmp.Diff(jsonOf(t, d.Contents), jsonOf(t, v.Contents)); diff != "" {
				t.Errorf("resources/read %s: contents differ (-direct +mcpvisor):\n%s", uri, diff)
			}
		}
	}
}

func waitForTool(t *testing.T, ctx context.Context, cs *mcp.ClientSession, name string) {
	t.Helper()
	for {
		res, err := cs.ListTools(ctx, nil)
		if err == nil {
			for _, tool := range res.Tools {
				if tool.Name == name {
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never listed (last error %v)", name, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestRootsReachEverything: npm's server-everything asks for the client's
// roots once, right after its own initialize, caches them, and asks again
// only when told they changed. Through mcpvisor its session outlives any
// one client, so mcpvisor tells its upstreams whenever a client with roots
// connects or changes its roots, and answers their roots/list with that
// client's roots: the server's log says it received them, and its
// get-roots-list reports them.
func TestRootsReachEverything(t *testing.T) {
	t.Parallel()
	tl := requireTools(t)
	env := newTestEnv(t)
	listen := freeAddr(t)
	cfg := writeConfig(t, fmt.Sprintf("host { listen = %s }\n\nserver \"everything\" {\n  command = %s\n  args = [%s, \"stdio\"]\n}\n",
		hclString(listen), hclString(tl.Node22), hclString(tl.Everything)))
	h := startHost(t, tl, env, cfg, listen)

	logs := make(chan string, 100)
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e-roots", Version: "1"}, &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			select {
			case logs <- fmt.Sprint(req.Params.Data):
			default:
			}
		},
	})
	c.AddRoots(&mcp.Root{URI: "file:///work/first", Name: "first"})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.URL, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	waitForTool(t, ctx, cs, "everything__get-roots-list")
	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}

	// The client's roots change: the server must hear of it and ask again,
	// with no call of the client in flight.
	c.AddRoots(&mcp.Root{URI: "file:///work/second", Name: "second"})
	for want := "Roots updated: 2 root(s) received from client"; ; {
		select {
		case l := <-logs:
			if l == want {
				goto asked
			}
		case <-ctx.Done():
			t.Fatalf("server-everything never logged %q: it was not told the roots changed, or was not answered with the client's", want)
		}
	}
asked:
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "everything__get-roots-list"})
	if err != nil {
		t.Fatal(err)
	}
	if got := jsonOf(t, res.Content); !strings.Contains(got, "file:///work/first") || !strings.Contains(got, "file:///work/second") {
		t.Errorf("get-roots-list through mcpvisor does not report both roots:\n%s", got)
	}
}

// Regression (#24, item 6): mcpvisor asked an HTTP client for its roots
// right after initialize, on the client's GET stream, which it had not
// opened yet ("stream not connected"), and never asked again: npm's
// server-everything, which asks once and caches the answer, reported "no
// roots" through mcpvisor over HTTP. This client never opens a GET stream
// (it is optional) and never changes its roots; its roots must still reach
// the server.
func TestRootsOfHTTPClientWithoutStream(t *testing.T) {
	t.Parallel()
	tl := requireTools(t)
	env := newTestEnv(t)
	listen := freeAddr(t)
	cfg := writeConfig(t, fmt.Sprintf("host {\n  listen = %s\n  log_level = \"debug\"\n}\n\nserver \"everything\" {\n  command = %s\n  args = [%s, \"stdio\"]\n}\n",
		hclString(listen), hclString(tl.Node22), hclString(tl.Everything)))
	h := startHost(t, tl, env, cfg, listen)

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	// A first client makes sure the server has asked for roots (and cached
	// the answer) before the client under test connects: it asks once,
	// 350 ms after its initialize or at the first get-roots-list.
	first, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-roots-first", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: h.URL, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	waitForTool(t, ctx, first, "everything__get-roots-list")
	if _, err := first.CallTool(ctx, &mcp.CallToolParams{Name: "everything__get-roots-list"}); err != nil {
		t.Fatal(err)
	}

	const root = "file:///work/no-stream"
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e-roots-no-stream", Version: "1"}, nil)
	c.AddRoots(&mcp.Root{URI: root, Name: "no-stream"})
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.URL, MaxRetries: -1, DisableStandaloneSSE: true},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	waitForTool(t, ctx, cs, "everything__get-roots-list")
	// The server hears of the roots a moment after mcpvisor learns them
	// (notifications/roots/list_changed, then its own roots/list).
	for {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "everything__get-roots-list"})
		if err != nil {
			t.Fatal(err)
		}
		got := jsonOf(t, res.Content)
		if strings.Contains(got, root) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("get-roots-list through mcpvisor never reported the HTTP client's root %s; last:\n%s", root, got)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
