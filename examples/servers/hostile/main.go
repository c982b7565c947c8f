// Command hostile is an example MCP server that tries to escape its
// sandbox, for mcpvisor's containment tests (docs/sandbox.md, design
// §18): it is the hostile server author's code. Each escape is a named
// probe; a probe reports "escaped: <what it got>" when the escape worked
// and "refused: <the kernel's or mcpvisor's error>" when it did not, so a
// test reads an outcome, never a guess.
//
// Tools (arguments are JSON object properties; * marks required ones):
//
//	probe {name*: string, arg: string}  runs one probe (the list is
//	                                    "probes"); the result text is the
//	                                    outcome line
//	probes {}                           the probe names, one a line
//	pid {}                              the process id as text
//
// Probes live in one file per concern (door.go, view.go, seccomp.go, …)
// and register themselves with register from an init function.
//
// Flags are those of every example server (examples/servers/README.md).
package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/examples/servers/internal/serve"
)

// A probe tries one escape with arg (its meaning is the probe's own). It
// returns what it got when the escape worked, and an error when it did
// not; the error is the refusal, reported as it was.
type probe func(ctx context.Context, arg string) (got string, err error)

var (
	probesMu sync.Mutex
	probes   = map[string]probe{}
)

// register adds a probe under name; a second one under the same name is
// a programming error.
func register(name string, p probe) {
	probesMu.Lock()
	defer probesMu.Unlock()
	if _, dup := probes[name]; dup {
		panic("hostile: probe " + name + " registered twice")
	}
	probes[name] = p
}

func main() {
	serve.Main("hostile", newServer)
}

func newServer(*serve.Flags) *mcp.Server {
	server := mcp.NewServer(&mcp.Implementation{Name: "hostile", Version: "0.1.0"}, nil)
	mcp.AddTool(server, &mcp.Tool{
		Name:        "probe",
		Description: "Runs one escape probe; the result is \"escaped: …\" or \"refused: …\".",
	}, runProbe)
	mcp.AddTool(server, &mcp.Tool{
		Name:        "probes",
		Description: "The probe names, one a line.",
	}, listProbes)
	serve.AddPIDTool(server)
	return server
}

type probeArgs struct {
	Name string `json:"name" jsonschema:"the probe to run (see the probes tool)"`
	Arg  string `json:"arg,omitempty" jsonschema:"the probe's argument, if it takes one"`
}

func runProbe(ctx context.Context, _ *mcp.CallToolRequest, args probeArgs) (*mcp.CallToolResult, any, error) {
	probesMu.Lock()
	p, ok := probes[args.Name]
	probesMu.Unlock()
	if !ok {
		return text(true, fmt.Sprintf("unknown probe %q", args.Name)), nil, nil
	}
	got, err := p(ctx, args.Arg)
	if err != nil {
		return text(false, "refused: "+err.Error()), nil, nil
	}
	return text(false, "escaped: "+got), nil, nil
}

func listProbes(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
	probesMu.Lock()
	names := make([]string, 0, len(probes))
	for n := range probes {
		names = append(names, n)
	}
	probesMu.Unlock()
	slices.Sort(names)
	return text(false, strings.Join(names, "\n")), nil, nil
}

func text(isError bool, s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: isError, Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}
