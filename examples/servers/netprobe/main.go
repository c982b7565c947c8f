// Command netprobe is an example MCP server that tries to reach the
// network, for mcpvisor's sandbox tests (docs/sandbox.md): under
// network = "none" or a connect list, its dial fails with the kernel's
// error, which the tool reports.
//
// Tools (arguments are JSON object properties; * marks required ones):
//
//	dial {address*: string}  opens a TCP connection to address (host:port)
//	                         and closes it: "connected to <address>", or a
//	                         result with isError: true and the dial's error
//	pid  {}                  the process id as text (read-only)
//
// Flags are those of every example server (examples/servers/README.md).
package main

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/examples/servers/internal/serve"
)

// dialTimeout bounds one dial: a filtered address does not hold the call.
const dialTimeout = 5 * time.Second

func main() {
	serve.Main("netprobe", newServer)
}

func newServer(*serve.Flags) *mcp.Server {
	server := mcp.NewServer(&mcp.Implementation{Name: "netprobe", Version: "0.1.0"}, nil)
	mcp.AddTool(server, &mcp.Tool{
		Name:        "dial",
		Description: "Opens a TCP connection to address (host:port) and closes it; reports the error if it cannot.",
	}, dial)
	serve.AddPIDTool(server)
	return server
}

type dialArgs struct {
	Address string `json:"address" jsonschema:"host:port to connect to"`
}

func dial(ctx context.Context, _ *mcp.CallToolRequest, args dialArgs) (*mcp.CallToolResult, any, error) {
	d := net.Dialer{Timeout: dialTimeout}
	c, err := d.DialContext(ctx, "tcp", args.Address)
	if err != nil {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, nil, nil
	}
	c.Close()
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("connected to %s", args.Address)}}}, nil, nil
}
