// Command mcpgo is a stdio MCP server written with the second Go SDK,
// github.com/mark3labs/mcp-go, whose request decoding uses encoding/json
// and so matches JSON keys case-insensitively. The hardening tests put it
// behind mcpvisor with its tool "danger" hidden and try to reach that
// tool through a case-variant key.
//
// Tools: "safe" answers "safe ran"; "danger" answers "danger ran" and
// appends a line to the file named by $MCPGO_DANGER_LOG, so a test can
// tell it ran even when the answer never reaches it.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

func main() {
	s := server.NewMCPServer("mcpgo", "1.0.0", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("safe", mcp.WithDescription("Answers \"safe ran\".")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("safe ran"), nil
		})
	s.AddTool(mcp.NewTool("danger", mcp.WithDescription("Must stay hidden behind mcpvisor.")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if path := os.Getenv("MCPGO_DANGER_LOG"); path != "" {
				f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
				if err == nil {
					fmt.Fprintln(f, "danger ran")
					f.Close()
				}
			}
			return mcp.NewToolResultText("danger ran"), nil
		})
	if err := server.ServeStdio(s); err != nil {
		fmt.Fprintln(os.Stderr, "mcpgo:", err)
		os.Exit(1)
	}
}
