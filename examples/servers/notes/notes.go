package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/examples/servers/internal/serve"
)

// URIs of the notes resources.
const (
	listURI       = "notes://list"
	noteURIPrefix = "notes://note/"
	noteTemplate  = noteURIPrefix + "{name}"
)

// maxNameLen bounds note names so every note URI stays short.
const maxNameLen = 64

// maxCompletions is the most values a completion may return (MCP spec).
const maxCompletions = 100

// initialNotes are the notes a fresh server starts with.
var initialNotes = map[string]string{
	"welcome": "Welcome to the mcpvisor notes example server.",
	"todo":    "- read the welcome note\n- add a note of your own",
}

// notebook holds the notes and keeps the server's resource list in step with
// them.
type notebook struct {
	server *mcp.Server

	// mu guards notes. It is held across AddResource and RemoveResources so
	// that the resource list never disagrees with notes; those calls only
	// take the server's own lock, never one of ours, so the order is fixed.
	mu    sync.Mutex
	notes map[string]string
}

func newServer(f *serve.Flags) *mcp.Server {
	nb := &notebook{notes: make(map[string]string)}
	nb.server = mcp.NewServer(&mcp.Implementation{Name: "notes", Version: "0.1.0"}, &mcp.ServerOptions{
		CompletionHandler:  nb.complete,
		SubscribeHandler:   nb.subscribe,
		UnsubscribeHandler: nb.unsubscribe,
	})
	s := nb.server

	s.AddResource(&mcp.Resource{
		URI:         listURI,
		Name:        "list",
		Title:       "All notes",
		Description: "The names of all notes, one per line.",
		MIMEType:    "text/plain",
	}, nb.readList)
	s.AddResourceTemplate(&mcp.ResourceTemplate{
		URITemplate: noteTemplate,
		Name:        "note",
		Title:       "A note",
		Description: "The text of the note called name.",
		MIMEType:    "text/plain",
	}, nb.readNote)
	for name, text := range initialNotes {
		nb.put(name, text)
	}

	mcp.AddTool(s, &mcp.Tool{
		Name:        "add_note",
		Description: "Creates the note name with text, or replaces its text.",
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true},
	}, nb.addNote)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "delete_note",
		Description: "Deletes the note name.",
	}, nb.deleteNote)
	serve.AddPIDTool(s)
	serve.AddExtraTool(s, f)

	s.AddPrompt(&mcp.Prompt{
		Name:        "summarize",
		Title:       "Summarize a note",
		Description: "Asks for a one-sentence summary of a note.",
		Arguments: []*mcp.PromptArgument{
			{Name: "name", Description: "the note to summarize", Required: true},
		},
	}, nb.summarize)
	s.AddPrompt(&mcp.Prompt{
		Name:        "brainstorm",
		Title:       "Brainstorm",
		Description: "Asks for ideas for new notes.",
		Arguments: []*mcp.PromptArgument{
			{Name: "topic", Description: "what to brainstorm about (default: new notes)"},
		},
	}, brainstorm)
	return s
}

func noteURI(name string) string { return noteURIPrefix + name }

func noteResource(name string) *mcp.Resource {
	return &mcp.Resource{URI: noteURI(name), Name: name, MIMEType: "text/plain"}
}

func validName(name string) error {
	if name == "" || len(name) > maxNameLen {
		return fmt.Errorf("note name must be 1 to %d characters long", maxNameLen)
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-'
		if !ok {
			return fmt.Errorf("note name %q: only letters, digits, '_', '.' and '-' are allowed", name)
		}
	}
	return nil
}

// put stores a note and reports whether it is new. A new note becomes a
// resource, which makes the server send resources/list_changed.
func (nb *notebook) put(name, text string) (created bool) {
	nb.mu.Lock()
	defer nb.mu.Unlock()
	_, existed := nb.notes[name]
	nb.notes[name] = text
	if !existed {
		nb.server.AddResource(noteResource(name), nb.readNote)
	}
	return !existed
}

// remove deletes a note and reports whether there was one.
func (nb *notebook) remove(name string) bool {
	nb.mu.Lock()
	defer nb.mu.Unlock()
	if _, ok := nb.notes[name]; !ok {
		return false
	}
	delete(nb.notes, name)
	nb.server.RemoveResources(noteURI(name))
	return true
}

func (nb *notebook) get(name string) (string, bool) {
	nb.mu.Lock()
	defer nb.mu.Unlock()
	text, ok := nb.notes[name]
	return text, ok
}

func (nb *notebook) names() []string {
	nb.mu.Lock()
	defer nb.mu.Unlock()
	return slices.Sorted(maps.Keys(nb.notes))
}

// updated tells subscribers that the resources at uris changed.
func (nb *notebook) updated(ctx context.Context, uris ...string) {
	for _, uri := range uris {
		nb.server.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri})
	}
}

func (nb *notebook) readList(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	var b strings.Builder
	for _, name := range nb.names() {
		b.WriteString(name)
		b.WriteByte('\n')
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{
		{URI: listURI, MIMEType: "text/plain", Text: b.String()},
	}}, nil
}

func (nb *notebook) readNote(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	name, ok := strings.CutPrefix(uri, noteURIPrefix)
	if !ok {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	text, ok := nb.get(name)
	if !ok {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{
		{URI: uri, MIMEType: "text/plain", Text: text},
	}}, nil
}

type addNoteInput struct {
	Name string `json:"name" jsonschema:"the note's name: 1 to 64 of A-Z a-z 0-9 _ . -"`
	Text string `json:"text" jsonschema:"the note's text"`
}

func (nb *notebook) addNote(ctx context.Context, _ *mcp.CallToolRequest, in addNoteInput) (*mcp.CallToolResult, any, error) {
	if err := validName(in.Name); err != nil {
		return nil, nil, err
	}
	if nb.put(in.Name, in.Text) {
		nb.updated(ctx, listURI, noteURI(in.Name))
		return textResult("added note " + in.Name), nil, nil
	}
	nb.updated(ctx, noteURI(in.Name))
	return textResult("updated note " + in.Name), nil, nil
}

type deleteNoteInput struct {
	Name string `json:"name" jsonschema:"the note to delete"`
}

func (nb *notebook) deleteNote(ctx context.Context, _ *mcp.CallToolRequest, in deleteNoteInput) (*mcp.CallToolResult, any, error) {
	if !nb.remove(in.Name) {
		return nil, nil, fmt.Errorf("no note named %q", in.Name)
	}
	nb.updated(ctx, listURI, noteURI(in.Name))
	return textResult("deleted note " + in.Name), nil, nil
}

func textResult(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func (nb *notebook) summarize(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	name := req.Params.Arguments["name"]
	if name == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: `missing required argument "name"`}
	}
	text, ok := nb.get(name)
	if !ok {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("no note named %q", name)}
	}
	return &mcp.GetPromptResult{
		Description: "Summarize the note " + name,
		Messages: []*mcp.PromptMessage{{
			Role:    "user",
			Content: &mcp.TextContent{Text: fmt.Sprintf("Summarize the note %q in one sentence.\n\n%s", name, text)},
		}},
	}, nil
}

func brainstorm(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	topic := req.Params.Arguments["topic"]
	if topic == "" {
		topic = "new notes"
	}
	return &mcp.GetPromptResult{
		Description: "Brainstorm about " + topic,
		Messages: []*mcp.PromptMessage{{
			Role:    "user",
			Content: &mcp.TextContent{Text: "Brainstorm five ideas about " + topic + "."},
		}},
	}, nil
}

// complete suggests note names, in order, for the arguments that take one.
func (nb *notebook) complete(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	ref, arg := req.Params.Ref, req.Params.Argument
	takesName := ref != nil && arg.Name == "name" &&
		(ref.Type == "ref/prompt" && ref.Name == "summarize" || ref.Type == "ref/resource" && ref.URI == noteTemplate)
	values := []string{} // "values" is required, so never null
	if takesName {
		for _, name := range nb.names() {
			if strings.HasPrefix(name, arg.Value) {
				values = append(values, name)
			}
		}
	}
	res := &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: values, Total: len(values)}}
	if len(values) > maxCompletions {
		res.Completion.Values = values[:maxCompletions]
		res.Completion.HasMore = true
	}
	return res, nil
}

// subscribe accepts the notes URIs, including notes that do not exist yet,
// so a client can watch for a note being created.
func (nb *notebook) subscribe(_ context.Context, req *mcp.SubscribeRequest) error {
	uri := req.Params.URI
	if uri == listURI {
		return nil
	}
	if name, ok := strings.CutPrefix(uri, noteURIPrefix); ok && validName(name) == nil {
		return nil
	}
	return mcp.ResourceNotFoundError(uri)
}

func (nb *notebook) unsubscribe(context.Context, *mcp.UnsubscribeRequest) error { return nil }
