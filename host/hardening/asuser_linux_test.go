package hardening_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Containment holds as root and as an unprivileged user (docs/design.md
// §18): the tests that say so run the real binary both ways. nobody is
// the unprivileged user: uid and gid 65534 exist on every Debian system,
// own nothing and are in no group.
const (
	nobodyUID = 65534
	nobodyGID = 65534
)

// startMcpvisorAsUser starts the real binary as nobody, with a HOME and
// an XDG_RUNTIME_DIR of its own (0700, nobody's), as a login would give
// it. The built binaries' folder is opened to others for it (they are
// the test's, in a private temporary folder). It returns the host and
// its HOME.
func startMcpvisorAsUser(t *testing.T, hostAttrs, servers string) (*mcpvisor, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("running as another user needs root")
	}
	if err := os.Chmod(filepath.Dir(bins["mcpvisor"]), 0o755); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	runtime := filepath.Join(home, "run")
	if err := os.Mkdir(runtime, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{home, runtime} {
		if err := os.Chown(p, nobodyUID, nobodyGID); err != nil {
			t.Fatal(err)
		}
	}
	// t.TempDir's parent is the test's own 0700 folder: nobody must be
	// able to reach HOME through it.
	if err := os.Chmod(filepath.Dir(home), 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"USER=nobody",
		"XDG_RUNTIME_DIR=" + runtime,
	}
	cred := &syscall.Credential{Uid: nobodyUID, Gid: nobodyGID}
	return startMcpvisorAs(t, cred, env, hostAttrs, servers), home
}

// probe runs one probe of the hostile example server behind tool (for
// instance "hostile__probe") and returns its outcome line: "escaped: …"
// or "refused: …" (examples/servers/hostile).
func probe(t *testing.T, cs *mcp.ClientSession, tool, name, arg string) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"name": name, "arg": arg}})
	if err != nil {
		t.Fatalf("probe %s %q: %v", name, arg, err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("probe %s %q: %d content blocks", name, arg, len(res.Content))
	}
	text, _ := res.Content[0].(*mcp.TextContent)
	if text == nil || res.IsError {
		t.Fatalf("probe %s %q: %+v", name, arg, res.Content[0])
	}
	return text.Text
}

// TestStartAsUser: the real binary serves as nobody, and its sandboxed
// hostile server still does its job there: it writes the folder it may
// write (the positive control of the containment tests).
func TestStartAsUser(t *testing.T) {
	work := t.TempDir()
	if err := os.Chown(work, nobodyUID, nobodyGID); err != nil {
		t.Fatal(err)
	}
	mv, _ := startMcpvisorAsUser(t, "", `server "hostile" {
  command = `+hclString(bins["hostile"])+`
  sandbox {
    network = "none"
    write   = [`+hclString(work)+`]
  }
}
`)
	cs := connectClient(t, mv)
	waitTool(t, cs, "hostile__probe")
	file := filepath.Join(work, "out")
	if got := probe(t, cs, "hostile__probe", "write-file", file); !strings.HasPrefix(got, "escaped: wrote") {
		t.Fatalf("write-file in its write folder: %s", got)
	}
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != nobodyUID {
		t.Errorf("the file was written by uid %d, want %d", st.Uid, nobodyUID)
	}
}
