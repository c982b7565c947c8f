package gateway

// Tool search for agents (docs/discovery.md, docs/design.md §21). With a
// server in search mode, tools/list shows two meta-tools of mcpvisor's own
// and the pinned tools instead of every tool: mcpvisor__search_tools finds
// tools by what they do (discovery.Index), mcpvisor__call_tool calls one by
// name. The discovery middleware is the outermost receiving middleware, so
//
//   - tools/list is first filtered by the caller's policies (policies), then
//     by the discovery settings here;
//   - a search shows only what the caller's policies let it see;
//   - mcpvisor__call_tool becomes the tools/call of the tool it names and
//     goes down the same middleware chain as a direct call — the policies
//     decide it (rate limits, audit), the dormant tools' middleware reaches
//     a parked server, the tool's handler reaches its supervisor through
//     the Backend — so it has every rule a direct call has (§3, §6, §19).
//
// Every tool stays registered on the go-sdk server: a client that ignores
// the meta-tools can call any tool by its exposed name, as before.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/discovery"
	"github.com/mcpvisor/mcpvisor/host/internal/policy"
	"github.com/mcpvisor/mcpvisor/host/internal/registry"
)

// searchTool and callTool are the meta-tools as tools/list shows them.
var (
	searchTool = &mcp.Tool{
		Name:  discovery.SearchToolName,
		Title: "Search tools",
		Description: "Find the tools of the MCP servers behind mcpvisor by what you want to do, " +
			"in plain words (\"list the open issues of a repository\", \"save text to a file\"). " +
			"Returns the best matching tools with their names, descriptions and full input schemas; " +
			"call one with mcpvisor__call_tool.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"query":{"type":"string","description":"What you want to do, in plain words."},` +
			`"server":{"type":"string","description":"Only search the tools of this server (its name in the host's configuration)."},` +
			`"limit":{"type":"integer","minimum":1,"maximum":50,"description":"How many tools to return (default 5)."}},` +
			`"required":["query"]}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(false)},
	}
	callTool = &mcp.Tool{
		Name:  discovery.CallToolName,
		Title: "Call a tool",
		Description: "Call a tool found with mcpvisor__search_tools: name is the tool's name as the search " +
			"returned it, arguments its arguments as an object matching its input schema.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"name":{"type":"string","description":"The tool's name, as mcpvisor__search_tools returned it."},` +
			`"arguments":{"type":"object","description":"The tool's arguments, matching its input schema."}},` +
			`"required":["name"]}`),
	}
)

// discoverySettings are the discovery settings in force; nil when every
// tool is listed.
func (g *Gateway) discoverySettings() *discovery.Settings {
	if g.opts.Discovery == nil {
		return nil
	}
	return g.opts.Discovery()
}

// EnableSearch builds the tool index from the registry's tools, once, and
// keeps it following the registry from then on (Apply). The host calls it
// when a configuration turns search mode on. Its error means search is
// unavailable: the meta-tools say so.
func (g *Gateway) EnableSearch() error {
	g.searchMu.Lock()
	defer g.searchMu.Unlock()
	if g.search != nil || g.registry == nil {
		return nil
	}
	idx, err := discovery.NewIndex()
	if err != nil {
		return err
	}
	// The snapshot is stored before the registry hands its change to
	// Apply, so it holds every change Apply skipped while the index did
	// not exist; a change Apply hands on after this is applied again on
	// top of it, which is harmless (an add replaces, a remove removes).
	var add []discovery.Tool
	for _, e := range g.registry.Tools() {
		add = append(add, discovery.Tool{Tool: e.Tool, Server: e.Server, Original: e.Original})
	}
	if err := idx.Update(nil, add); err != nil {
		_ = idx.Close()
		return err
	}
	g.search = idx
	return nil
}

// indexChanges applies the registry's tool changes to the index, if there
// is one. Called from Apply, in the registry's order.
func (g *Gateway) indexChanges(ch registry.Changes, rejected map[string]bool) {
	g.searchMu.Lock()
	defer g.searchMu.Unlock()
	if g.search == nil || (len(ch.AddTools) == 0 && len(ch.RemoveTools) == 0) {
		return
	}
	remove := slices.Clone(ch.RemoveTools)
	var add []discovery.Tool
	for _, e := range ch.AddTools {
		if rejected[e.Tool.Name] {
			remove = append(remove, e.Tool.Name) // not exposed: not found either
			continue
		}
		add = append(add, discovery.Tool{Tool: e.Tool, Server: e.Server, Original: e.Original})
	}
	if err := g.search.Update(remove, add); err != nil {
		g.logger.Error("tool index not updated; search results may be stale", "error", err)
	}
}

// searchIndex is the tool index, nil before EnableSearch.
func (g *Gateway) searchIndex() *discovery.Index {
	g.searchMu.Lock()
	defer g.searchMu.Unlock()
	return g.search
}

// Close releases what the gateway holds beyond its sessions (the tool
// index).
func (g *Gateway) Close() error {
	g.searchMu.Lock()
	defer g.searchMu.Unlock()
	if g.search == nil {
		return nil
	}
	err := g.search.Close()
	g.search = nil
	return err
}

// discoveryTools is the receiving middleware of search mode.
func (g *Gateway) discoveryTools(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		s := g.discoverySettings()
		if s == nil {
			return next(ctx, method, req)
		}
		switch method {
		case "tools/list":
			res, err := next(ctx, method, req)
			if l, ok := res.(*mcp.ListToolsResult); ok && err == nil {
				g.listForDiscovery(s, req, l)
			}
			return res, err
		case "tools/call":
			r, ok := req.(*mcp.CallToolRequest)
			if !ok || r.Params == nil {
				break
			}
			switch r.Params.Name {
			case discovery.SearchToolName:
				return g.searchTools(ctx, r)
			case discovery.CallToolName:
				inner, bad := callToolRequest(r)
				if bad != nil {
					return bad, nil
				}
				if _, _, ok := g.route(inner.Params.Name); !ok {
					return toolError("no tool is named %q; find tools with %s (names are as it returns them)", inner.Params.Name, discovery.SearchToolName), nil
				}
				// The tool's own call, down the whole chain (the design
				// note above).
				return next(ctx, method, inner)
			}
		}
		return next(ctx, method, req)
	}
}

// listForDiscovery keeps in l the tools the settings list (a pinned tool,
// a tool of a server in list mode) and puts the meta-tools first, on the
// first page.
func (g *Gateway) listForDiscovery(s *discovery.Settings, req mcp.Request, l *mcp.ListToolsResult) {
	l.Tools = slices.DeleteFunc(l.Tools, func(t *mcp.Tool) bool {
		server, original, ok := g.route(t.Name)
		return ok && !s.Listed(server, t.Name, original)
	})
	if p, ok := req.GetParams().(*mcp.ListToolsParams); ok && p != nil && p.Cursor != "" {
		return
	}
	l.Tools = append([]*mcp.Tool{searchTool, callTool}, l.Tools...)
}

// route is the server and upstream name of an exposed tool name: live,
// dormant (its server parked) or of a server that never listed its tools.
func (g *Gateway) route(name string) (server, original string, ok bool) {
	if g.registry == nil {
		return "", "", false
	}
	if e, ok := g.registry.LookupTool(name); ok {
		return e.Server, e.Original, true
	}
	if e, ok := g.registry.LookupDormant(name); ok {
		return e.Server, e.Original, true
	}
	if e, ok := g.registry.LookupUnlisted(name); ok {
		return e.Server, e.Original, true
	}
	return "", "", false
}

// searchArgs are mcpvisor__search_tools' arguments.
type searchArgs struct {
	Query  string `json:"query"`
	Server string `json:"server"`
	Limit  int    `json:"limit"`
}

// foundTool is one tool of a search's answer.
type foundTool struct {
	Name        string `json:"name"`
	Server      string `json:"server"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	InputSchema any    `json:"inputSchema"`
}

// searchTools answers mcpvisor__search_tools: the best matches the caller
// may call. Bad arguments are a tool error the model can correct, as the
// MCP specification asks of input errors.
func (g *Gateway) searchTools(ctx context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var a searchArgs
	if len(r.Params.Arguments) > 0 {
		if err := json.Unmarshal(r.Params.Arguments, &a); err != nil {
			return toolError("the arguments of %s are not valid: %v; pass {\"query\": \"what you want to do\"}", discovery.SearchToolName, err), nil
		}
	}
	if a.Limit < 0 || a.Limit > discovery.MaxLimit {
		return toolError("limit is %d; it must be between 1 and %d", a.Limit, discovery.MaxLimit), nil
	}
	idx := g.searchIndex()
	if idx == nil {
		return toolError("tool search is not available on this host (its index could not be built; see the host's log); list the tools instead"), nil
	}
	var visible func(string) bool
	if e := g.policyEngine(); e != nil {
		ok := e.Visible(subjectOf(ctx, r, e), policy.Tool)
		visible = func(name string) bool { return ok(name, g.aliases(policy.Tool, name)...) }
	}
	hits, err := idx.Search(ctx, discovery.Query{Text: a.Query, Server: a.Server, Limit: a.Limit}, visible)
	if errors.Is(err, discovery.ErrEmptyQuery) {
		return toolError("query is empty; say what you want to do, such as \"read a file\""), nil
	}
	if err != nil {
		return nil, err
	}
	out := struct {
		Tools []foundTool `json:"tools"`
	}{Tools: []foundTool{}}
	for _, h := range hits {
		out.Tools = append(out.Tools, foundTool{
			Name: h.Tool.Name, Server: h.Server, Title: h.Tool.Title,
			Description: h.Tool.Description, InputSchema: h.Tool.InputSchema,
		})
	}
	text, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: string(text)}},
		StructuredContent: json.RawMessage(text),
	}, nil
}

// callToolRequest is the tools/call that a mcpvisor__call_tool request
// stands for: the same session, request extras and _meta (a progress
// token, a 2026-07-28 client's request state and input responses), the
// named tool and its arguments. Bad arguments give a tool error instead.
func callToolRequest(r *mcp.CallToolRequest) (*mcp.CallToolRequest, *mcp.CallToolResult) {
	var a struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(r.Params.Arguments, &a); err != nil || a.Name == "" {
		return nil, toolError("%s needs {\"name\": \"<tool>\", \"arguments\": {…}} with a tool name from %s", discovery.CallToolName, discovery.SearchToolName)
	}
	if a.Name == discovery.SearchToolName || a.Name == discovery.CallToolName {
		return nil, toolError("%s calls the servers' tools; call %s directly", discovery.CallToolName, a.Name)
	}
	if len(a.Arguments) > 0 && string(a.Arguments) != "null" && a.Arguments[0] != '{' {
		return nil, toolError("arguments of %s must be an object", a.Name)
	}
	p := *r.Params
	p.Name = a.Name
	p.Arguments = a.Arguments
	return &mcp.CallToolRequest{Session: r.Session, Params: &p, Extra: r.Extra}, nil
}

// toolError is a tool result with isError set and the message as text.
func toolError(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}},
	}
}
