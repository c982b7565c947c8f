package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The build stage's RUN that compiles mcpvisor and the plugins, run here
// with sh (no container engine needed): every plugin it builds must build,
// and the binary must carry the VERSION and COMMIT build arguments.
func TestDockerfileBuildStep(t *testing.T) {
	if testing.Short() {
		t.Skip("builds mcpvisor and the plugins")
	}
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	// Instructions with their continuation lines joined.
	joined := regexp.MustCompile(`\\\n(\s*#[^\n]*\n)*`).ReplaceAllString(string(b), " ")
	var script string
	for _, l := range strings.Split(joined, "\n") {
		if strings.HasPrefix(l, "RUN ") && strings.Contains(l, "go build") {
			script = strings.TrimPrefix(l, "RUN ")
		}
	}
	if script == "" {
		t.Fatal("no RUN with go build in the Dockerfile")
	}
	out := t.TempDir()
	script = strings.ReplaceAll(script, "/out/", out+"/")
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-ec", script)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "VERSION=v1.2.3-docker", "COMMIT=feedface")
	if o, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the Dockerfile's build step fails: %v\n%s\nscript: %s", err, o, script)
	}
	for _, p := range []string{"mcpvisor", "plugins/mcpvisor-transport-unix", "plugins/mcpvisor-transport-websocket"} {
		if _, err := os.Stat(filepath.Join(out, p)); err != nil {
			t.Errorf("the image would lack %s: %v", p, err)
		}
	}
	v, err := exec.Command(filepath.Join(out, "mcpvisor"), "version").CombinedOutput()
	if err != nil || !strings.Contains(string(v), "mcpvisor v1.2.3-docker\ncommit feedface\n") {
		t.Errorf("mcpvisor version in the image: %v\n%s", err, v)
	}
}
