package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// `make dist` for this platform: the binaries carry the version and
// commit given to it (`mcpvisor version` prints both), the plugins are
// beside mcpvisor, and SHA256SUMS verifies with `sha256sum -c`.
func TestMakeDist(t *testing.T) {
	if testing.Short() {
		t.Skip("builds release binaries")
	}
	for _, tool := range []string{"make", "sha256sum", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	if runtime.GOOS == "windows" {
		t.Skip("make dist runs under a POSIX shell")
	}
	dir := t.TempDir()
	const version, commit = "v9.8.7-test", "0123456789abcdef0123456789abcdef01234567"
	target := runtime.GOOS + "/" + runtime.GOARCH
	cmd := exec.Command("make", "dist", "DIST_DIR="+dir, "DIST_TARGETS="+target, "VERSION="+version, "COMMIT="+commit)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make dist: %v\n%s", err, out)
	}
	name := "mcpvisor_" + version + "_" + runtime.GOOS + "_" + runtime.GOARCH
	for _, f := range []string{"mcpvisor", "mcpvisor-transport-unix", "mcpvisor-transport-websocket"} {
		if st, err := os.Stat(filepath.Join(dir, name, f)); err != nil || st.Mode().Perm()&0o111 == 0 {
			t.Errorf("%s/%s is not an executable: %v", name, f, err)
		}
	}
	out, err := exec.Command(filepath.Join(dir, name, "mcpvisor"), "version").CombinedOutput()
	if err != nil {
		t.Fatalf("mcpvisor version: %v\n%s", err, out)
	}
	for _, want := range []string{"mcpvisor " + version + "\n", "commit " + commit + "\n", runtime.Version()} {
		if !strings.Contains(string(out), want) {
			t.Errorf("mcpvisor version lacks %q:\n%s", want, out)
		}
	}

	sums, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{name + ".tar.gz", name + "/mcpvisor", name + "/mcpvisor-transport-websocket"} {
		if !bytes.Contains(sums, []byte("  "+f+"\n")) {
			t.Errorf("SHA256SUMS lacks %s:\n%s", f, sums)
		}
	}
	check := exec.Command("sha256sum", "-c", "--strict", "SHA256SUMS")
	check.Dir = dir
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c: %v\n%s", err, out)
	}
	// A corrupted download is caught.
	if err := os.WriteFile(filepath.Join(dir, name+".tar.gz"), []byte("corrupt"), 0o644); err != nil {
		t.Fatal(err)
	}
	check = exec.Command("sha256sum", "-c", "--quiet", "SHA256SUMS")
	check.Dir = dir
	if out, err := check.CombinedOutput(); err == nil {
		t.Errorf("sha256sum -c accepts a corrupted archive:\n%s", out)
	}
}

// semverRE is a semantic version (semver.org 2.0.0, without the rules on
// leading zeros): MAJOR.MINOR.PATCH, an optional pre-release and optional
// build metadata.
var semverRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// Every build says a semantic version: `make version` (what `make dist`
// stamps when no VERSION is given: a tag's X.Y.Z, else X.Y.Z-dev+COMMIT)
// and a plain `go build` of a checkout (`mcpvisor version`, with the
// commit the toolchain recorded as build metadata).
func TestVersionIsSemantic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds mcpvisor")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	out, err := exec.Command("make", "-s", "--no-print-directory", "version").CombinedOutput()
	if err != nil {
		t.Fatalf("make version: %v\n%s", err, out)
	}
	if v := strings.TrimSpace(string(out)); !semverRE.MatchString(v) {
		t.Errorf("make version = %q, not a semantic version", v)
	}
	bin := filepath.Join(t.TempDir(), "mcpvisor")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("mcpvisor version: %v\n%s", err, out)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	v, ok := strings.CutPrefix(first, "mcpvisor ")
	if !ok || !semverRE.MatchString(v) || !strings.Contains(v, "+") {
		t.Errorf("mcpvisor version says %q; want a semantic version with the commit as build metadata", first)
	}
}
