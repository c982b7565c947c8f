//go:build unix

package hardening_test

// Local trust: the control socket directory, the control sockets and the
// plugin binaries are things another local user could plant or swap
// (docs/security.md, "Local trust").

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// plantedToken is the bearer token the tests' configs carry: a fake
// control socket must never see it.
const plantedToken = "tok-local-trust-must-not-leak"

// withoutXDG is the environment with XDG_RUNTIME_DIR removed and TMPDIR
// set to tmp, so that mcpvisor's control sockets live in
// tmp/mcpvisor-<uid>, like on a system without a runtime directory.
func withoutXDG(tmp string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") && !strings.HasPrefix(kv, "TMPDIR=") && !strings.HasPrefix(kv, "MCPVISOR_TOKEN=") {
			env = append(env, kv)
		}
	}
	return append(env, "TMPDIR="+tmp)
}

// shortTempDir is a temporary directory with a short path: unix socket
// paths are limited to about 100 bytes.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mcpv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// controlKey is the name mcpvisor gives the control sockets of the
// config file at path (host/cli/instances.go).
func controlKey(t *testing.T, path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(abs))
	return hex.EncodeToString(sum[:8])
}

// fakeControl is a planted control socket: it records every request and
// answers /status with a forged table.
type fakeControl struct {
	mu       sync.Mutex
	requests []string // "METHOD PATH auth=<Authorization header>"
}

func (f *fakeControl) serve(t *testing.T, sock string) {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatalf("planting a socket at %s: %v", sock, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests = append(f.requests, fmt.Sprintf("%s %s auth=%q", r.Method, r.URL.Path, r.Header.Get("Authorization")))
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"version":"forged","servers":[{"name":"forged-server","state":"ready"}]}`)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

func (f *fakeControl) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

// runCLIWithEnv runs `mcpvisor args…` with env and returns its output and exit
// code.
func runCLIWithEnv(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins[testutil.Mcpvisor], args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running mcpvisor %v: %v", args, err)
	}
	return string(out), code
}

// A socket planted by another user in a directory that is not private
// must never receive the token, nor have its answer shown.
func TestControlSocketPlanted(t *testing.T) {
	cases := []struct {
		name string
		// plant makes the control socket directory dir and returns what
		// the refusal must mention.
		plant    func(t *testing.T, dir string) []string
		refusing bool // the command refuses, rather than skipping the socket
	}{
		{"world-writable dir", func(t *testing.T, dir string) []string {
			mkdirMode(t, dir, 0o777)
			return []string{"refusing the control socket path " + dir, "mode 0777", "chmod 700", "rm -r " + dir}
		}, true},
		{"group-readable dir", func(t *testing.T, dir string) []string {
			mkdirMode(t, dir, 0o750)
			return []string{"refusing the control socket path " + dir, "mode 0750"}
		}, true},
		{"symlinked dir", func(t *testing.T, dir string) []string {
			real := dir + "-real"
			mkdirMode(t, real, 0o700)
			if err := os.Symlink(real, dir); err != nil {
				t.Fatal(err)
			}
			return []string{"refusing the control socket path " + dir, "symbolic link"}
		}, true},
		{"dir of another user", func(t *testing.T, dir string) []string {
			if os.Geteuid() != 0 {
				t.Skip("needs root to give a directory to another user")
			}
			mkdirMode(t, dir, 0o700)
			if err := os.Chown(dir, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return []string{"refusing the control socket path " + dir, "owned by uid 65534"}
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tmp := shortTempDir(t)
			dir := filepath.Join(tmp, fmt.Sprintf("mcpvisor-%d", os.Getuid()))
			want := tc.plant(t, dir)
			cfg := filepath.Join(tmp, "config.hcl")
			// Nothing listens on listen: only the planted socket answers.
			hostAttrs := fmt.Sprintf("  auth {\n    bearer_token = %s\n  }\n", hclString(plantedToken))
			if err := os.WriteFile(cfg, []byte(hostConfig(freeAddr(t), hostAttrs, echoBlock())), 0o600); err != nil {
				t.Fatal(err)
			}
			// The pid in the name is this test's: a live process.
			fake := &fakeControl{}
			fake.serve(t, filepath.Join(dir, fmt.Sprintf("%s-%d.sock", controlKey(t, cfg), os.Getpid())))

			out, code := runCLIWithEnv(t, withoutXDG(tmp), "status", "-config", cfg)
			t.Logf("mcpvisor status (exit %d):\n%s", code, out)
			if got := fake.seen(); len(got) > 0 {
				t.Errorf("the planted socket received %d requests: %q", len(got), got)
			}
			if strings.Contains(out, "forged") {
				t.Errorf("status showed the planted socket's forged answer")
			}
			if code == 0 {
				t.Errorf("status exited 0, want a refusal")
			}
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("the refusal does not say %q", w)
				}
			}
			if strings.Contains(out, plantedToken) {
				t.Errorf("the output shows the token")
			}

			// `call` must not use the planted socket either.
			out, _ = runCLIWithEnv(t, withoutXDG(tmp), "call", "-config", cfg, "echo__echo", `{"text":"hi"}`)
			t.Logf("mcpvisor call:\n%s", out)
			if got := fake.seen(); len(got) > 0 {
				t.Errorf("call: the planted socket received %d requests: %q", len(got), got)
			}
		})
	}
}

// A socket in a private directory that is not a socket of ours is
// skipped, and gets nothing.
func TestControlSocketNotOurs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a socket to another user")
	}
	tmp := shortTempDir(t)
	dir := filepath.Join(tmp, fmt.Sprintf("mcpvisor-%d", os.Getuid()))
	mkdirMode(t, dir, 0o700)
	cfg := filepath.Join(tmp, "config.hcl")
	hostAttrs := fmt.Sprintf("  auth {\n    bearer_token = %s\n  }\n", hclString(plantedToken))
	if err := os.WriteFile(cfg, []byte(hostConfig(freeAddr(t), hostAttrs, echoBlock())), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, fmt.Sprintf("%s-%d.sock", controlKey(t, cfg), os.Getpid()))
	fake := &fakeControl{}
	fake.serve(t, sock)
	if err := os.Lchown(sock, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	out, _ := runCLIWithEnv(t, withoutXDG(tmp), "status", "-config", cfg)
	t.Logf("mcpvisor status:\n%s", out)
	if got := fake.seen(); len(got) > 0 {
		t.Errorf("a socket owned by another user received %d requests: %q", len(got), got)
	}
	if strings.Contains(out, "forged") {
		t.Errorf("status showed the foreign socket's forged answer")
	}
}

// mkdirMode makes dir with exactly mode, whatever the umask.
func mkdirMode(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}

// The host does not serve its control socket in a directory that is not
// private, says why, and keeps serving over HTTP; in a directory it
// creates itself, the directory is 0700 and `status` reaches it.
func TestControlSocketHostRefusesDir(t *testing.T) {
	tmp := shortTempDir(t)
	dir := filepath.Join(tmp, fmt.Sprintf("mcpvisor-%d", os.Getuid()))
	mkdirMode(t, dir, 0o777)
	mv := startMcpvisorEnv(t, withoutXDG(tmp), "", echoBlock())
	mv.healthz(t, "with a planted control directory")
	waitStderr(t, mv, "refusing the control socket path "+dir)
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("mcpvisor made %s in the planted directory", entries[0].Name())
	}

	// Its own directory: created 0700, and used.
	tmp2 := shortTempDir(t)
	mv2 := startMcpvisorEnv(t, withoutXDG(tmp2), "", echoBlock())
	dir2 := filepath.Join(tmp2, fmt.Sprintf("mcpvisor-%d", os.Getuid()))
	fi, err := os.Lstat(dir2)
	if err != nil {
		t.Fatalf("mcpvisor made no control directory: %v", err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("mcpvisor made %s with mode %04o, want 0700", dir2, fi.Mode().Perm())
	}
	out, code := runCLIWithEnv(t, withoutXDG(tmp2), "status", "-config", mv2.config)
	if code != 0 || !strings.Contains(out, "echo    ready") {
		t.Errorf("status through mcpvisor's own control socket (exit %d):\n%s", code, out)
	}
}

// waitStderr waits until mv's output contains s.
func waitStderr(t *testing.T, mv *mcpvisor, s string) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for !strings.Contains(mv.stderr.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("mcpvisor never logged %q", s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// restartServer asks mv to restart the server name and waits until it
// has left "starting": ready, or refused and waiting to retry.
func restartServer(t *testing.T, mv *mcpvisor, name string) {
	t.Helper()
	hc := newHTTPClient(t, readyTimeout)
	resp, err := hc.Post("http://"+mv.addr+"/control/restart?server="+name, "", nil)
	if err != nil {
		t.Fatalf("POST /control/restart: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	deadline := time.Now().Add(readyTimeout)
	for mv.status(t)[name].State == "starting" {
		if time.Now().After(deadline) {
			t.Fatalf("%s still starting %s after a restart", name, readyTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A locked plugin whose binary is swapped at its path, again and again,
// while mcpvisor restarts it: only the bytes that were hashed may ever
// run. The swapped-in binary leaves a mark when it runs.
func TestPluginSwapRace(t *testing.T) {
	dir := shortTempDir(t)
	good := filepath.Join(dir, "good")
	if err := os.Link(unixPlugin(t), good); err != nil {
		b, err := os.ReadFile(unixPlugin(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(good, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	marker := filepath.Join(dir, "swapped-binary-ran")
	evil := filepath.Join(dir, "evil")
	if err := os.WriteFile(evil, []byte("#!/bin/sh\necho ran >> "+marker+"\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	sum, err := fileSHA256(good)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "mcpvisor-transport-unix")
	if err := os.Link(good, bin); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	srv := testutil.StartServer(t, bins["echo"], "-unix", sock)
	srv.WaitLine(t, "listening on unix:", readyTimeout)
	mv := startMcpvisor(t, fmt.Sprintf("server \"p\" {\n  plugin \"unix\" {\n    command = %s\n    sha256 = %q\n    config = { socket = %s }\n  }\n  reconnect { max_retries = 1000 }\n}\n",
		hclString(bin), sum, hclString(sock)))
	waitTool(t, connectClient(t, mv), "p__echo")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// A rename over the path, as an attacker who can write the
		// directory would: each one is atomic, the path always names a
		// whole binary, the good or the evil one.
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			src, tmp := good, filepath.Join(dir, "tmp-good")
			if i%2 == 1 {
				src, tmp = evil, filepath.Join(dir, "tmp-evil")
			}
			os.Remove(tmp)
			if err := os.Link(src, tmp); err != nil {
				t.Errorf("linking %s: %v", src, err)
				return
			}
			if err := os.Rename(tmp, bin); err != nil {
				t.Errorf("renaming over %s: %v", bin, err)
				return
			}
		}
	}()
	const restarts = 60
	for range restarts {
		restartServer(t, mv, "p")
	}
	close(stop)
	wg.Wait()
	mv.alive(t)

	started := strings.Count(mv.stderr.String(), "plugin started")
	refused := strings.Count(mv.stderr.String(), "has SHA-256")
	t.Logf("%d restarts: %d plugin processes started, %d starts refused for the hash", restarts, started, refused)
	if b, err := os.ReadFile(marker); err == nil {
		t.Errorf("the swapped-in, unverified binary ran %d times", strings.Count(string(b), "ran"))
	}
	if started == 0 {
		t.Errorf("no plugin process started: the race was not exercised")
	}
}

// fileSHA256 is the hex SHA-256 of the file at path.
func fileSHA256(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// A socket of ours in our private directory whose listening process runs
// as another user (it was moved in, or the directory was shared) gets no
// request: on Linux the CLI checks the peer's uid before sending one.
func TestControlSocketPeerOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 || runtime.GOOS != "linux" {
		t.Skip("needs root on Linux to run a listener as another user")
	}
	// The listener runs as nobody: it needs a binary and a directory it
	// can reach.
	pub, err := os.MkdirTemp("", "mcpv-pub-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(pub) })
	os.Chmod(pub, 0o777)
	b, err := os.ReadFile(bins["echo"])
	if err != nil {
		t.Fatal(err)
	}
	echo := filepath.Join(pub, "echo")
	if err := os.WriteFile(echo, b, 0o755); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(pub, "s.sock")
	cmd := exec.Command(echo, "-unix", theirs)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out := &testutil.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(readyTimeout)
	for !strings.Contains(out.String(), "listening on unix:") {
		if time.Now().After(deadline) {
			t.Fatalf("the listener run as nobody did not come up:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	tmp := shortTempDir(t)
	dir := filepath.Join(tmp, fmt.Sprintf("mcpvisor-%d", os.Getuid()))
	mkdirMode(t, dir, 0o700)
	cfg := filepath.Join(tmp, "config.hcl")
	hostAttrs := fmt.Sprintf("  auth {\n    bearer_token = %s\n  }\n", hclString(plantedToken))
	if err := os.WriteFile(cfg, []byte(hostConfig(freeAddr(t), hostAttrs, echoBlock())), 0o600); err != nil {
		t.Fatal(err)
	}
	// Into our directory, and ours as a file: only the peer is not us.
	sock := filepath.Join(dir, fmt.Sprintf("%s-%d.sock", controlKey(t, cfg), os.Getpid()))
	if err := os.Rename(theirs, sock); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(sock, 0, 0); err != nil {
		t.Fatal(err)
	}
	got, code := runCLIWithEnv(t, withoutXDG(tmp), "status", "-config", cfg)
	t.Logf("mcpvisor status (exit %d):\n%s", code, got)
	if !strings.Contains(got, "runs as uid 65534") {
		t.Errorf("status does not say the socket's listener runs as another user")
	}
	if strings.Contains(got, plantedToken) {
		t.Errorf("the output shows the token")
	}
}
