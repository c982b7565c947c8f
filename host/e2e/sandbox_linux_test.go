package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestFilesystemServerUnderSandbox: npm's server-filesystem, given two
// directories, runs under a sandbox whose read covers only the first
// (docs/sandbox.md). The real mcpvisor binary starts it through its
// launcher; a read inside works, and the second directory — one the
// server itself allows — does not exist in the server's view, so a read
// there is refused and the tool result carries the error. SIGTERM leaves nothing behind
// (checked in cleanup).
func TestFilesystemServerUnderSandbox(t *testing.T) {
	t.Parallel()
	tl := requireTools(t)
	filesystem := filepath.Join(tl.NpmDir, "node_modules", "@modelcontextprotocol", "server-filesystem", "dist", "index.js")
	if _, err := os.Stat(filesystem); err != nil {
		t.Fatalf("missing server-filesystem (.ci/npm-tools.sh): %v", err)
	}
	env := newTestEnv(t)
	root := t.TempDir()
	dirA, dirB := filepath.Join(root, "a"), filepath.Join(root, "b")
	for d, text := range map[string]string{dirA: "inside the sandbox", dirB: "outside the sandbox"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "note.txt"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	listen := freeAddr(t)
	cfg := writeConfig(t, fmt.Sprintf(`host { listen = %s }

server "fs" {
  command = %s
  args    = [%s, %s, %s]
  sandbox {
    read    = [%s, %s]
    network = "none"
  }
}
`, hclString(listen), hclString(tl.Node22), hclString(filesystem), hclString(dirA), hclString(dirB),
		hclString(dirA), hclString(filepath.Join(tl.NpmDir, "node_modules"))))

	h := startHost(t, tl, env, cfg, listen)
	cs := connectAt(t, h.URL, "2025-11-25")
	read := func(path string) (string, bool) {
		t.Helper()
		var res *mcp.CallToolResult
		deadline := time.Now().Add(toolsTimeout)
		for {
			var err error
			res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "fs__read_text_file", Arguments: map[string]any{"path": path}})
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("read_text_file %s: %v\nmcpvisor:\n%s", path, err, h.output.String())
			}
			time.Sleep(200 * time.Millisecond) // the upstream is still starting
		}
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String(), res.IsError
	}

	if text, isErr := read(filepath.Join(dirA, "note.txt")); isErr || text != "inside the sandbox" {
		t.Fatalf("read inside the sandbox: isError %v, %q", isErr, text)
	}
	// dirB does not exist in the server's view (docs/sandbox.md "What
	// the server sees"): the server finds it missing at start and
	// refuses every path in it.
	text, isErr := read(filepath.Join(dirB, "note.txt"))
	if !isErr || strings.Contains(text, "outside the sandbox") {
		t.Fatalf("read in a directory the server allows but the sandbox does not: want it refused; got isError %v, %q", isErr, text)
	}
	if out := h.output.String(); !strings.Contains(out, "Cannot access directory "+dirB) {
		t.Errorf("the server saw %s at start; want it absent from its view\nmcpvisor:\n%s", dirB, out)
	}
	t.Logf("outside: %s", text)
}

// TestEverythingNpxUnderSandbox: server-everything started through npx
// (offline, from the npm prefix) under a sandbox whose own rules are only
// the prefix and network = "none": the runtime defaults for npx — node's
// installation, the npm cache in the test's HOME, created by mcpvisor —
// are enough for npx and the server it starts, and the echo tool answers
// through mcpvisor.
func TestEverythingNpxUnderSandbox(t *testing.T) {
	t.Parallel()
	tl := requireTools(t)
	npx, err := lookNpx()
	if err != nil {
		t.Fatal(err)
	}
	env := newTestEnv(t)
	listen := freeAddr(t)
	cfg := writeConfig(t, fmt.Sprintf(`host { listen = %s }

server "everything" {
  command = %s
  args    = ["--prefix", %s, "--offline", "--no-install", "mcp-server-everything", "stdio"]
  env     = { npm_config_update_notifier = "false" }
  sandbox {
    read    = [%s]
    network = "none"
  }
}
`, hclString(listen), hclString(npx), hclString(tl.NpmDir), hclString(tl.NpmDir)))

	h := startHost(t, tl, env, cfg, listen)
	cs := connectAt(t, h.URL, "2025-11-25")
	deadline := time.Now().Add(toolsTimeout)
	for {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: exposedEchoTool, Arguments: map[string]any{"message": "sandboxed"}})
		if err == nil && !res.IsError {
			if tc, ok := res.Content[0].(*mcp.TextContent); !ok || !strings.Contains(tc.Text, "sandboxed") {
				t.Fatalf("echo: %+v", res.Content)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("echo through a sandboxed npx: %v %+v\nmcpvisor:\n%s", err, res, h.output.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st, err := os.Stat(filepath.Join(env.Home, ".npm")); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("the npm cache in HOME: %v (want a 0700 directory mcpvisor created)", err)
	}
}
