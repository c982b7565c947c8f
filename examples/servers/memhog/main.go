// Command memhog is an example MCP server that uses up resources on
// request, for the tests of mcpvisor's limits block (docs/sandbox.md
// "Limits"): a server over its memory limit, a fork loop, a descriptor
// leak.
//
// Tools (arguments are JSON object properties; * marks required ones):
//
//	allocate    {mib*: integer}  allocates mib MiB, writes to every page, and
//	                             keeps it; then says "holding N MiB" (N: all
//	                             it holds)
//	fork        {max: integer}   starts `sleep 3600` children until starting
//	                             one fails or max (default 1000) run, then
//	                             kills them; says "started N processes;
//	                             then: ERROR"
//	open_files  {max: integer}   opens /dev/null until that fails or max
//	                             (default 100000) are open; says "opened N
//	                             files; then: ERROR", then closes them
//	pid         {}               the process id as text (read-only)
//
// Flags are the example servers' (see examples/servers/README.md). With
// MEMHOG_ALLOCATE_AT_START=N in its environment it allocates N MiB as it
// starts, before it serves: a server over its memory limit on every start.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/examples/servers/internal/serve"
)

// Bounds on one call's arguments, so that a mistyped one does not take
// the machine rather than the server's limit.
const (
	maxAllocateMiB = 4096
	maxForks       = 10000
	maxOpenFiles   = 1 << 20
)

func main() {
	serve.Main("memhog", newServer)
}

// held is the memory allocate keeps, so that it stays resident.
var (
	heldMu sync.Mutex
	held   [][]byte
)

type allocateArgs struct {
	MiB int `json:"mib" jsonschema:"MiB to allocate and touch"`
}

type countArgs struct {
	Max int `json:"max,omitempty" jsonschema:"stop after this many"`
}

func newServer(f *serve.Flags) *mcp.Server {
	if n, err := strconv.Atoi(os.Getenv("MEMHOG_ALLOCATE_AT_START")); err == nil && n > 0 {
		allocate(context.Background(), nil, allocateArgs{MiB: n})
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "memhog", Version: "0.1.0"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "allocate", Description: "Allocates and touches mib MiB and keeps it."}, allocate)
	mcp.AddTool(server, &mcp.Tool{Name: "fork", Description: "Starts sleeping child processes until that fails."}, fork)
	mcp.AddTool(server, &mcp.Tool{Name: "open_files", Description: "Opens files until that fails, then closes them."}, openFiles)
	serve.AddPIDTool(server)
	return server
}

func text(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

func allocate(ctx context.Context, req *mcp.CallToolRequest, a allocateArgs) (*mcp.CallToolResult, any, error) {
	if a.MiB < 1 || a.MiB > maxAllocateMiB {
		return nil, nil, fmt.Errorf("mib must be 1 to %d", maxAllocateMiB)
	}
	heldMu.Lock()
	defer heldMu.Unlock()
	for range a.MiB {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		held = append(held, b)
	}
	return text("holding %d MiB", len(held)), nil, nil
}

func fork(ctx context.Context, req *mcp.CallToolRequest, a countArgs) (*mcp.CallToolResult, any, error) {
	limit := a.Max
	if limit <= 0 || limit > maxForks {
		limit = 1000
	}
	var started []*exec.Cmd
	// Killed again: at the processes limit the server itself could not
	// start a thread.
	defer func() {
		for _, c := range started {
			c.Process.Kill()
			c.Wait()
		}
	}()
	for len(started) < limit {
		cmd := exec.Command("sleep", "3600")
		if err := cmd.Start(); err != nil {
			return text("started %d processes; then: %v", len(started), err), nil, nil
		}
		started = append(started, cmd)
	}
	return text("started %d processes; then: reached max", len(started)), nil, nil
}

func openFiles(ctx context.Context, req *mcp.CallToolRequest, a countArgs) (*mcp.CallToolResult, any, error) {
	limit := a.Max
	if limit <= 0 || limit > maxOpenFiles {
		limit = 100000
	}
	var opened []*os.File
	defer func() {
		for _, f := range opened {
			f.Close()
		}
	}()
	for len(opened) < limit {
		f, err := os.Open(os.DevNull)
		if err != nil {
			return text("opened %d files; then: %v", len(opened), err), nil, nil
		}
		opened = append(opened, f)
	}
	return text("opened %d files; then: reached max", len(opened)), nil, nil
}
