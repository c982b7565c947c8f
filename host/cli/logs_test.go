//go:build unix

package cli_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// freshUser is the environment of a user who has never run mcpvisor: a
// new HOME (no XDG_CONFIG_HOME, so the user config is
// HOME/.config/mcpvisor/config.hcl), a private runtime dir for the control
// sockets, the file secret store.
func freshUser(t *testing.T) (env []string, home string) {
	t.Helper()
	for _, kv := range addEnv(t) {
		if !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	home = t.TempDir()
	return append(env, "HOME="+home), home
}

// withHome is env with HOME replaced: the same user's runtime dir (and so
// the same running hosts), another user config.
func withHome(env []string, home string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "HOME=") {
			out = append(out, kv)
		}
	}
	return append(out, "HOME="+home)
}

// mvAt runs the binary in dir with env and returns its exit code and output.
func mvAt(t *testing.T, env []string, dir string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), addHangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, mcpvisorBin, args...)
	cmd.Env, cmd.Dir = env, dir
	var out, errb testutil.Buffer
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
	if s := errb.String(); strings.Contains(s, "goroutine ") || strings.Contains(s, "panic:") {
		t.Errorf("mcpvisor %s showed a stack trace:\n%s", strings.Join(args, " "), s)
	}
	return code, out.String(), errb.String()
}

// runAt runs `mcpvisor run ARGS…` in dir until the test ends (or stop is
// called), once /healthz answers on addr; stop sends SIGTERM and waits.
func runAt(t *testing.T, env []string, dir, addr string, args ...string) (logs *testutil.Buffer, stop func()) {
	t.Helper()
	logs = &testutil.Buffer{}
	cmd := exec.Command(mcpvisorBin, append([]string{"run"}, args...)...)
	cmd.Env, cmd.Dir = env, dir
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Errorf("mcpvisor run did not stop within 30s of SIGTERM")
		}
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("mcpvisor run %s output:\n%s", strings.Join(args, " "), logs.String())
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
	return logs, stop
}

// chattyServer is a command for `add … --`: it writes "line 1" … "line 30"
// to stderr, then becomes the echo server (same pid), which writes "echo
// server starting pid=N".
func chattyServer() []string {
	return []string{"/bin/sh", "-c", `i=1; while [ $i -le 30 ]; do echo "line $i" >&2; i=$((i+1)); done; exec "$0"`, echoBin}
}

var startedPid = regexp.MustCompile(`echo server starting pid=(\d+)`)

// TestUserConfigAndLogs is the first hour from a fresh HOME, never in the
// config's folder: the first `add` creates the user config (its folder
// 0700); `run` without -config serves it; from another folder `status`,
// `tools`, `call` and `logs` find that host and say which config it
// serves; `logs` prints the server's stderr, `-n` the last lines, a
// mistyped name gets a did-you-mean; `logs -f` sees the lines of the
// server's next process after a SIGKILL and ends cleanly when the host
// stops. With a second config running too, a command uses the user's
// config and names the other; with two configs running that are not the
// user's, `tools` asks which and `status` shows both.
func TestUserConfigAndLogs(t *testing.T) {
	env, home := freshUser(t)
	userCfg := filepath.Join(home, ".config", "mcpvisor", "config.hcl")
	elsewhere := t.TempDir() // no config.hcl here, ever

	code, out, errb := mvAt(t, env, elsewhere, append([]string{"add", "echo", "--"}, chattyServer()...)...)
	if code != 0 || !strings.Contains(out, userCfg) {
		t.Fatalf("add from a folder without config.hcl: exit %d, want 0 and the user config named\nstdout: %s\nstderr: %s", code, out, errb)
	}
	if fi, err := os.Stat(filepath.Dir(userCfg)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the user config's folder: %v, mode %v; want it made 0700", err, fi.Mode())
	}
	if _, err := os.Stat(filepath.Join(elsewhere, "config.hcl")); err == nil {
		t.Fatal("add wrote config.hcl into the current folder instead of the user config")
	}
	// The host's own port, so that parallel tests do not meet on 8080.
	addr := freePort(t)
	src, _ := os.ReadFile(userCfg)
	if err := os.WriteFile(userCfg, append([]byte(fmt.Sprintf("host {\n  listen = %q\n}\n\n", addr)), src...), 0o600); err != nil {
		t.Fatal(err)
	}

	runDir := t.TempDir()
	runLogs, stopRun := runAt(t, env, runDir, addr)
	testutil.Eventually(t, 60*time.Second, "the echo server up", func() bool { return startedPid.MatchString(runLogs.String()) })

	code, out, errb = mvAt(t, env, elsewhere, "status")
	if code != 0 || !strings.Contains(out, "config "+userCfg) || !strings.Contains(out, "echo") {
		t.Errorf("status from another folder: exit %d; want 0 and the host of %s\nstdout: %s\nstderr: %s", code, userCfg, out, errb)
	}
	code, out, errb = mvAt(t, env, elsewhere, "tools")
	if code != 0 || !strings.Contains(out, "echo__echo") || !strings.Contains(errb, "using the running host serving "+userCfg) {
		t.Errorf("tools from another folder: exit %d; want 0, the echo tools and the host named\nstdout: %s\nstderr: %s", code, out, errb)
	}
	code, out, errb = mvAt(t, env, elsewhere, "call", "echo__echo", `{"text":"from elsewhere"}`)
	if code != 0 || !strings.Contains(out, "from elsewhere") {
		t.Errorf("call from another folder: exit %d\nstdout: %s\nstderr: %s", code, out, errb)
	}

	code, out, errb = mvAt(t, env, elsewhere, "logs", "echo")
	m := startedPid.FindStringSubmatch(out)
	if code != 0 || m == nil || !strings.Contains(out, "line 1\n") || !strings.Contains(out, "line 30\n") {
		t.Fatalf("logs echo: exit %d; want 0 with lines 1 to 30 and the start line\nstdout: %s\nstderr: %s", code, out, errb)
	}
	firstPid := m[1]
	code, out, errb = mvAt(t, env, elsewhere, "logs", "-n", "3", "echo")
	if want := "line 29\nline 30\necho server starting pid=" + firstPid + "\n"; code != 0 || out != want {
		t.Errorf("logs -n 3 echo: exit %d, stdout %q; want %q\nstderr: %s", code, out, want, errb)
	}
	code, _, errb = mvAt(t, env, elsewhere, "logs", "ech")
	if code != 2 || !strings.Contains(errb, `did you mean "echo"`) {
		t.Errorf("logs ech: exit %d; want 2 and a did-you-mean\nstderr: %s", code, errb)
	}
	if tok := operatorTokenIn(t, env); strings.Contains(out+errb, tok) {
		t.Error("logs printed the operator credential")
	}

	// A project's host runs too, from its own folder: the user's config
	// stays the one used, and the other is named.
	project := t.TempDir()
	projAddr := freePort(t)
	projCfg := filepath.Join(project, "config.hcl")
	if err := os.WriteFile(projCfg, []byte(fmt.Sprintf("host {\n  listen = %q\n}\n\nserver \"echo\" {\n  command = %q\n}\n", projAddr, echoBin)), 0o600); err != nil {
		t.Fatal(err)
	}
	runAt(t, env, project, projAddr)
	code, out, errb = mvAt(t, env, elsewhere, "logs", "-n", "1", "echo")
	if code != 0 || !strings.Contains(out, "pid="+firstPid) || !strings.Contains(errb, projCfg) || !strings.Contains(errb, "-config") {
		t.Errorf("logs with two configs running: exit %d; want the user config's lines, and the project's config named with how to pick it\nstdout: %s\nstderr: %s", code, out, errb)
	}
	// Another user config (HOME) that does not exist: two configs run,
	// neither is this one's, so tools asks and status shows both.
	other := withHome(env, t.TempDir())
	code, _, errb = mvAt(t, other, elsewhere, "tools")
	if code != 2 || !strings.Contains(errb, userCfg) || !strings.Contains(errb, projCfg) || !strings.Contains(errb, "-config") {
		t.Errorf("tools with two configs running and none the user's: exit %d; want 2, both named and how to pick\nstderr: %s", code, errb)
	}
	code, out, errb = mvAt(t, other, elsewhere, "status")
	if code != 0 || !strings.Contains(out, "config "+userCfg) || !strings.Contains(out, "config "+projCfg) {
		t.Errorf("status with two configs running: exit %d; want both hosts\nstdout: %s\nstderr: %s", code, out, errb)
	}

	// logs -f: the tail, then the next process's lines after a SIGKILL,
	// then a clean end when the host stops.
	ctx, cancel := context.WithTimeout(context.Background(), addHangGuard)
	defer cancel()
	follow := exec.CommandContext(ctx, mcpvisorBin, "logs", "-f", "-n", "1", "echo")
	follow.Env, follow.Dir = env, elsewhere
	var followErr testutil.Buffer
	follow.Stderr = &followErr
	pipe, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next := func(what string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("logs -f ended before %s\nstderr: %s", what, followErr.String())
			}
			return l
		case <-time.After(60 * time.Second):
			t.Fatalf("logs -f printed no %s within 60s\nstderr: %s", what, followErr.String())
		}
		return ""
	}
	if l := next("tail line"); l != "echo server starting pid="+firstPid {
		t.Fatalf("logs -f -n 1 first line %q; want the last kept line", l)
	}
	var pid int
	fmt.Sscan(firstPid, &pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing the server: %v", err)
	}
	want := []string{"— process ", "line 1", "line 2"}
	for _, w := range want {
		if l := next(fmt.Sprintf("line starting %q after the SIGKILL", w)); !strings.HasPrefix(l, w) {
			t.Fatalf("logs -f after the SIGKILL: got %q, want a line starting %q", l, w)
		}
	}
	for {
		l := next("start line of the new process")
		if m := startedPid.FindStringSubmatch(l); m != nil {
			if m[1] == firstPid {
				t.Fatalf("the new process has the old pid %s", firstPid)
			}
			break
		}
	}
	stopRun()
	for range lines {
	}
	err = follow.Wait()
	if err != nil || !strings.Contains(followErr.String(), "the host is shutting down") {
		t.Errorf("logs -f when the host stopped: %v; want exit 0 and the reason\nstderr: %s", err, followErr.String())
	}
}
