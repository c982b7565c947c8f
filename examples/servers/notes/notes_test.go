//go:build unix

package main_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/examples/servers/internal/servetest"
)

var notesBin string

func TestMain(m *testing.M) {
	os.Exit(servetest.Main(m, "notes", &notesBin))
}

// Protocol versions a client may speak: the newest (sessionless requests,
// subscriptions over subscriptions/listen) and the newest with an initialize
// handshake (resources/subscribe).
var protocols = []string{"2026-07-28", "2025-11-25"}

const waitTimeout = 10 * time.Second

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// watcher records the notifications a client receives.
type watcher struct {
	listChanged chan struct{}
	updated     chan string
}

func newWatcher() *watcher {
	return &watcher{listChanged: make(chan struct{}, 100), updated: make(chan string, 100)}
}

func (w *watcher) client() *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "notes-test", Version: "0"}, &mcp.ClientOptions{
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) {
			w.listChanged <- struct{}{}
		},
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			w.updated <- req.Params.URI
		},
	})
}

func (w *watcher) waitListChanged(t *testing.T) {
	t.Helper()
	select {
	case <-w.listChanged:
	case <-time.After(waitTimeout):
		t.Fatal("no notifications/resources/list_changed")
	}
}

func (w *watcher) waitUpdated(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-w.updated:
		if got != want {
			t.Fatalf("notifications/resources/updated for %s, want %s", got, want)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("no notifications/resources/updated for %s", want)
	}
}

func call(t *testing.T, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return res
}

// text returns the single text content of a tool result, failing on anything else.
func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if len(res.Content) != 1 {
		t.Fatalf("got %d content blocks, want 1", len(res.Content))
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content is %T, want text", res.Content[0])
	}
	return tc.Text
}

func wantText(t *testing.T, res *mcp.CallToolResult, isError bool, want string) {
	t.Helper()
	if got := text(t, res); got != want || res.IsError != isError {
		t.Errorf("result %q isError=%v, want %q isError=%v", got, res.IsError, want, isError)
	}
}

func read(t *testing.T, cs *mcp.ClientSession, uri string) string {
	t.Helper()
	res, err := cs.ReadResource(callCtx(t), &mcp.ReadResourceParams{URI: uri})
	if err != nil {
		t.Fatalf("read %s: %v", uri, err)
	}
	want := []*mcp.ResourceContents{{URI: uri, MIMEType: "text/plain", Text: res.Contents[0].Text}}
	if diff := cmp.Diff(want, res.Contents); diff != "" {
		t.Fatalf("read %s (-want +got):\n%s", uri, diff)
	}
	return res.Contents[0].Text
}

func resourceURIs(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListResources(callCtx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, r := range res.Resources {
		if r.MIMEType != "text/plain" {
			t.Errorf("%s: mime type %q", r.URI, r.MIMEType)
		}
		uris = append(uris, r.URI)
	}
	slices.Sort(uris)
	return uris
}

func TestListAndRead(t *testing.T) {
	for _, version := range protocols {
		t.Run(version, func(t *testing.T) {
			cs, _ := servetest.ConnectStdio(t, newWatcher().client(), &mcp.ClientSessionOptions{ProtocolVersion: version}, notesBin)
			caps := cs.InitializeResult().Capabilities
			if caps.Resources == nil || !caps.Resources.Subscribe || !caps.Resources.ListChanged || caps.Completions == nil || caps.Prompts == nil {
				t.Errorf("capabilities: resources %+v, completions %+v, prompts %+v", caps.Resources, caps.Completions, caps.Prompts)
			}

			want := []string{"notes://list", "notes://note/todo", "notes://note/welcome"}
			if diff := cmp.Diff(want, resourceURIs(t, cs)); diff != "" {
				t.Errorf("resources (-want +got):\n%s", diff)
			}
			templates, err := cs.ListResourceTemplates(callCtx(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(templates.ResourceTemplates) != 1 || templates.ResourceTemplates[0].URITemplate != "notes://note/{name}" {
				t.Errorf("templates: %+v", templates.ResourceTemplates)
			}

			if got := read(t, cs, "notes://list"); got != "todo\nwelcome\n" {
				t.Errorf("notes://list = %q", got)
			}
			if got := read(t, cs, "notes://note/welcome"); got != "Welcome to the mcpvisor notes example server." {
				t.Errorf("welcome = %q", got)
			}
			if got := read(t, cs, "notes://note/todo"); got != "- read the welcome note\n- add a note of your own" {
				t.Errorf("todo = %q", got)
			}

			_, err = cs.ReadResource(callCtx(t), &mcp.ReadResourceParams{URI: "notes://note/missing"})
			var werr *jsonrpc.Error
			if !errors.As(err, &werr) || werr.Code != jsonrpc.CodeInvalidParams {
				t.Errorf("read missing note: %v, want JSON-RPC error %d", err, jsonrpc.CodeInvalidParams)
			}
		})
	}
}

func TestTools(t *testing.T) {
	cs, cmd := servetest.ConnectStdio(t, newWatcher().client(), nil, notesBin)
	res, err := cs.ListTools(callCtx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	if diff := cmp.Diff([]string{"add_note", "delete_note", "pid"}, names); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	wantText(t, call(t, cs, "pid", nil), false, strconv.Itoa(cmd.Process.Pid))
	wantText(t, call(t, cs, "delete_note", map[string]any{"name": "nope"}), true, `no note named "nope"`)
	wantText(t, call(t, cs, "add_note", map[string]any{"name": "a b", "text": "x"}), true,
		`note name "a b": only letters, digits, '_', '.' and '-' are allowed`)
}

func TestAddAndDelete(t *testing.T) {
	for _, version := range protocols {
		t.Run(version, func(t *testing.T) {
			w := newWatcher()
			cs, _ := servetest.ConnectStdio(t, w.client(), &mcp.ClientSessionOptions{ProtocolVersion: version}, notesBin)
			waitListening(t, cs, w, version)

			wantText(t, call(t, cs, "add_note", map[string]any{"name": "groceries", "text": "milk"}), false, "added note groceries")
			w.waitListChanged(t)
			want := []string{"notes://list", "notes://note/groceries", "notes://note/todo", "notes://note/welcome"}
			if diff := cmp.Diff(want, resourceURIs(t, cs)); diff != "" {
				t.Errorf("resources after add (-want +got):\n%s", diff)
			}
			if got := read(t, cs, "notes://note/groceries"); got != "milk" {
				t.Errorf("groceries = %q", got)
			}
			if got := read(t, cs, "notes://list"); got != "groceries\ntodo\nwelcome\n" {
				t.Errorf("notes://list = %q", got)
			}

			wantText(t, call(t, cs, "add_note", map[string]any{"name": "groceries", "text": "eggs"}), false, "updated note groceries")
			if got := read(t, cs, "notes://note/groceries"); got != "eggs" {
				t.Errorf("groceries after update = %q", got)
			}

			wantText(t, call(t, cs, "delete_note", map[string]any{"name": "groceries"}), false, "deleted note groceries")
			w.waitListChanged(t)
			want = []string{"notes://list", "notes://note/todo", "notes://note/welcome"}
			if diff := cmp.Diff(want, resourceURIs(t, cs)); diff != "" {
				t.Errorf("resources after delete (-want +got):\n%s", diff)
			}
			if _, err := cs.ReadResource(callCtx(t), &mcp.ReadResourceParams{URI: "notes://note/groceries"}); err == nil {
				t.Error("deleted note is still readable")
			}
		})
	}
}

// waitListening waits until list_changed notifications reach the client.
// Under the newest protocol the client asks for them on a subscriptions/listen
// stream that Connect starts but does not wait for, so a change made right
// after Connect may go unnoticed. A throwaway note is added and deleted until
// the notification arrives; the notes end as they were.
func waitListening(t *testing.T, cs *mcp.ClientSession, w *watcher, version string) {
	t.Helper()
	if version < "2026-07-28" {
		return
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		call(t, cs, "add_note", map[string]any{"name": "warmup", "text": "x"})
		select {
		case <-w.listChanged:
			call(t, cs, "delete_note", map[string]any{"name": "warmup"})
			w.waitListChanged(t)
			return
		case <-time.After(100 * time.Millisecond):
		}
		call(t, cs, "delete_note", map[string]any{"name": "warmup"})
		if time.Now().After(deadline) {
			t.Fatal("no notifications/resources/list_changed")
		}
	}
}

func TestSubscribe(t *testing.T) {
	for _, version := range protocols {
		t.Run(version, func(t *testing.T) {
			w := newWatcher()
			cs, _ := servetest.ConnectStdio(t, w.client(), &mcp.ClientSessionOptions{ProtocolVersion: version}, notesBin)

			if err := cs.Subscribe(callCtx(t), &mcp.SubscribeParams{URI: "notes://note/todo"}); err != nil {
				t.Fatal(err)
			}
			waitSubscribed(t, cs, w, version, "todo", "- ship it")
			if got := read(t, cs, "notes://note/todo"); got != "- ship it" {
				t.Errorf("todo = %q", got)
			}

			// After unsubscribing, updates to todo no longer arrive, but those
			// to welcome, subscribed next, do.
			if err := cs.Unsubscribe(callCtx(t), &mcp.UnsubscribeParams{URI: "notes://note/todo"}); err != nil {
				t.Fatal(err)
			}
			waitUnsubscribed(t, cs, w, version)
			if err := cs.Subscribe(callCtx(t), &mcp.SubscribeParams{URI: "notes://note/welcome"}); err != nil {
				t.Fatal(err)
			}
			waitSubscribed(t, cs, w, version, "welcome", "hi")

			// Under the newest protocol Subscribe opens a listen stream in the
			// background and does not report the server's rejection.
			if version < "2026-07-28" {
				if err := cs.Subscribe(callCtx(t), &mcp.SubscribeParams{URI: "https://example.com/"}); err == nil {
					t.Error("subscribing to a foreign URI succeeded")
				}
			}
		})
	}
}

// waitSubscribed replaces the text of note until the update reaches the
// client. Under the legacy protocol the first update must: resources/subscribe
// has been answered. Under the newest one Subscribe only starts a
// subscriptions/listen stream, so the server may see it a moment later.
func waitSubscribed(t *testing.T, cs *mcp.ClientSession, w *watcher, version, note, text string) {
	t.Helper()
	uri := "notes://note/" + note
	deadline := time.Now().Add(waitTimeout)
	for {
		wantText(t, call(t, cs, "add_note", map[string]any{"name": note, "text": text}), false, "updated note "+note)
		select {
		case got := <-w.updated:
			if got != uri {
				t.Fatalf("notifications/resources/updated for %s, want %s", got, uri)
			}
			return
		case <-time.After(100 * time.Millisecond):
			if version < "2026-07-28" {
				w.waitUpdated(t, uri)
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no notifications/resources/updated for %s", uri)
			}
		}
	}
}

// waitUnsubscribed updates the todo note until its update no longer reaches
// the client, which is immediate under the legacy protocol.
func waitUnsubscribed(t *testing.T, cs *mcp.ClientSession, w *watcher, version string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		call(t, cs, "add_note", map[string]any{"name": "todo", "text": "- unsubscribed"})
		select {
		case uri := <-w.updated:
			if uri != "notes://note/todo" {
				t.Fatalf("unexpected update for %s", uri)
			}
			if version < "2026-07-28" {
				t.Fatal("update after resources/unsubscribe")
			}
			if time.Now().After(deadline) {
				t.Fatal("updates still arrive after Unsubscribe")
			}
		case <-time.After(100 * time.Millisecond):
			return
		}
	}
}

func TestPrompts(t *testing.T) {
	cs, _ := servetest.ConnectStdio(t, newWatcher().client(), nil, notesBin)
	res, err := cs.ListPrompts(callCtx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	args := make(map[string][]*mcp.PromptArgument)
	for _, p := range res.Prompts {
		args[p.Name] = p.Arguments
	}
	want := map[string][]*mcp.PromptArgument{
		"summarize":  {{Name: "name", Description: "the note to summarize", Required: true}},
		"brainstorm": {{Name: "topic", Description: "what to brainstorm about (default: new notes)"}},
	}
	if diff := cmp.Diff(want, args); diff != "" {
		t.Errorf("prompt arguments (-want +got):\n%s", diff)
	}

	tests := []struct {
		name string
		args map[string]string
		want string
	}{
		{"summarize", map[string]string{"name": "welcome"}, "Summarize the note \"welcome\" in one sentence.\n\nWelcome to the mcpvisor notes example server."},
		{"brainstorm", nil, "Brainstorm five ideas about new notes."},
		{"brainstorm", map[string]string{"topic": "gardening"}, "Brainstorm five ideas about gardening."},
	}
	for _, tt := range tests {
		res, err := cs.GetPrompt(callCtx(t), &mcp.GetPromptParams{Name: tt.name, Arguments: tt.args})
		if err != nil {
			t.Errorf("%s %v: %v", tt.name, tt.args, err)
			continue
		}
		want := []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: tt.want}}}
		if diff := cmp.Diff(want, res.Messages); diff != "" {
			t.Errorf("%s %v (-want +got):\n%s", tt.name, tt.args, diff)
		}
	}

	for _, args := range []map[string]string{nil, {"name": "missing"}} {
		_, err := cs.GetPrompt(callCtx(t), &mcp.GetPromptParams{Name: "summarize", Arguments: args})
		var werr *jsonrpc.Error
		if !errors.As(err, &werr) || werr.Code != jsonrpc.CodeInvalidParams {
			t.Errorf("summarize %v: got %v, want invalid params", args, err)
		}
	}
}

func TestComplete(t *testing.T) {
	cs, _ := servetest.ConnectStdio(t, newWatcher().client(), nil, notesBin)
	call(t, cs, "add_note", map[string]any{"name": "travel", "text": "pack"})
	tests := []struct {
		ref   *mcp.CompleteReference
		arg   mcp.CompleteParamsArgument
		wantV []string
	}{
		{&mcp.CompleteReference{Type: "ref/prompt", Name: "summarize"}, mcp.CompleteParamsArgument{Name: "name", Value: ""}, []string{"todo", "travel", "welcome"}},
		{&mcp.CompleteReference{Type: "ref/prompt", Name: "summarize"}, mcp.CompleteParamsArgument{Name: "name", Value: "t"}, []string{"todo", "travel"}},
		{&mcp.CompleteReference{Type: "ref/prompt", Name: "summarize"}, mcp.CompleteParamsArgument{Name: "name", Value: "w"}, []string{"welcome"}},
		{&mcp.CompleteReference{Type: "ref/resource", URI: "notes://note/{name}"}, mcp.CompleteParamsArgument{Name: "name", Value: "tr"}, []string{"travel"}},
		{&mcp.CompleteReference{Type: "ref/prompt", Name: "brainstorm"}, mcp.CompleteParamsArgument{Name: "topic", Value: "t"}, []string{}},
	}
	for _, tt := range tests {
		res, err := cs.Complete(callCtx(t), &mcp.CompleteParams{Ref: tt.ref, Argument: tt.arg})
		if err != nil {
			t.Errorf("complete %+v %+v: %v", tt.ref, tt.arg, err)
			continue
		}
		want := mcp.CompletionResultDetails{Values: tt.wantV, Total: len(tt.wantV)}
		if diff := cmp.Diff(want, res.Completion); diff != "" {
			t.Errorf("complete %+v %+v (-want +got):\n%s", tt.ref, tt.arg, diff)
		}
	}
}

// TestHTTPSharedNotes checks that HTTP sessions share one notebook, that a
// note added in one session reaches another as list_changed, and that
// sessions can be forgotten on SIGUSR1.
func TestHTTPSharedNotes(t *testing.T) {
	p := servetest.StartHTTP(t, notesBin, "-http", "127.0.0.1:0", "-forget-sessions-signal", "-tools-suffix", "7")
	if got, want := p.Lines()[0], fmt.Sprintf("notes server starting pid=%d", p.Cmd.Process.Pid); got != want {
		t.Errorf("first stderr line %q, want %q", got, want)
	}
	connect := func(w *watcher) *mcp.ClientSession {
		cs, err := w.client().Connect(callCtx(t), &mcp.StreamableClientTransport{Endpoint: p.URL}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	w1, w2 := newWatcher(), newWatcher()
	cs1, cs2 := connect(w1), connect(w2)

	wantText(t, call(t, cs1, "add_note", map[string]any{"name": "shared", "text": "one"}), false, "added note shared")
	w2.waitListChanged(t)
	if got := read(t, cs2, "notes://note/shared"); got != "one" {
		t.Errorf("shared note seen by the other session = %q", got)
	}
	wantText(t, call(t, cs2, "extra7", nil), false, "extra7")

	p.Signal(t, syscall.SIGUSR1)
	p.WaitLine(t, "forgot 2 sessions", waitTimeout)
	if _, err := cs1.ListResources(callCtx(t), nil); !errors.Is(err, mcp.ErrSessionMissing) {
		t.Errorf("list after SIGUSR1: got %v, want an error wrapping mcp.ErrSessionMissing", err)
	}
	// The notes outlive the sessions.
	cs3 := connect(newWatcher())
	if got := read(t, cs3, "notes://note/shared"); got != "one" {
		t.Errorf("shared note after SIGUSR1 = %q", got)
	}
	p.Stop(t)
}
