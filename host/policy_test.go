//go:build unix

package host_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host"
	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// TestPolicyLocalSubject: over an in-memory transport (an embedding
// program's client) and through Host.CallTool, the caller is the local
// user named by stdio_subject. Its lists of tools, prompts, resources and
// templates show what its policy allows; a prompt, a resource or a
// completion outside it is refused with recovery.CodeDenied; a library
// call too.
func TestPolicyLocalSubject(t *testing.T) {
	src := fmt.Sprintf(`
host {
  stdio_subject = "embedder"
}
server "notes" {
  command = %q
}
policy "me" {
  subjects  = ["local"]
  tools     = ["notes__*"]
  deny      = ["*__delete_*"]
  prompts   = ["notes__summarize"]
  resources = ["notes://note/*"]
}
policy "not-me" {
  subjects = ["sub:someone-else"]
  tools    = ["*"]
}
`, bins["notes"])
	h, cs := startHost(t, src, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	if slices.Contains(names, "notes__delete_note") || !slices.Contains(names, "notes__add_note") {
		t.Errorf("tools/list %v; want notes__add_note and no notes__delete_note", names)
	}
	prompts, err := cs.ListPrompts(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(prompts.Prompts) != 1 || prompts.Prompts[0].Name != "notes__summarize" {
		t.Errorf("prompts/list %+v; want notes__summarize only", prompts.Prompts)
	}
	resources, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resources.Resources {
		if !strings.HasPrefix(r.URI, "notes://note/") {
			t.Errorf("resources/list has %s, which no policy allows", r.URI)
		}
	}
	if len(resources.Resources) == 0 {
		t.Error("resources/list is empty; the notes are allowed")
	}
	templates, err := cs.ListResourceTemplates(ctx, nil)
	if err != nil || len(templates.ResourceTemplates) != 1 {
		t.Errorf("resources/templates/list %+v %v; want the note template", templates, err)
	}

	denied := func(what string, err error, rule string) {
		t.Helper()
		var we *jsonrpc.Error
		if !errors.As(err, &we) || we.Code != recovery.CodeDenied || !strings.Contains(we.Message, rule) || !strings.Contains(we.Message, `the local user "embedder"`) {
			t.Errorf("%s: %v; want code %d naming %q and the local user", what, err, recovery.CodeDenied, rule)
		}
	}
	_, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "notes://list"})
	denied("resources/read notes://list", err, `no policy allows resource "notes://list"`)
	_, err = cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "notes__brainstorm"})
	denied("prompts/get notes__brainstorm", err, `no policy allows prompt "notes__brainstorm"`)
	_, err = cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "notes__brainstorm"}, Argument: mcp.CompleteParamsArgument{Name: "topic", Value: "x"}})
	denied("completion of notes__brainstorm", err, `no policy allows prompt "notes__brainstorm"`)
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "notes__delete_note", Arguments: map[string]any{"name": "x"}})
	denied("tools/call notes__delete_note", err, `policy "me" deny "*__delete_*"`)
	_, err = h.CallTool(ctx, "notes__delete_note", map[string]any{"name": "x"})
	denied("Host.CallTool notes__delete_note", err, `policy "me" deny "*__delete_*"`)

	// What the policy allows works.
	if _, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "notes__summarize", Arguments: map[string]string{"name": "welcome"}}); err != nil {
		t.Errorf("prompts/get notes__summarize: %v", err)
	}
	if res, err := h.CallTool(ctx, "notes__add_note", map[string]any{"name": "x", "text": "y"}); err != nil || res.IsError {
		t.Errorf("Host.CallTool notes__add_note: %v %+v", err, res)
	}
}

// TestReloadPolicies: Reload puts changed policies in force without
// restarting a server, reports it, and a reload with the same policies
// reports no change.
func TestReloadPolicies(t *testing.T) {
	srcFor := func(tools string) string {
		return fmt.Sprintf(`
server "echo" {
  command = %q
}
policy "me" {
  subjects = ["local"]
  tools    = [%s]
}
`, bins["echo"], tools)
	}
	h := readyHost(t, srcFor(`"echo__echo"`))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := h.CallTool(ctx, "echo__add", map[string]any{"a": 1, "b": 2}); err == nil {
		t.Fatal("echo__add allowed before the reload")
	}
	reload := func(src string) host.ReloadResult {
		t.Helper()
		cfg, err := config.Parse([]byte(src), h.Config().Filename) // the same directory: the same server
		if err != nil {
			t.Fatal(err)
		}
		res, err := h.Reload(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := reload(srcFor(`"echo__add"`))
	if !res.PoliciesChanged || len(res.Restarted)+len(res.Added)+len(res.Removed) != 0 || res.HostChanged {
		t.Errorf("reload with a changed policy: %+v; want PoliciesChanged and no server touched", res)
	}
	if r, err := h.CallTool(ctx, "echo__add", map[string]any{"a": 1, "b": 2}); err != nil || r.IsError {
		t.Errorf("echo__add after the reload: %v %+v", err, r)
	}
	if _, err := h.CallTool(ctx, "echo__echo", map[string]any{"text": "x"}); err == nil {
		t.Error("echo__echo still allowed after the reload")
	}
	if res := reload(srcFor(`"echo__add"`)); res.PoliciesChanged {
		t.Errorf("reload with the same policies: %+v; want no PoliciesChanged", res)
	}
}
