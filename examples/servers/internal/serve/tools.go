package serve

import (
	"context"
	"os"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ExtraToolPrefix is the name prefix of the tool that -tools-suffix adds.
const ExtraToolPrefix = "extra"

// ExtraInput is the input of the tool that -tools-suffix adds.
type ExtraInput struct {
	Value string `json:"value,omitempty" jsonschema:"any text; it is echoed after the tool's name"`
}

// AddExtraTool adds the tool "extra"+f.ToolsSuffix when -tools-suffix was
// given. Restarting a server with a different suffix changes its tool set,
// which is how tests check that a host re-lists and diffs tools on respawn.
func AddExtraTool(server *mcp.Server, f *Flags) {
	if f.ToolsSuffix == "" {
		return
	}
	name := ExtraToolPrefix + f.ToolsSuffix
	mcp.AddTool(server, &mcp.Tool{
		Name:        name,
		Description: "Present only when the server was started with -tools-suffix " + f.ToolsSuffix + "; returns its own name followed by value.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in ExtraInput) (*mcp.CallToolResult, any, error) {
		text := name
		if in.Value != "" {
			text += " " + in.Value
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
	})
}

// AddPIDTool adds the read-only tool "pid", which returns the process id as
// text so a test can tell that a host respawned the server.
func AddPIDTool(server *mcp.Server) {
	server.AddTool(&mcp.Tool{
		Name:        "pid",
		Description: "Returns the server's process id as text.",
		InputSchema: map[string]any{"type": "object"},
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strconv.Itoa(os.Getpid())}}}, nil
	})
}
