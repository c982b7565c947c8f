package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The example runs as documented: it supervises the echo server, calls a
// tool and shuts down cleanly.
func TestEmbedExampleRuns(t *testing.T) {
	echo := filepath.Join(t.TempDir(), "echo")
	if out, err := exec.Command("go", "build", "-o", echo, "../servers/echo").CombinedOutput(); err != nil {
		t.Fatalf("building the echo server: %v\n%s", err, out)
	}
	cmd := exec.Command("go", "run", ".", "-echo", echo)
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go run ./examples/embed: %v\n%s", err, out)
	}
	for _, want := range []string{"result: hello from an embedding program", "http result: hello over HTTP", "status: echo ready", "is stopped"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
