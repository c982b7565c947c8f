//go:build unix

package plugin_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkCall is the plugin-transport row of docs/design.md §12's benchmarks: one
// tools/call to the same server over a Unix socket, made directly by a
// go-sdk client and made through the unix transport plugin. Compare the
// two ns/op values; the difference is the cost of the plugin hop (gRPC
// over a local socket, mTLS, one extra process).
func BenchmarkCall(b *testing.B) {
	sock := filepath.Join(b.TempDir(), "tools.sock")
	p := startPeer(b, "-unix", sock)
	params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "benchmark"}}
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)

	b.Run("direct", func(b *testing.B) {
		c, err := net.Dial("unix", p.addr)
		if err != nil {
			b.Fatal(err)
		}
		cs, err := client.Connect(context.Background(), &mcp.IOTransport{Reader: c, Writer: c}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cs.Close()
		benchCalls(b, cs, params)
	})
	b.Run("plugin", func(b *testing.B) {
		srv := server("over-unix", "unix", bin("mcpvisor-transport-unix"), map[string]any{"socket": p.addr})
		link, err := dial(b, srv)
		if err != nil {
			b.Fatal(err)
		}
		defer link.Close(context.Background())
		cs, err := client.Connect(context.Background(), link.Transport(), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cs.Close()
		benchCalls(b, cs, params)
	})
}

func benchCalls(b *testing.B, cs *mcp.ClientSession, params *mcp.CallToolParams) {
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if _, err := cs.CallTool(ctx, params); err != nil {
			b.Fatal(err)
		}
	}
}
