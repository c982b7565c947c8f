package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/gateway"
	"github.com/mcpvisor/mcpvisor/host/internal/registry"
	"github.com/mcpvisor/mcpvisor/host/internal/upstream"
	"github.com/mcpvisor/mcpvisor/host/internal/wire"
)

// TestMain fails the run when goroutines of the SDK or the gateway outlive
// the tests: every session, server and listener must be closed in cleanup.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := waitForLeaks(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines leaked:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

func waitForLeaks(timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "modelcontextprotocol/go-sdk") || strings.Contains(g, "mcpvisor/host/internal/gateway.") ||
				strings.Contains(g, "net/http.(*conn).serve") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testCtx returns a context that ends with the test (or after a hang guard).
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// upstreamRecord is what a test upstream saw, to check that the gateway
// rewrote names and routed to the right server.
type upstreamRecord struct {
	mu          sync.Mutex
	toolNames   []string
	promptNames []string
	completions []mcp.CompleteReference
	subscribed  []string
	subEvents   chan string // every subscribe ("uri") and unsubscribe ("-uri")
}

func (r *upstreamRecord) add(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}

var objectSchema = map[string]any{"type": "object"}

// newUpstream builds a real go-sdk server that offers every kind of tool
// result, a prompt, a resource, a template, completion and subscriptions.
func newUpstream(name string, rec *upstreamRecord) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, &mcp.ServerOptions{
		CompletionHandler: func(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			rec.add(func() { rec.completions = append(rec.completions, *req.Params.Ref) })
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{
				Values: []string{name + ":" + req.Params.Ref.Name + req.Params.Ref.URI + ":" + req.Params.Argument.Value},
			}}, nil
		},
		SubscribeHandler: func(_ context.Context, req *mcp.SubscribeRequest) error {
			rec.add(func() { rec.subscribed = append(rec.subscribed, req.Params.URI) })
			rec.subEvents <- req.Params.URI
			return nil
		},
		UnsubscribeHandler: func(_ context.Context, req *mcp.UnsubscribeRequest) error {
			rec.add(func() { rec.subscribed = append(rec.subscribed, "-"+req.Params.URI) })
			rec.subEvents <- "-" + req.Params.URI
			return nil
		},
	})
	size := int64(42)
	s.AddTool(&mcp.Tool{Name: "content", InputSchema: objectSchema}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		rec.add(func() { rec.toolNames = append(rec.toolNames, req.Params.Name) })
		return &mcp.CallToolResult{
			Meta: mcp.Meta{"trace": "abc", "n": float64(7)},
			Content: []mcp.Content{
				&mcp.TextContent{Text: "hello", Annotations: &mcp.Annotations{Audience: []mcp.Role{"user"}, Priority: 0.5}},
				&mcp.ImageContent{Data: []byte{0x89, 'P', 'N', 'G'}, MIMEType: "image/png"},
				&mcp.AudioContent{Data: []byte("RIFF"), MIMEType: "audio/wav"},
				&mcp.ResourceLink{URI: "mem://readme", Name: "readme", MIMEType: "text/plain", Size: &size},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "mem://blob", MIMEType: "application/octet-stream", Blob: []byte{0, 1, 2}}},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "mem://text", MIMEType: "text/plain", Text: "embedded"}},
			},
			StructuredContent: map[string]any{"answer": float64(42), "list": []any{"a", "b"}},
		}, nil
	})
	s.AddTool(&mcp.Tool{Name: "fail", InputSchema: objectSchema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "Tool failed: bad input"}}}, nil
	})
	s.AddTool(&mcp.Tool{Name: "rpcerr", InputSchema: objectSchema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, &jsonrpc.Error{Code: -32042, Message: "quota exceeded", Data: json.RawMessage(`{"retryAfter":30,"plan":"free"}`)}
	})
	s.AddTool(&mcp.Tool{Name: "echo args", InputSchema: objectSchema}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		rec.add(func() { rec.toolNames = append(rec.toolNames, req.Params.Name) })
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(req.Params.Arguments)}},
			Meta: req.Params.Meta}, nil
	})
	s.AddPrompt(&mcp.Prompt{Name: "greet", Arguments: []*mcp.PromptArgument{{Name: "who"}}},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			rec.add(func() { rec.promptNames = append(rec.promptNames, req.Params.Name) })
			return &mcp.GetPromptResult{Description: name, Messages: []*mcp.PromptMessage{
				{Role: "user", Content: &mcp.TextContent{Text: "hello " + req.Params.Arguments["who"]}},
			}}, nil
		})
	s.AddResource(&mcp.Resource{URI: "mem://" + name + "/readme", Name: "readme", MIMEType: "text/plain"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: "readme of " + name}}}, nil
		})
	s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "mem://" + name + "/notes/{id}", Name: "note"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "note " + req.Params.URI}}}, nil
		})
	return s
}

// upstreamBackend implements gateway.Backend by forwarding to real go-sdk
// client sessions connected to real in-process upstream servers.
type upstreamBackend struct {
	sessions map[string]*mcp.ClientSession
}

func (b *upstreamBackend) session(server string) (*mcp.ClientSession, error) {
	cs, ok := b.sessions[server]
	if !ok {
		return nil, fmt.Errorf("no upstream %q", server)
	}
	return cs, nil
}

func (b *upstreamBackend) CallTool(ctx context.Context, _ upstream.Downstream, server string, p *mcp.CallToolParamsRaw) (*mcp.CallToolResult, error) {
	cs, err := b.session(server)
	if err != nil {
		return nil, err
	}
	var args any
	if p.Arguments != nil {
		args = p.Arguments
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Meta: p.Meta, Name: p.Name, Arguments: args})
	return res, unwrapApplication(err)
}

// Forward decodes params, makes the call through the SDK client and
// encodes the result, as the real supervisor does for an HTTP upstream.
func (b *upstreamBackend) Forward(ctx context.Context, d upstream.Downstream, server, method, name string, params json.RawMessage) (json.RawMessage, error) {
	var res any
	var err error
	switch method {
	case "tools/call":
		var p mcp.CallToolParamsRaw
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, err
		}
		if p.Name != name {
			return nil, fmt.Errorf("params name %q, tool %q", p.Name, name)
		}
		res, err = b.CallTool(ctx, d, server, &p)
	case "resources/read":
		var p mcp.ReadResourceParams
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, err
		}
		res, err = b.ReadResource(ctx, d, server, &p)
	case "prompts/get":
		var p mcp.GetPromptParams
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, err
		}
		res, err = b.GetPrompt(ctx, d, server, &p)
	default:
		return nil, fmt.Errorf("forward %q", method)
	}
	if err != nil {
		return nil, err
	}
	return wire.MarshalResult(res)
}

// unwrapApplication undoes the go-sdk client's "calling ...: %w" wrapping of
// an upstream's JSON-RPC error, as the real supervisor does, so the gateway
// can forward the error itself.
func unwrapApplication(err error) error {
	var wire *jsonrpc.Error
	if errors.As(err, &wire) {
		return wire
	}
	return err
}

func (b *upstreamBackend) ReadResource(ctx context.Context, _ upstream.Downstream, server string, p *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
	cs, err := b.session(server)
	if err != nil {
		return nil, err
	}
	return cs.ReadResource(ctx, p)
}

func (b *upstreamBackend) GetPrompt(ctx context.Context, _ upstream.Downstream, server string, p *mcp.GetPromptParams) (*mcp.GetPromptResult, error) {
	cs, err := b.session(server)
	if err != nil {
		return nil, err
	}
	res, err := cs.GetPrompt(ctx, p)
	return res, unwrapApplication(err)
}

func (b *upstreamBackend) Complete(ctx context.Context, _ upstream.Downstream, server string, p *mcp.CompleteParams) (*mcp.CompleteResult, error) {
	cs, err := b.session(server)
	if err != nil {
		return nil, err
	}
	return cs.Complete(ctx, p)
}

func (b *upstreamBackend) Subscribe(ctx context.Context, server string, p *mcp.SubscribeParams) error {
	cs, err := b.session(server)
	if err != nil {
		return err
	}
	return cs.Subscribe(ctx, p)
}

func (b *upstreamBackend) Unsubscribe(ctx context.Context, server string, p *mcp.UnsubscribeParams) error {
	cs, err := b.session(server)
	if err != nil {
		return err
	}
	return cs.Unsubscribe(ctx, p)
}

// lateSink breaks the registry ↔ gateway construction cycle, as the host does.
type lateSink struct{ g *gateway.Gateway }

func (s *lateSink) Apply(ch registry.Changes) { s.g.Apply(ch) }

// env is a registry and a gateway wired to real upstream servers.
type env struct {
	reg      *registry.Registry
	gw       *gateway.Gateway
	upstream map[string]*mcp.ClientSession // direct sessions, for comparisons
	rec      map[string]*upstreamRecord
}

// newEnv starts upstreams "alpha" and "beta" (prefixes = names) and
// registers their catalogs.
func newEnv(t *testing.T, opts gateway.Options) *env {
	t.Helper()
	ctx := testCtx(t)
	e := &env{upstream: map[string]*mcp.ClientSession{}, rec: map[string]*upstreamRecord{}}
	specs := []registry.ServerSpec{{Name: "alpha", Prefix: "alpha"}, {Name: "beta", Prefix: "beta"}}
	sink := &lateSink{}
	e.reg = registry.New(hclog.NewNullLogger(), "__", specs, sink)
	backend := &upstreamBackend{sessions: e.upstream}
	opts.Registry, opts.Backend = e.reg, backend
	if opts.Logger == nil {
		opts.Logger = hclog.New(&hclog.LoggerOptions{Name: "gateway", Level: hclog.Warn, Output: testWriter{t}})
	}
	e.gw = gateway.New(opts)
	sink.g = e.gw

	for _, name := range []string{"alpha", "beta"} {
		rec := &upstreamRecord{subEvents: make(chan string, 16)}
		e.rec[name] = rec
		srv := newUpstream(name, rec)
		st, ct := mcp.NewInMemoryTransports()
		ss, err := srv.Connect(ctx, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "mcpvisor-test"}, nil).Connect(ctx, ct, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close(); ss.Wait() })
		e.upstream[name] = cs
		e.sync(t, name)
	}
	return e
}

// sync lists an upstream's catalog and hands it to the registry, as a
// supervisor does after each (re)connect.
func (e *env) sync(t *testing.T, server string) {
	t.Helper()
	ctx := testCtx(t)
	cs := e.upstream[server]
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	prompts, err := cs.ListPrompts(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := cs.ListResourceTemplates(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.reg.Update(server, &registry.Catalog{Tools: tools.Tools, Prompts: prompts.Prompts,
		Resources: res.Resources, Templates: tmpl.ResourceTemplates})
}

// connect connects a downstream go-sdk client to the gateway over in-memory
// transports.
func (e *env) connect(t *testing.T, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx := testCtx(t)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := e.gw.Server().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "downstream"}, copts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); ss.Wait() })
	return cs
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// checkToolFidelity calls tools through the gateway session gw and directly
// on the upstream, and requires identical results and errors.
func checkToolFidelity(t *testing.T, e *env, gw *mcp.ClientSession) {
	t.Helper()
	ctx := testCtx(t)
	direct := e.upstream["alpha"]
	for _, tool := range []string{"content", "fail"} {
		want, err := direct.CallTool(ctx, &mcp.CallToolParams{Name: tool})
		if err != nil {
			t.Fatalf("direct %s: %v", tool, err)
		}
		got, err := gw.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__" + tool})
		if err != nil {
			t.Fatalf("gateway %s: %v", tool, err)
		}
		if d := cmp.Diff(mustJSON(t, want), mustJSON(t, got)); d != "" {
			t.Errorf("%s: result through the gateway differs (-direct +gateway):\n%s", tool, d)
		}
	}
	got, err := gw.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__fail"})
	if err != nil || !got.IsError {
		t.Errorf("isError lost: %+v, %v", got, err)
	}

	_, err = gw.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__rpcerr"})
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) {
		t.Fatalf("rpcerr: got %v (%T), want a *jsonrpc.Error", err, err)
	}
	if werr.Code != -32042 || werr.Message != "quota exceeded" {
		t.Errorf("rpcerr: code %d message %q", werr.Code, werr.Message)
	}
	var data map[string]any
	if err := json.Unmarshal(werr.Data, &data); err != nil || data["retryAfter"] != float64(30) || data["plan"] != "free" {
		t.Errorf("rpcerr: data %s lost (%v)", werr.Data, err)
	}

	// Arguments and _meta reach the upstream byte for byte, under the
	// original tool name.
	args := map[string]any{"text": "hi", "n": float64(3), "nested": map[string]any{"ok": true}}
	got, err = gw.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__echo_args", Arguments: args,
		Meta: mcp.Meta{"progressToken": "tok-1"}})
	if err != nil {
		t.Fatal(err)
	}
	var echoed map[string]any
	if err := json.Unmarshal([]byte(got.Content[0].(*mcp.TextContent).Text), &echoed); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(args, echoed); d != "" {
		t.Errorf("arguments changed on the way (-sent +received):\n%s", d)
	}
	if got.Meta["progressToken"] != "tok-1" {
		t.Errorf("_meta lost: %v", got.Meta)
	}
	rec := e.rec["alpha"]
	rec.mu.Lock()
	last := rec.toolNames[len(rec.toolNames)-1]
	rec.mu.Unlock()
	if last != "echo args" {
		t.Errorf("upstream saw tool name %q, want the original %q", last, "echo args")
	}

	_, err = gw.CallTool(ctx, &mcp.CallToolParams{Name: "nope__nothing"})
	if !errors.As(err, &werr) || werr.Code != jsonrpc.CodeInvalidParams || !strings.Contains(werr.Message, "nope__nothing") {
		t.Errorf("unknown tool: %v", err)
	}
}

func TestToolResultsInMemory(t *testing.T) {
	e := newEnv(t, gateway.Options{Name: "mcpvisor", Version: "test"})
	cs := e.connect(t, nil)
	res, err := cs.ListTools(testCtx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	want := []string{"alpha__content", "alpha__echo_args", "alpha__fail", "alpha__rpcerr",
		"beta__content", "beta__echo_args", "beta__fail", "beta__rpcerr"}
	if d := cmp.Diff(want, names); d != "" {
		t.Errorf("tools/list (-want +got):\n%s", d)
	}
	if info := cs.InitializeResult().ServerInfo; info.Name != "mcpvisor" || info.Version != "test" {
		t.Errorf("server info = %+v", info)
	}
	checkToolFidelity(t, e, cs)
}

func TestCapabilitiesAdvertisedWhenEmpty(t *testing.T) {
	g := gateway.New(gateway.Options{Backend: &upstreamBackend{}})
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			ctx := testCtx(t)
			st, ct := mcp.NewInMemoryTransports()
			ss, err := g.Server().Connect(ctx, st, nil)
			if err != nil {
				t.Fatal(err)
			}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "c"}, nil).Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cs.Close(); ss.Wait() })
			caps := cs.InitializeResult().Capabilities
			if caps.Tools == nil || !caps.Tools.ListChanged || caps.Prompts == nil || !caps.Prompts.ListChanged ||
				caps.Resources == nil || !caps.Resources.ListChanged || !caps.Resources.Subscribe ||
				caps.Completions == nil {
				t.Errorf("capabilities = %s", mustJSON(t, caps))
			}
		})
	}
}

func TestPromptsResourcesCompletion(t *testing.T) {
	e := newEnv(t, gateway.Options{})
	cs := e.connect(t, nil)
	ctx := testCtx(t)

	// Prompts: exposed name in, original name upstream.
	pr, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "beta__greet", Arguments: map[string]string{"who": "ann"}})
	if err != nil {
		t.Fatal(err)
	}
	if pr.Description != "beta" || pr.Messages[0].Content.(*mcp.TextContent).Text != "hello ann" {
		t.Errorf("prompt result = %s", mustJSON(t, pr))
	}
	if got := e.rec["beta"].promptNames; !cmp.Equal(got, []string{"greet"}) {
		t.Errorf("upstream saw prompt names %v", got)
	}

	// Resources and templates route by URI, unchanged.
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "mem://alpha/readme"})
	if err != nil {
		t.Fatal(err)
	}
	if rr.Contents[0].Text != "readme of alpha" {
		t.Errorf("read = %s", mustJSON(t, rr))
	}
	rr, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "mem://beta/notes/7"})
	if err != nil {
		t.Fatal(err)
	}
	if rr.Contents[0].Text != "note mem://beta/notes/7" {
		t.Errorf("template read = %s", mustJSON(t, rr))
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "mem://gamma/x"}); err == nil {
		t.Errorf("reading an unknown resource succeeded")
	}

	// Completion: prompt refs by exposed name, resource refs by template.
	cr, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "alpha__greet"},
		Argument: mcp.CompleteParamsArgument{Name: "who", Value: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := cr.Completion.Values; !cmp.Equal(got, []string{"alpha:greet:a"}) {
		t.Errorf("prompt completion = %v", got)
	}
	cr, err = cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/resource", URI: "mem://beta/notes/{id}"},
		Argument: mcp.CompleteParamsArgument{Name: "id", Value: "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := cr.Completion.Values; !cmp.Equal(got, []string{"beta:mem://beta/notes/{id}:1"}) {
		t.Errorf("resource completion = %v", got)
	}
	_, err = cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "gamma__greet"},
		Argument: mcp.CompleteParamsArgument{Name: "who"}})
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) || werr.Code != jsonrpc.CodeInvalidParams || !strings.Contains(werr.Message, "gamma__greet") {
		t.Errorf("unknown prompt completion: %v", err)
	}

}

func nextEvent(t *testing.T, ctx context.Context, ch <-chan string) string {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-ctx.Done():
		t.Fatalf("no event: %v", ctx.Err())
		return ""
	}
}

func noEvent(t *testing.T, ch <-chan string) {
	t.Helper()
	select {
	case ev := <-ch:
		t.Errorf("unexpected event %q", ev)
	default:
	}
}

// TestResourceSubscriptionsLegacy subscribes two clients to one URI: the
// upstream sees one subscription, held until the last client leaves, and
// updates reach every subscriber.
func TestResourceSubscriptionsLegacy(t *testing.T) {
	e := newEnv(t, gateway.Options{})
	ctx := testCtx(t)
	legacy := &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}
	var clients []*mcp.ClientSession
	var updates []chan string
	for range 2 {
		ch := make(chan string, 4)
		updates = append(updates, ch)
		st, ct := mcp.NewInMemoryTransports()
		ss, err := e.gw.Server().Connect(ctx, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "c"}, &mcp.ClientOptions{
			ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { ch <- req.Params.URI },
		}).Connect(ctx, ct, legacy)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close(); ss.Wait() })
		clients = append(clients, cs)
	}
	events := e.rec["alpha"].subEvents
	const uri = "mem://alpha/notes/3"

	for _, cs := range clients {
		if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
			t.Fatal(err)
		}
	}
	if ev := nextEvent(t, ctx, events); ev != uri {
		t.Errorf("upstream event %q, want %q", ev, uri)
	}
	noEvent(t, events)

	if err := e.gw.NotifyResourceUpdated(ctx, uri); err != nil {
		t.Fatal(err)
	}
	for i, ch := range updates {
		if got := nextEvent(t, ctx, ch); got != uri {
			t.Errorf("client %d: updated %q", i, got)
		}
	}

	if err := clients[0].Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	noEvent(t, events) // client 1 still wants updates
	if err := clients[1].Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, ctx, events); ev != "-"+uri {
		t.Errorf("upstream event %q, want unsubscribe", ev)
	}

	err := clients[0].Subscribe(ctx, &mcp.SubscribeParams{URI: "other://x"})
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) || werr.Code != jsonrpc.CodeInvalidParams || !strings.Contains(werr.Message, "other://x") {
		t.Errorf("subscribe to unknown resource: %v", err)
	}
}

// TestResourceSubscriptionsStateless covers 2026-07-28 clients, which
// subscribe with a subscriptions/listen stream and unsubscribe by ending it.
func TestResourceSubscriptionsStateless(t *testing.T) {
	e := newEnv(t, gateway.Options{})
	ctx := testCtx(t)
	updated := make(chan string, 16)
	cs := e.connect(t, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updated <- req.Params.URI },
	})
	const uri = "mem://beta/readme"
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, ctx, e.rec["beta"].subEvents); ev != uri {
		t.Errorf("upstream event %q", ev)
	}
	// The listen stream registers the subscription after the upstream
	// accepted it, with no event the client can see; notify until one lands.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for got := false; !got; {
		if err := e.gw.NotifyResourceUpdated(ctx, uri); err != nil {
			t.Fatal(err)
		}
		select {
		case u := <-updated:
			got = u == uri
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("no resources/updated notification")
		}
	}
	if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	// The 2026 upstream session also unsubscribes by closing its stream.
	if ev := nextEvent(t, ctx, e.rec["beta"].subEvents); ev != "-"+uri {
		t.Errorf("upstream event %q, want unsubscribe", ev)
	}
}

// listChangedOptions returns client options that report each tools/prompts/resources
// list_changed notification on a channel.
func listChangedOptions() (*mcp.ClientOptions, chan string) {
	ch := make(chan string, 64)
	return &mcp.ClientOptions{
		ToolListChangedHandler:     func(context.Context, *mcp.ToolListChangedRequest) { ch <- "tools" },
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { ch <- "prompts" },
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { ch <- "resources" },
	}, ch
}

// waitFor waits for the notification kind, skipping others.
func waitFor(t *testing.T, ctx context.Context, ch <-chan string, kind string) {
	t.Helper()
	for {
		select {
		case k := <-ch:
			if k == kind {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no %s list_changed notification: %v", kind, ctx.Err())
		}
	}
}

// awaitListStream returns once the client hears tool list changes. A
// 2026-07-28 client subscribes with a subscriptions/listen stream it opens
// in the background while connecting, and nothing tells it when the server
// has registered the stream; until then changes are not announced to it. So
// change beta's catalog every few milliseconds until a notification lands,
// then restore it. For a legacy client the first change is announced.
func awaitListStream(t *testing.T, e *env, ch <-chan string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(testCtx(t), 10*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		e.reg.Update("beta", &registry.Catalog{Tools: []*mcp.Tool{{Name: fmt.Sprintf("probe%d", i), InputSchema: objectSchema}}})
		select {
		case k := <-ch:
			if k == "tools" {
				e.sync(t, "beta")
				return
			}
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("the client never heard a tools list_changed notification")
		}
	}
}

func toolNames(t *testing.T, ctx context.Context, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tl := range res.Tools {
		out = append(out, tl.Name)
	}
	return out
}

// checkListChanged drives registry changes and requires the client to be
// told and to see them.
func checkListChanged(t *testing.T, e *env, cs *mcp.ClientSession, ch <-chan string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(testCtx(t), 10*time.Second)
	defer cancel()

	// An upstream parks: its tools, prompts and resources go.
	e.reg.Update("beta", nil)
	waitFor(t, ctx, ch, "tools")
	if got := toolNames(t, ctx, cs); !cmp.Equal(got, []string{"alpha__content", "alpha__echo_args", "alpha__fail", "alpha__rpcerr"}) {
		t.Errorf("after beta parked: %v", got)
	}
	// It comes back with a new tool.
	e.reg.Update("beta", &registry.Catalog{Tools: []*mcp.Tool{{Name: "fresh", InputSchema: objectSchema}}})
	waitFor(t, ctx, ch, "tools")
	if got := toolNames(t, ctx, cs); !slices.Contains(got, "beta__fresh") {
		t.Errorf("after beta revived: %v", got)
	}
	e.reg.Update("beta", &registry.Catalog{Prompts: []*mcp.Prompt{{Name: "p"}}})
	waitFor(t, ctx, ch, "prompts")
	e.reg.Update("beta", &registry.Catalog{Resources: []*mcp.Resource{{URI: "mem://beta/new", Name: "new"}}})
	waitFor(t, ctx, ch, "resources")
}

func TestListChangedInMemory(t *testing.T) {
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			e := newEnv(t, gateway.Options{})
			copts, ch := listChangedOptions()
			ctx := testCtx(t)
			st, ct := mcp.NewInMemoryTransports()
			ss, err := e.gw.Server().Connect(ctx, st, nil)
			if err != nil {
				t.Fatal(err)
			}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "c"}, copts).Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cs.Close(); ss.Wait() })
			awaitListStream(t, e, ch)
			checkListChanged(t, e, cs, ch)
		})
	}
}

func TestServeTransport(t *testing.T) {
	e := newEnv(t, gateway.Options{})
	ctx, cancel := context.WithCancel(testCtx(t))
	st, ct := mcp.NewInMemoryTransports()
	done := make(chan error, 1)
	go func() { done <- e.gw.ServeTransport(ctx, st) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if got := toolNames(t, ctx, cs); len(got) != 8 {
		t.Errorf("tools = %v", got)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("ServeTransport returned %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeTransport did not return after cancel")
	}
}

func TestBadUpstreamItemsDoNotCrash(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: lockedWriter{&mu, &logs}})
	e := newEnv(t, gateway.Options{Logger: logger})
	copts, ch := listChangedOptions()
	cs := e.connect(t, copts)
	ctx, cancel := context.WithTimeout(testCtx(t), 10*time.Second)
	defer cancel()

	// beta now offers broken definitions next to a good one: a string input
	// schema, a missing schema, an unparsable URI and template.
	e.reg.Update("beta", &registry.Catalog{
		Tools: []*mcp.Tool{
			{Name: "content", InputSchema: map[string]any{"type": "string"}}, // replaces a good one
			{Name: "noschema"},
			{Name: "good", InputSchema: objectSchema},
		},
		Resources: []*mcp.Resource{{URI: "%zz://bad", Name: "bad"}},
		Templates: []*mcp.ResourceTemplate{{URITemplate: "mem://{unterminated", Name: "bad"}},
	})
	waitFor(t, ctx, ch, "tools")
	got := toolNames(t, ctx, cs)
	want := []string{"alpha__content", "alpha__echo_args", "alpha__fail", "alpha__rpcerr", "beta__good"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("tools after bad update (-want +got):\n%s", d)
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	for _, name := range []string{"beta__content", "beta__noschema", "%zz://bad", "mem://{unterminated"} {
		if !strings.Contains(out, name) {
			t.Errorf("rejected item %q not logged; log:\n%s", name, out)
		}
	}
	// The gateway still serves.
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__fail"}); err != nil {
		t.Errorf("call after bad update: %v", err)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
