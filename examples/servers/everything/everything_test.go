package main_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/examples/servers/internal/servetest"
)

var everythingBin string

func TestMain(m *testing.M) {
	os.Exit(servetest.Main(m, "everything", &everythingBin))
}

// sessionProtocol is the protocol of the conformance suite's client:
// sessions, so the server can log to the client and send it sampling and
// elicitation requests.
const sessionProtocol = "2025-11-25"

// peer is a client that answers the server's requests the way the suite's
// client does and records the notifications it gets.
type peer struct {
	mu       sync.Mutex
	logs     []*mcp.LoggingMessageParams
	progress []*mcp.ProgressNotificationParams
	updated  chan string
	sampled  []*mcp.CreateMessageParams
	elicited []*mcp.ElicitParams
}

func newPeer() *peer { return &peer{updated: make(chan string, 10)} }

func (p *peer) client() *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "everything-test", Version: "0"}, &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.logs = append(p.logs, req.Params)
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.progress = append(p.progress, req.Params)
		},
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			p.updated <- req.Params.URI
		},
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.sampled = append(p.sampled, req.Params)
			return &mcp.CreateMessageResult{Role: "assistant", Model: "test-model", Content: &mcp.TextContent{Text: "sampled text"}}, nil
		},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.elicited = append(p.elicited, req.Params)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"username": "testuser", "email": "test@example.com"}}, nil
		},
	})
}

func connect(t *testing.T, p *peer) *mcp.ClientSession {
	t.Helper()
	cs, _ := servetest.ConnectStdio(t, p.client(), &mcp.ClientSessionOptions{ProtocolVersion: sessionProtocol}, everythingBin)
	return cs
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func call(t *testing.T, cs *mcp.ClientSession, params *mcp.CallToolParams) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(ctx(t), params)
	if err != nil {
		t.Fatalf("call %s: %v", params.Name, err)
	}
	return res
}

// wire returns v as generic JSON, without the fields the SDK adds for the
// protocol version rather than for the tool.
func wire(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	delete(out, "resultType")
	delete(out, "_meta")
	return out
}

func b64(t *testing.T, s string) string {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

func text(s string) map[string]any { return map[string]any{"type": "text", "text": s} }

func TestListTools(t *testing.T) {
	cs := connect(t, newPeer())
	res, err := cs.ListTools(ctx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var schema map[string]any
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" || tool.InputSchema == nil {
			t.Errorf("tool %s: description %q, input schema %v: the suite's tools-list wants both", tool.Name, tool.Description, tool.InputSchema)
		}
		if tool.Name == "json_schema_2020_12_tool" {
			schema, _ = tool.InputSchema.(map[string]any)
		}
	}
	want := []string{
		"json_schema_2020_12_tool", "list_roots", "pid", "sleep",
		"test_audio_content", "test_elicitation", "test_elicitation_sep1034_defaults", "test_elicitation_sep1330_enums",
		"test_embedded_resource", "test_error_handling", "test_image_content", "test_multiple_content_types",
		"test_reconnection", "test_sampling", "test_simple_text", "test_tool_with_logging", "test_tool_with_progress",
		"update_watched_resource",
	}
	slices.Sort(names)
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	// The 2020-12 keywords must reach the client verbatim (SEP-1613).
	if schema["$schema"] != "https://json-schema.org/draft/2020-12/schema" || schema["additionalProperties"] != false {
		t.Errorf("json_schema_2020_12_tool schema lost keywords: %v", schema)
	}
	if defs, _ := schema["$defs"].(map[string]any); defs["address"] == nil {
		t.Errorf("json_schema_2020_12_tool schema: $defs.address missing: %v", schema)
	}
}

func TestContentTools(t *testing.T) {
	png := b64(t, "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")
	image := map[string]any{"type": "image", "mimeType": "image/png", "data": png}
	for _, tc := range []struct {
		tool string
		want map[string]any
	}{
		{"test_simple_text", map[string]any{"content": []any{text("This is a simple text response for testing.")}}},
		{"test_image_content", map[string]any{"content": []any{image}}},
		{"test_audio_content", map[string]any{"content": []any{map[string]any{
			"type": "audio", "mimeType": "audio/wav", "data": b64(t, "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="),
		}}}},
		{"test_embedded_resource", map[string]any{"content": []any{map[string]any{"type": "resource", "resource": map[string]any{
			"uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content.",
		}}}}},
		{"test_multiple_content_types", map[string]any{"content": []any{
			text("Multiple content types test:"),
			image,
			map[string]any{"type": "resource", "resource": map[string]any{
				"uri": "test://mixed-content-resource", "mimeType": "application/json", "text": `{"test":"data","value":123}`,
			}},
		}}},
		{"test_error_handling", map[string]any{"isError": true, "content": []any{text("This tool intentionally returns an error for testing")}}},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			// Also without a session: these results must not depend on one.
			for _, version := range []string{sessionProtocol, "2026-07-28"} {
				cs, _ := servetest.ConnectStdio(t, newPeer().client(), &mcp.ClientSessionOptions{ProtocolVersion: version}, everythingBin)
				got := wire(t, call(t, cs, &mcp.CallToolParams{Name: tc.tool}))
				if diff := cmp.Diff(any(tc.want), got); diff != "" {
					t.Errorf("%s over %s (-want +got):\n%s", tc.tool, version, diff)
				}
			}
		})
	}
}

func TestLoggingAndProgress(t *testing.T) {
	p := newPeer()
	cs := connect(t, p)
	if err := cs.SetLoggingLevel(ctx(t), &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
		t.Fatal(err)
	}
	call(t, cs, &mcp.CallToolParams{Name: "test_tool_with_logging"})
	params := &mcp.CallToolParams{Name: "test_tool_with_progress"}
	params.SetProgressToken("progress-test-1")
	res := call(t, cs, params)
	if got := res.Content[0].(*mcp.TextContent).Text; !strings.Contains(got, "progress-test-1") {
		t.Errorf("progress result %q does not name the token", got)
	}

	// The client dispatches notifications on their own goroutines, so they
	// may be handled after the call's result: wait for all of them.
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		n := len(p.logs) + len(p.progress)
		p.mu.Unlock()
		if n >= 6 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var logs []any
	for _, l := range p.logs {
		logs = append(logs, l.Data)
	}
	if diff := cmp.Diff([]any{"Tool execution started", "Tool processing data", "Tool execution completed"}, logs); diff != "" {
		t.Errorf("log messages (-want +got):\n%s", diff)
	}
	var progress []float64
	for _, n := range p.progress {
		progress = append(progress, n.Progress)
		if n.ProgressToken != "progress-test-1" || n.Total != 100 {
			t.Errorf("progress notification %+v: want token progress-test-1, total 100", n)
		}
	}
	if diff := cmp.Diff([]float64{0, 50, 100}, progress); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
}

func TestSamplingAndElicitation(t *testing.T) {
	p := newPeer()
	cs := connect(t, p)
	res := call(t, cs, &mcp.CallToolParams{Name: "test_sampling", Arguments: map[string]any{"prompt": "Test prompt"}})
	if diff := cmp.Diff(any(map[string]any{"content": []any{text("LLM response: sampled text")}}), wire(t, res)); diff != "" {
		t.Errorf("test_sampling (-want +got):\n%s", diff)
	}
	res = call(t, cs, &mcp.CallToolParams{Name: "test_elicitation", Arguments: map[string]any{"message": "Who are you?"}})
	want := `User response: action=accept, content={"email":"test@example.com","username":"testuser"}`
	if diff := cmp.Diff(any(map[string]any{"content": []any{text(want)}}), wire(t, res)); diff != "" {
		t.Errorf("test_elicitation (-want +got):\n%s", diff)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.sampled) != 1 || p.sampled[0].MaxTokens != 100 || p.sampled[0].Messages[0].Content.(*mcp.TextContent).Text != "Test prompt" {
		t.Errorf("sampling requests: %+v", p.sampled)
	}
	if len(p.elicited) != 1 || p.elicited[0].Message != "Who are you?" {
		t.Fatalf("elicitation requests: %+v", p.elicited)
	}
	schema, _ := json.Marshal(p.elicited[0].RequestedSchema)
	if !strings.Contains(string(schema), `"required":["username","email"]`) {
		t.Errorf("elicitation schema %s: want username and email required", schema)
	}
}

func TestResources(t *testing.T) {
	p := newPeer()
	cs := connect(t, p)
	read := func(uri string) *mcp.ResourceContents {
		t.Helper()
		res, err := cs.ReadResource(ctx(t), &mcp.ReadResourceParams{URI: uri})
		if err != nil {
			t.Fatalf("read %s: %v", uri, err)
		}
		return res.Contents[0]
	}
	if got := read("test://static-text"); got.Text != "This is the content of the static text resource." || got.MIMEType != "text/plain" {
		t.Errorf("static-text: %+v", got)
	}
	if got := read("test://static-binary"); len(got.Blob) == 0 || got.MIMEType != "image/png" {
		t.Errorf("static-binary: %+v", got)
	}
	if got := read("test://template/123/data"); got.Text != `{"id":"123","templateTest":true,"data":"Data for ID: 123"}` || got.URI != "test://template/123/data" {
		t.Errorf("template: %+v", got)
	}

	if err := cs.Subscribe(ctx(t), &mcp.SubscribeParams{URI: "test://watched-resource"}); err != nil {
		t.Fatal(err)
	}
	call(t, cs, &mcp.CallToolParams{Name: "update_watched_resource"})
	select {
	case uri := <-p.updated:
		if uri != "test://watched-resource" {
			t.Errorf("updated %q", uri)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no notifications/resources/updated after update_watched_resource")
	}
	if got := read("test://watched-resource"); got.Text != "Watched resource content, version 1" {
		t.Errorf("watched resource after one update: %q", got.Text)
	}
	if err := cs.Unsubscribe(ctx(t), &mcp.UnsubscribeParams{URI: "test://watched-resource"}); err != nil {
		t.Fatal(err)
	}
	call(t, cs, &mcp.CallToolParams{Name: "update_watched_resource"})
	// The update notification would precede the tool result; none came.
	select {
	case uri := <-p.updated:
		t.Errorf("notification for %s after unsubscribe", uri)
	default:
	}
}

func TestPromptsAndCompletion(t *testing.T) {
	cs := connect(t, newPeer())
	res, err := cs.GetPrompt(ctx(t), &mcp.GetPromptParams{
		Name: "test_prompt_with_arguments", Arguments: map[string]string{"arg1": "hello", "arg2": "world"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Messages[0].Content.(*mcp.TextContent).Text; got != "Prompt with arguments: arg1='hello', arg2='world'" {
		t.Errorf("test_prompt_with_arguments: %q", got)
	}
	if _, err := cs.GetPrompt(ctx(t), &mcp.GetPromptParams{Name: "test_prompt_with_arguments"}); err == nil {
		t.Error("test_prompt_with_arguments without arguments: no error")
	}
	res, err = cs.GetPrompt(ctx(t), &mcp.GetPromptParams{
		Name: "test_prompt_with_embedded_resource", Arguments: map[string]string{"resourceUri": "test://example-resource"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := res.Messages[0].Content.(*mcp.EmbeddedResource); !ok || r.Resource.URI != "test://example-resource" {
		t.Errorf("test_prompt_with_embedded_resource: first message %+v", res.Messages[0].Content)
	}

	for _, tc := range []struct {
		ref   *mcp.CompleteReference
		arg   mcp.CompleteParamsArgument
		wants []string
	}{
		{&mcp.CompleteReference{Type: "ref/prompt", Name: "test_prompt_with_arguments"}, mcp.CompleteParamsArgument{Name: "arg1", Value: "par"}, []string{"paris", "park", "party"}},
		{&mcp.CompleteReference{Type: "ref/prompt", Name: "test_prompt_with_arguments"}, mcp.CompleteParamsArgument{Name: "arg1", Value: "test"}, []string{}},
		{&mcp.CompleteReference{Type: "ref/resource", URI: "test://template/{id}/data"}, mcp.CompleteParamsArgument{Name: "id", Value: "4"}, []string{"456"}},
	} {
		res, err := cs.Complete(ctx(t), &mcp.CompleteParams{Ref: tc.ref, Argument: tc.arg})
		if err != nil {
			t.Fatal(err)
		}
		// An empty list must still be an array on the wire.
		if diff := cmp.Diff(tc.wants, res.Completion.Values); diff != "" || res.Completion.Values == nil {
			t.Errorf("complete %s %q (-want +got):\n%s", tc.arg.Name, tc.arg.Value, diff)
		}
	}
}

// TestHTTP drives the server as the conformance suite does: streamable HTTP
// with sessions, including a server-to-client request on the call's stream.
func TestHTTP(t *testing.T) {
	proc := servetest.StartHTTP(t, everythingBin, "-http", "127.0.0.1:0")
	p := newPeer()
	cs, err := p.client().Connect(ctx(t), &mcp.StreamableClientTransport{Endpoint: proc.URL}, &mcp.ClientSessionOptions{ProtocolVersion: sessionProtocol})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res := call(t, cs, &mcp.CallToolParams{Name: "test_sampling", Arguments: map[string]any{"prompt": "over http"}})
	if got := res.Content[0].(*mcp.TextContent).Text; got != "LLM response: sampled text" {
		t.Errorf("test_sampling over HTTP: %q", got)
	}
	res = call(t, cs, &mcp.CallToolParams{Name: "test_reconnection"})
	if res.IsError {
		t.Errorf("test_reconnection: %+v", res)
	}
	cs.Close()
	proc.Stop(t)
}
