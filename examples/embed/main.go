// Command embed shows mcpvisor used as a library: it builds a host from Go
// structs (no HCL file), runs the echo example server under supervision,
// calls a tool, prints the result and the server's status, and shuts down.
//
//	make build && go run ./examples/embed -echo ./bin/echo
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host"
	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/upstream"
)

func main() {
	echo := flag.String("echo", "./bin/echo", "path to the echo example server")
	flag.Parse()
	if err := run(*echo); err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
}

func run(echoPath string) error {
	cfg := &config.Config{Servers: []*config.Server{{
		Name:    "echo",
		Prefix:  "echo",
		Command: echoPath,
	}}}
	cfg.ApplyDefaults()

	logger := hclog.New(&hclog.LoggerOptions{Name: "embed", Level: hclog.Warn, Output: os.Stderr})
	h, err := host.New(cfg,
		host.WithLogger(logger),
		host.WithStatusHandler(func(st upstream.Status) {
			fmt.Printf("event: server %s is %s (generation %d)\n", st.Name, st.State, st.Generation)
		}),
	)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Start(ctx); err != nil {
		return err
	}
	defer h.Close(context.Background())
	if err := h.WaitSettled(ctx); err != nil {
		return err
	}

	res, err := h.CallTool(ctx, "echo__echo", map[string]any{"text": "hello from an embedding program"})
	if err != nil {
		return err
	}
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			fmt.Println("result:", t.Text)
		}
	}
	for _, st := range h.Status() {
		fmt.Printf("status: %s %s, %d tools\n", st.Name, st.State, st.Tools)
	}
	return nil
}
