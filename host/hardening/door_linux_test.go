package hardening_test

// The operator's door (docs/security.md, "The operator's door"; design
// §18, §19): a process mcpvisor started is never its operator, whatever
// its uid, sandboxed or not, over the control socket or HTTP, with or
// without a credential it found; the CLI of the same user and a token
// holder still are; another local user without the credential is not.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// doorServers are the echo server (what the probes try to restart) and
// the hostile server three ways: under the strictest sandbox
// (network = "none": no TCP at all, but Unix sockets by path), under a
// sandbox that may reach the host's own port only, and unsandboxed.
func doorServers() string {
	return echoBlock() + fmt.Sprintf(`
server "boxed" {
  command = %[1]s
  sandbox {
    network = "none"
  }
}

server "porthole" {
  command = %[1]s
  sandbox {
    connect = [@PORT@]
  }
}

server "bare" {
  command = %[1]s
}
`, hclString(bins["hostile"]))
}

// runCLIAs is runCLI run with cred and env (nil: the test's own).
func runCLIAs(t *testing.T, cred *syscall.Credential, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins[testutil.Mcpvisor], args...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("mcpvisor %s did not return within 60s", strings.Join(args, " "))
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running mcpvisor %s: %v", strings.Join(args, " "), err)
	}
	return code, out.String(), errb.String()
}

// echoPid is the echo server's pid once it is ready: a restart replaces
// the process.
func echoPid(t *testing.T, mv *mcpvisor, token string) int {
	t.Helper()
	pid, _ := echoStatus(t, mv, token)
	return pid
}

// probeDoor runs the door probes of every hostile server and requires
// each refused, and the echo server not restarted by them.
func probeDoor(t *testing.T, mv *mcpvisor, cs *mcp.ClientSession, token, found string) {
	t.Helper()
	before := echoPid(t, mv, token)
	for _, srv := range []string{"boxed", "porthole", "bare"} {
		tool := srv + "__probe"
		waitTool(t, cs, tool)
		got := probe(t, cs, tool, "control-socket", "echo")
		if !strings.HasPrefix(got, "refused:") {
			t.Errorf("%s: control-socket: %s; want refused", srv, got)
		} else if srv != "bare" && strings.Contains(got, "no control socket found") {
			// A sandboxed server's view hides the runtime dir
			// (docs/sandbox.md, "What the server sees"): it finds no
			// socket to connect to; "bare" shows the door itself.
		} else if !strings.Contains(got, ": 403") {
			// Landlock before ABI 9 lets a connect by path through: the
			// door itself must refuse it.
			t.Errorf("%s: control-socket reached no socket: %s; want 403s", srv, got)
		}
		if srv == "boxed" {
			continue // no TCP under network = "none"
		}
		arg := mv.addr + " echo"
		if found != "" {
			arg += " " + found
		}
		got = probe(t, cs, tool, "control-http", arg)
		if !strings.HasPrefix(got, "refused:") || !strings.Contains(got, "403") {
			t.Errorf("%s: control-http: %s; want refused with 403", srv, got)
		}
	}
	if after := echoPid(t, mv, token); after != before {
		t.Errorf("the echo server's pid went from %d to %d: a probe restarted it", before, after)
	}
	if !strings.Contains(mv.stderr.String(), "is a process mcpvisor started") {
		t.Errorf("no refusal of a server's process in the host's log")
	}
}

// TestDoorRefusesServers: as root and as nobody, the hostile servers are
// refused at the control socket and the HTTP operator endpoints, with
// every credential they can find; the CLI of the same user still
// operates the host.
func TestDoorRefusesServers(t *testing.T) {
	t.Run("root", func(t *testing.T) {
		mv := startMcpvisor(t, doorServers())
		cs := connectClient(t, mv)
		probeDoor(t, mv, cs, "", "")
		cliOperates(t, mv, nil, nil)
		// Another host of the same user (another config) refuses this
		// host's servers too: its pid names a socket in the runtime dir.
		other := startMcpvisor(t, echoBlock())
		sock := controlSocketOf(t, other)
		before := echoPid(t, other, "")
		if got := probe(t, cs, "bare__probe", "control-socket", "echo "+sock); !strings.HasPrefix(got, "refused:") || strings.Count(got, "): 403") != strings.Count(got, "): ") {
			t.Errorf("an unsandboxed server of one host at another host's socket: %s; want every answer 403", got)
		}
		if after := echoPid(t, other, ""); after != before {
			t.Errorf("the other host's echo went from pid %d to %d", before, after)
		}
	})
	t.Run("nobody", func(t *testing.T) {
		mv, home := startMcpvisorAsUser(t, "", doorServers())
		cs := connectClient(t, mv)
		probeDoor(t, mv, cs, "", "")
		env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "XDG_RUNTIME_DIR=" + filepath.Join(home, "run")}
		cliOperates(t, mv, &syscall.Credential{Uid: nobodyUID, Gid: nobodyGID}, env)
	})
}

// cliOperates: the CLI as the host's user reads the status and restarts
// echo through the control socket.
func cliOperates(t *testing.T, mv *mcpvisor, cred *syscall.Credential, env []string) {
	t.Helper()
	before := echoPid(t, mv, "")
	if code, out, errOut := runCLIAs(t, cred, env, "status", "-config", mv.config); code != 0 || !strings.Contains(out, "echo") {
		t.Errorf("mcpvisor status as the host's user: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := runCLIAs(t, cred, env, "restart", "-config", mv.config, "echo"); code != 0 {
		t.Errorf("mcpvisor restart as the host's user: exit %d\n%s%s", code, out, errOut)
	}
	if after := echoPid(t, mv, ""); after == before {
		t.Errorf("echo's pid stayed %d after mcpvisor restart", before)
	}
}

// TestDoorTokenHolder: with a shared token, a token holder operates the
// host over HTTP, and a server that found the token does not.
func TestDoorTokenHolder(t *testing.T) {
	const token = "the-door-test-shared-token"
	mv := startMcpvisorWith(t, fmt.Sprintf("  auth {\n    token = %s\n  }\n", hclString(token)), doorServers())
	cs, err := connectWithToken(t, mv, token)
	if err != nil {
		t.Fatal(err)
	}
	probeDoor(t, mv, cs, token, token)
	before := echoPid(t, mv, token)
	if resp, body := consoleRequest(t, mv, "POST", "/control/restart?server=echo", http.Header{"Authorization": {"Bearer " + token}}); resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /control/restart with the token: %s %s", resp.Status, body)
	}
	if after := echoPid(t, mv, token); after == before {
		t.Errorf("echo's pid stayed %d after a token holder's restart", before)
	}
}

// TestDoorOtherUser: on the shipped-style config (loopback, no token),
// another local user without the credential gets 403 from /control and
// /ui over HTTP, and nothing restarts.
func TestDoorOtherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running as another user needs root")
	}
	if err := os.Chmod(filepath.Dir(bins["hostile"]), 0o755); err != nil {
		t.Fatal(err)
	}
	mv := startMcpvisor(t, echoBlock())
	before := echoPid(t, mv, "")
	cmd := exec.Command(bins["hostile"])
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=/nonexistent"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobodyUID, Gid: nobodyGID}}
	client := mcp.NewClient(&mcp.Implementation{Name: "door-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("starting the hostile server as nobody: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	got := probe(t, cs, "probe", "control-http", mv.addr+" echo")
	if n := strings.Count(got, "): "); !strings.HasPrefix(got, "refused:") || n < 2 || strings.Count(got, "): 403") != n {
		t.Errorf("another user's POST /control/restart and GET /ui: %s; want every answer 403", got)
	}
	if got := probe(t, cs, "probe", "control-socket", "echo"); !strings.HasPrefix(got, "refused:") {
		t.Errorf("another user at the control socket: %s; want refused", got)
	}
	if after := echoPid(t, mv, ""); after != before {
		t.Errorf("the echo server's pid went from %d to %d after another user's requests", before, after)
	}
}

// TestDoorConsoleLogin: `mcpvisor ui -print` prints a one-time login
// address that opens the console once.
func TestDoorConsoleLogin(t *testing.T) {
	mv := startMcpvisor(t, echoBlock())
	code, out, errOut := runCLI(t, "ui", "-print", "-config", mv.config)
	url := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(url, "http://"+mv.addr+"/ui/login?code=") {
		t.Fatalf("mcpvisor ui -print: exit %d: %q %s", code, out, errOut)
	}
	hc := newHTTPClient(t, 30*time.Second)
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cookies := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || len(cookies) != 1 {
		t.Fatalf("GET the login address: %s, cookies %q; want 303 with a cookie", resp.Status, resp.Header.Values("Set-Cookie"))
	}
	if again, err := hc.Get(url); err != nil || again.StatusCode != http.StatusForbidden {
		t.Errorf("GET the login address again: %v %v; want 403", again.Status, err)
	} else {
		again.Body.Close()
	}
	if r, body := consoleRequest(t, mv, "GET", "/ui", http.Header{"Cookie": {cookies[0].Name + "=" + cookies[0].Value}}); r.StatusCode != http.StatusOK || !strings.Contains(body, "echo") {
		t.Errorf("GET /ui with the console session: %s", r.Status)
	}
}

// controlSocketOf is the control socket of mv, run with the test's own
// environment.
func controlSocketOf(t *testing.T, mv *mcpvisor) string {
	t.Helper()
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("mcpvisor-%d", os.Getuid()))
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
		dir = filepath.Join(x, "mcpvisor")
	}
	socks, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("*-%d.sock", mv.pid)))
	if len(socks) != 1 {
		t.Fatalf("the control socket of pid %d in %s: %v", mv.pid, dir, socks)
	}
	return socks[0]
}
