// Command embed shows mcpvisor used as a library: it builds a host from Go
// structs (no HCL file), runs the echo example server under supervision,
// calls a tool in-process, serves the host over streamable HTTP on a
// loopback port with a middleware of its own, calls the same tool there as
// an MCP client would, prints the results and the server's status, and
// shuts down.
//
//	make build && go run ./examples/embed -echo ./bin/echo
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host"
	"github.com/mcpvisor/mcpvisor/host/config"
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

	// A middleware of the embedding program sees every HTTP request the
	// host serves, after the host's own Host/Origin and token checks.
	var requests atomic.Int64
	countRequests := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			requests.Add(1)
			next.ServeHTTP(w, r)
		})
	}

	logger := hclog.New(&hclog.LoggerOptions{Name: "embed", Level: hclog.Warn, Output: os.Stderr})
	h, err := host.New(cfg,
		host.WithLogger(logger),
		host.WithMiddleware(countRequests),
		host.WithStatusHandler(func(st host.ServerStatus) {
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

	// In-process: no MCP client, no network.
	res, err := h.CallTool(ctx, "echo__echo", map[string]any{"text": "hello from an embedding program"})
	if err != nil {
		return err
	}
	printText("result", res)

	// Over HTTP: Serve runs until its context ends.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	serveCtx, stopServing := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- h.Serve(serveCtx, ln) }()

	client := mcp.NewClient(&mcp.Implementation{Name: "embed-client", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + ln.Addr().String() + "/mcp"}, nil)
	if err != nil {
		stopServing()
		return err
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__echo", Arguments: map[string]any{"text": "hello over HTTP"}})
	cs.Close()
	stopServing()
	if serr := <-served; serr != nil {
		return serr
	}
	if err != nil {
		return err
	}
	printText("http result", res)
	fmt.Printf("middleware saw %d requests\n", requests.Load())

	for _, st := range h.Status() {
		fmt.Printf("status: %s %s, %d tools\n", st.Name, st.State, st.Tools)
	}
	return nil
}

func printText(label string, res *mcp.CallToolResult) {
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			fmt.Printf("%s: %s\n", label, t.Text)
		}
	}
}
