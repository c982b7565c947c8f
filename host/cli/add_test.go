//go:build unix

package cli_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// addHangGuard bounds one CLI command of these tests; far above what a
// healthy one needs, it only tells slow from stuck.
const addHangGuard = 90 * time.Second

// addEnv is a private XDG_RUNTIME_DIR (control sockets) and HOME for the
// mcpvisor processes of one test, plus extra variables.
// operatorTokenIn is the local operator credential of the hosts run
// under env (addEnv's runtime directory).
func operatorTokenIn(t *testing.T, env []string) string {
	t.Helper()
	for _, kv := range env {
		if rt, ok := strings.CutPrefix(kv, "XDG_RUNTIME_DIR="); ok {
			b, err := os.ReadFile(filepath.Join(rt, "mcpvisor", "operator-token"))
			if err != nil {
				t.Fatalf("the operator credential: %v", err)
			}
			return strings.TrimSpace(string(b))
		}
	}
	t.Fatal("no XDG_RUNTIME_DIR in the environment")
	return ""
}

func addEnv(t *testing.T, extra ...string) []string {
	t.Helper()
	rt, err := os.MkdirTemp("", "mv-rt-") // short: a unix socket path has ~100 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(rt) })
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") && !strings.HasPrefix(kv, "MCPVISOR_TOKEN=") {
			env = append(env, kv)
		}
	}
	// The secret store is the file under this HOME, never the keyring of
	// the user running the tests.
	return append(append(env, "XDG_RUNTIME_DIR="+rt, "HOME="+t.TempDir(), "MCPVISOR_SECRETS=file"), extra...)
}

// mv runs the real mcpvisor binary to completion with env.
func mv(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return mvIn(t, env, "", args...)
}

// mvIn is mv with stdin as the command's standard input.
func mvIn(t *testing.T, env []string, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), addHangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, mcpvisorBin, args...)
	cmd.Env = env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("mcpvisor %s did not return within %s\nstdout: %s\nstderr: %s", strings.Join(args, " "), addHangGuard, out.String(), errb.String())
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running mcpvisor: %v", err)
	}
	return code, out.String(), errb.String()
}

// freePort returns a loopback address whose port was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startRun runs `mcpvisor run -config path` (whose host block listens on
// addr) until the test ends, and waits for /healthz.
func startRun(t *testing.T, env []string, path, addr string) *testutil.Buffer {
	t.Helper()
	var logs testutil.Buffer
	cmd := exec.Command(mcpvisorBin, "run", "-config", path)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Errorf("mcpvisor run did not stop within 30s of SIGTERM")
		}
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		if t.Failed() {
			t.Logf("mcpvisor run output:\n%s", logs.String())
		}
	})
	testutil.Eventually(t, 60*time.Second, "mcpvisor run answering /healthz", func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return &logs
}

// addConfigHead is a hand-written config whose comments and odd spacing
// add and remove must keep byte for byte.
const addConfigHead = `# My servers — hand-written, keep my comments.
host {
  listen    = %q   # aligned by hand
  log_level = "debug"
}

// The first server.
server "first" {
  command = %q   /* its binary */
}
# a trailing comment
`

// TestAddRemoveRunningHost: `add` appends a stdio block and a URL block to
// a hand-written config without changing a byte of it, the result
// validates, the running host picks both up (its tools list them), and
// `remove` takes each away again — from the file, byte for byte back to the
// original, and from the host's tools.
func TestAddRemoveRunningHost(t *testing.T) {
	env := addEnv(t)
	addr := freePort(t)
	path := filepath.Join(t.TempDir(), "config.hcl")
	orig := fmt.Sprintf(addConfigHead, addr, echoBin)
	if err := os.WriteFile(path, []byte(orig), 0o640); err != nil {
		t.Fatal(err)
	}
	startRun(t, env, path, addr)
	remote := testutil.StartServer(t, echoBin, "-http", "127.0.0.1:0")

	code, out, errb := mv(t, env, "add", "-config", path, "second", "--", echoBin)
	if code != 0 || !strings.Contains(out, `server "second" is ready`) {
		t.Fatalf("add second: exit %d\nstdout: %s\nstderr: %s", code, out, errb)
	}
	for _, want := range []string{"validating", "reloading host pid", `waiting for server "second"`} {
		if !strings.Contains(errb, want) {
			t.Errorf("add's progress lacks %q:\n%s", want, errb)
		}
	}
	// A server that cannot start: add says so, and that the block stays
	// in the file with the way to undo it.
	code, out, errb = mv(t, env, "add", "-config", path, "broken", "--", "/bin/false")
	if code != 1 || !strings.Contains(out, `the server "broken" stays in `+path) || !strings.Contains(out, "mcpvisor remove broken") {
		t.Errorf("add broken: exit %d, want 1 saying the block stays\nstdout: %s\nstderr: %s", code, out, errb)
	}
	if code, out, errb := mv(t, env, "remove", "-config", path, "broken"); code != 0 {
		t.Fatalf("remove broken: exit %d\nstdout: %s\nstderr: %s", code, out, errb)
	}
	code, out, errb = mv(t, env, "add", "-config", path, "web", remote.URL)
	if code != 0 || !strings.Contains(out, `server "web" is ready`) {
		t.Fatalf("add web: exit %d\nstdout: %s\nstderr: %s", code, out, errb)
	}

	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(got, []byte(orig)) {
		t.Fatalf("add changed the existing text of the file:\n%s", got)
	}
	for _, want := range []string{"server \"second\" {\n  command = ", "server \"web\" {\n  url = " + fmt.Sprintf("%q", remote.URL)} {
		if !bytes.Contains(got, []byte(want)) {
			t.Errorf("the file lacks %q:\n%s", want, got)
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("the file's mode is %v (err %v), want the original 0640", fi.Mode().Perm(), err)
	}
	if code, out, errb := mv(t, env, "validate", "-config", path); code != 0 || !strings.Contains(out, "valid (3 server(s))") {
		t.Fatalf("validate after add: exit %d\nstdout: %s\nstderr: %s", code, out, errb)
	}
	code, out, errb = mv(t, env, "tools", "-config", path)
	if code != 0 || !strings.Contains(errb, "using the running host") {
		t.Fatalf("tools: exit %d\nstdout: %s\nstderr: %s", code, out, errb)
	}
	for _, want := range []string{"first__echo", "second__echo", "web__echo"} {
		if !strings.Contains(out, want) {
			t.Errorf("the running host's tools lack %s:\n%s", want, out)
		}
	}

	for _, name := range []string{"second", "web"} {
		code, out, errb = mv(t, env, "remove", "-config", path, name)
		if code != 0 || !strings.Contains(out, fmt.Sprintf("stopped server %q", name)) {
			t.Fatalf("remove %s: exit %d\nstdout: %s\nstderr: %s", name, code, out, errb)
		}
	}
	if got, _ := os.ReadFile(path); string(got) != orig {
		t.Errorf("after add and remove the file is not the original byte for byte:\n--- got\n%s\n--- want\n%s", got, orig)
	}
	code, out, errb = mv(t, env, "tools", "-config", path)
	if code != 0 || !strings.Contains(out, "first__echo") || strings.Contains(out, "second__") || strings.Contains(out, "web__") {
		t.Errorf("tools after remove: exit %d, want first__echo only\nstdout: %s\nstderr: %s", code, out, errb)
	}
}

// TestAddRefusalsLeaveFileUntouched: a duplicate name, a result that does
// not validate, a secret value and a remove of an unknown server are
// refused, say why, and leave the file byte-identical.
func TestAddRefusalsLeaveFileUntouched(t *testing.T) {
	env := addEnv(t)
	path := filepath.Join(t.TempDir(), "config.hcl")
	orig := fmt.Sprintf(addConfigHead, "127.0.0.1:1", echoBin)
	if err := os.WriteFile(path, []byte(orig), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"first", "--", echoBin}, `a server "first" is already in`},
		{[]string{"bad", "--", ""}, "invalid configuration"},
		{[]string{"sse", "https://example.com/mcp", "-transport", "websocket"}, `the only choice is "sse"`},
		{[]string{"hdr", "https://example.com/mcp", "-header", "Authorization: Bearer hunter2-secret"}, "looks like a credential"},
		{[]string{"bad name", "--", echoBin}, "server name"},
		// The command without "--": its flags would be read as add's.
		{[]string{"fs", "npx", "-y", "@modelcontextprotocol/server-filesystem", "/tmp"}, "put -- before the command, so that its flags are not read as mcpvisor's:\n  mcpvisor add fs -- npx -y @modelcontextprotocol/server-filesystem /tmp"},
		{[]string{"-env", "HOME", "fs", "npx", "-y", "pkg"}, "mcpvisor add fs -- npx -y pkg"},
	}
	for _, c := range cases {
		code, out, errb := mv(t, env, append([]string{"add", "-config", path}, c.args...)...)
		if code != 2 || !strings.Contains(errb, c.want) {
			t.Errorf("add %q: exit %d, want 2 and %q\nstdout: %s\nstderr: %s", c.args, code, c.want, out, errb)
		}
		if strings.Contains(out+errb, "hunter2-secret") {
			t.Errorf("add %q echoed the secret:\n%s%s", c.args, out, errb)
		}
		if got, _ := os.ReadFile(path); string(got) != orig {
			t.Errorf("add %q changed the file:\n%s", c.args, got)
		}
	}
	if code, _, errb := mv(t, env, "remove", "-config", path, "nope"); code != 2 || !strings.Contains(errb, `no server "nope"`) {
		t.Errorf("remove nope: exit %d\nstderr: %s", code, errb)
	}
	if got, _ := os.ReadFile(path); string(got) != orig {
		t.Errorf("remove nope changed the file:\n%s", got)
	}
	if code, _, errb := mv(t, env, "remove", "-config", path, "firts"); code != 2 || !strings.Contains(errb, `no server "firts"`) || !strings.Contains(errb, `did you mean "first"?`) {
		t.Errorf("remove firts: exit %d, want a did-you-mean for first\nstderr: %s", code, errb)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*tmp*")); len(left) > 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}

// TestAddEnvWritesNoValue: -env NAME and a header naming ${NAME} write
// env("NAME"), never the value set in the environment, and the file
// validates where the variable is set.
func TestAddEnvWritesNoValue(t *testing.T) {
	const secret = "s3cret-value-never-in-files"
	env := addEnv(t, "API_TOKEN="+secret)
	path := filepath.Join(t.TempDir(), "config.hcl")
	code, out, errb := mv(t, env, "add", "-config", path, "tok", "-env", "API_TOKEN", "--", echoBin, "-x")
	if code != 0 {
		t.Fatalf("add -env: exit %d\nstdout: %s\nstderr: %s", code, out, errb)
	}
	code, out, errb = mv(t, env, "add", "-config", path, "hdr", "https://example.com/mcp", "-header", "X-Api-Key: Key ${API_TOKEN}", "-oauth")
	if code != 0 || !strings.Contains(out, "mcpvisor login hdr") {
		t.Fatalf("add -header: exit %d\nstdout: %s\nstderr: %s", code, out, errb)
	}
	got, _ := os.ReadFile(path)
	if bytes.Contains(got, []byte(secret)) {
		t.Fatalf("the file holds the secret value:\n%s", got)
	}
	for _, want := range []string{`API_TOKEN = env("API_TOKEN")`, `"X-Api-Key" = "Key ${env("API_TOKEN")}"`, "oauth {"} {
		if !bytes.Contains(got, []byte(want)) {
			t.Errorf("the file lacks %s:\n%s", want, got)
		}
	}
	if code, out, errb := mv(t, env, "validate", "-config", path); code != 0 {
		t.Errorf("validate: exit %d\nstdout: %s\nstderr: %s", code, out, errb)
	}
}

// TestReloadEndpointRefusesInvalidFile: POST /control/reload of a running
// host whose file became invalid answers 422 with the error and keeps the
// servers it runs; once the file is valid again it reports what changed.
func TestReloadEndpointRefusesInvalidFile(t *testing.T) {
	env := addEnv(t)
	addr := freePort(t)
	path := filepath.Join(t.TempDir(), "config.hcl")
	orig := fmt.Sprintf(addConfigHead, addr, echoBin)
	if err := os.WriteFile(path, []byte(orig), 0o600); err != nil {
		t.Fatal(err)
	}
	startRun(t, env, path, addr)
	reload := func() (int, string) {
		t.Helper()
		// An operator: the local operator credential the host made in
		// its runtime directory (operator.go).
		req, _ := http.NewRequest("POST", "http://"+addr+"/control/reload", nil)
		req.Header.Set("Authorization", "Bearer "+operatorTokenIn(t, env))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	if err := os.WriteFile(path, []byte(orig+"server \"broken\" {\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, body := reload(); code != http.StatusUnprocessableEntity || !strings.Contains(body, "Unclosed configuration block") {
		t.Errorf("reload of an invalid file: %d %s, want 422 naming the error", code, body)
	}
	// The file is invalid, so ask the host itself for its tools.
	resp, err := http.Get("http://" + addr + "/tools")
	if err != nil {
		t.Fatal(err)
	}
	var tools bytes.Buffer
	tools.ReadFrom(resp.Body)
	resp.Body.Close()
	if !strings.Contains(tools.String(), "first__echo") {
		t.Errorf("the host's tools after the refused reload: %s, want first__echo still there", tools.String())
	}
	if err := os.WriteFile(path, []byte(orig+fmt.Sprintf("server \"second\" {\n  command = %q\n}\n", echoBin)), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, body := reload(); code != http.StatusOK || !strings.Contains(body, `"added":["second"]`) {
		t.Errorf("reload of a valid file: %d %s, want 200 adding second", code, body)
	}
}
