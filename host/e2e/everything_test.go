//go:build unix

package e2e_test

import (
	"fmt"
	"slices"
	"testing"
)

// The server-everything tool these tests call, and its name once mcpvisor exposes
// it under the server block's label "everything" (docs/design.md §7).
const (
	echoTool        = "echo"
	exposedEchoTool = "everything__echo"
)

// TestPeersDirect checks the peers themselves, without mcpvisor: the inspector CLI
// lists and calls server-everything's echo over stdio. When this passes and a test
// through mcpvisor fails, the failure is mcpvisor's.
func TestPeersDirect(t *testing.T) {
	t.Parallel()
	tl := requireNpmTools(t)
	env := newTestEnv(t)
	target := []string{"-e", markerEnv + "=" + env.Marker, "--", tl.Node22, tl.Everything, "stdio"}

	listToolsUntil(t, tl, env, echoTool, target...)
	callEcho(t, tl, env, echoTool, "direct hello", target...)
	checkNoLeftovers(t, "inspector", env, nil, nil)
}

// TestEverythingNodeOverHTTP: server-everything as a stdio upstream started with
// node directly; the inspector CLI lists and calls its echo tool through mcpvisor's
// streamable HTTP endpoint; SIGTERM leaves nothing behind (checked in cleanup).
func TestEverythingNodeOverHTTP(t *testing.T) {
	t.Parallel()
	tl := requireTools(t)
	env := newTestEnv(t)
	listen := freeAddr(t)
	cfg := writeConfig(t, fmt.Sprintf(`host { listen = %s }

server "everything" {
  command = %s
  args    = [%s, "stdio"]
}
`, hclString(listen), hclString(tl.Node22), hclString(tl.Everything)))

	h := startHost(t, tl, env, cfg, listen)
	target := []string{"--transport", "http", "--server-url", h.URL}

	names := listToolsUntil(t, tl, env, exposedEchoTool, target...)
	t.Logf("tools through mcpvisor: %v", names)
	callEcho(t, tl, env, exposedEchoTool, "hello through mcpvisor over http", target...)

	if kids := h.snapshot(); len(kids) == 0 {
		t.Errorf("mcpvisor has no child process although server-everything answered through it")
	}
}

// TestEverythingNpxOverHTTP: the same upstream started through the npx wrapper
// (offline, from the npm prefix the tools were installed into, so no network is
// needed). npx runs the server as a grandchild; SIGTERM to mcpvisor must take the
// wrapper and its children down (checked in cleanup).
func TestEverythingNpxOverHTTP(t *testing.T) {
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
}
`, hclString(listen), hclString(npx), hclString(tl.NpmDir)))

	h := startHost(t, tl, env, cfg, listen)
	target := []string{"--transport", "http", "--server-url", h.URL}

	names := listToolsUntil(t, tl, env, exposedEchoTool, target...)
	if !slices.Contains(names, exposedEchoTool) {
		t.Fatalf("tools through mcpvisor: %v, want %s", names, exposedEchoTool)
	}

	// The wrapper case is only covered if npx really has a child of its own.
	kids := h.snapshot()
	if len(kids) < 2 {
		var s []string
		for pid := range kids {
			s = append(s, cmdline(pid))
		}
		t.Errorf("expected npx and the server it started below mcpvisor, found %d process(es): %q", len(kids), s)
	}
}

// TestInspectorStdio: the inspector CLI runs `mcpvisor run --stdio` as its stdio
// server, lists the tools and calls one. When the inspector closes mcpvisor's stdin,
// mcpvisor and server-everything must be gone.
//
// Each inspector run starts a fresh mcpvisor and sends tools/list right after
// initialize; a one-shot client never waits for list_changed. So mcpvisor must have
// the upstream's tools (or have given up on it, bounded by connect_timeout) by the
// time it answers that first list — retrying here does not help, it only tolerates
// a flake.
func TestInspectorStdio(t *testing.T) {
	t.Parallel()
	tl := requireTools(t)
	env := newTestEnv(t)
	cfg := writeConfig(t, fmt.Sprintf(`server "everything" {
  command = %s
  args    = [%s, "stdio"]
}
`, hclString(tl.Node22), hclString(tl.Everything)))

	// -e passes the marker to mcpvisor (the inspector gives a stdio server only a
	// minimal environment); TMPDIR marks mcpvisor's own children.
	target := []string{
		"-e", markerEnv + "=" + env.Marker,
		"-e", "TMPDIR=" + env.TmpDir,
		"--", tl.Mcpvisor, "run", "--stdio", "-config", cfg,
	}
	t.Cleanup(func() { checkNoLeftovers(t, "inspector with mcpvisor --stdio", env, nil, nil) })

	names := listToolsUntil(t, tl, env, exposedEchoTool, target...)
	t.Logf("tools through mcpvisor --stdio: %v", names)
	checkNoLeftovers(t, "mcpvisor --stdio after tools/list", env, nil, nil)

	callEcho(t, tl, env, exposedEchoTool, "hello through mcpvisor over stdio", target...)
	checkNoLeftovers(t, "mcpvisor --stdio after tools/call", env, nil, nil)
}
