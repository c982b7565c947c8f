package cli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// `mcpvisor sandbox NAME` prints the effective rules — the block's and the
// runtime defaults — without starting anything; its errors exit like the
// other commands' (docs/design.md §11).
func TestSandboxCommand(t *testing.T) {
	dir := t.TempDir()
	ref, notes := filepath.Join(dir, "reference"), filepath.Join(dir, "notes")
	os.Mkdir(ref, 0o755)
	os.Mkdir(notes, 0o755)
	marker := filepath.Join(dir, "started")
	cfg := writeConfig(t, fmt.Sprintf(`
server "notes" {
  command = "sh"
  args    = ["-c", "touch %s"]
  sandbox {
    read    = [%q]
    write   = [%q]
    network = "none"
  }
  limits {
    memory    = "64MiB"
    processes = 32
  }
}
server "web" {
  command = "sh"
  sandbox {
    connect      = [443, 8443]
    udp          = true
    connect_unix = ["/run/x.sock"]
  }
}
server "gone" {
  command = "sh"
  sandbox {
    read = [%q]
  }
}
server "plain" {
  command = "sh"
}
server "stranger" {
  command = "sh"
  sandbox {
    user = "no-such-user-mcpvisor"
  }
}
`, marker, ref, notes, filepath.Join(dir, "missing")))

	code, out, errOut := run("sandbox", "-config", cfg, "notes")
	if code != 0 {
		t.Fatalf("sandbox notes: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		`server "notes": landlock: read 1, write 1; net none`,
		"read (read and execute):\n", "  /usr\n", "  /etc/passwd\n", "  " + ref + "\n",
		"write (read, write, create, remove):\n", "  /dev/null\n", "  " + notes + "\n",
		"a private temporary directory",
		"view: only the paths above exist for the server", "  /etc/shadow\n",
		"network: none",
		"limits: memory 64MiB, processes 32",
		"system calls (seccomp", "  refused: BPF programs and perf events: bpf, perf_event_open\n",
		"  refused: mknod and mknodat of a character or block device\n",
		"  refused: Unix sockets (socket(AF_UNIX)); socketpair allowed",
		"capabilities: none, in every set",
		"user: mcpvisor's own",
		// Every layer, and what this kernel does of it.
		"layers on this machine, as this user:\n",
		"  landlock fs:",
		"  network namespace:  yes",
		"  seccomp:", "  pid namespace:",
		"  cgroup memory:", "  cgroup pids:", "  kill on stop:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("sandbox notes: missing %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "  /etc\n") {
		t.Errorf("sandbox notes: /etc is granted whole:\n%s", out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("sandbox started the server")
	}

	code, out, _ = run("sandbox", "-config", cfg, "web")
	if code != 0 || !strings.Contains(out, "connect: TCP ports 443, 8443 only") || !strings.Contains(out, "network: any") ||
		!strings.Contains(out, "connect_unix (Unix sockets it may connect to):\n  /run/x.sock\n") || !strings.Contains(out, "allowed: Unix sockets") ||
		!strings.Contains(out, "allowed: UDP to any host and port (udp = true)") {
		t.Errorf("sandbox web: exit %d\n%s", code, out)
	}
	code, out, _ = run("sandbox", "-config", cfg, "plain")
	if code != 0 || !strings.Contains(out, "no sandbox block") {
		t.Errorf("sandbox plain: exit %d\n%s", code, out)
	}
	code, _, errOut = run("sandbox", "-config", cfg, "gone")
	if code != 1 || !strings.Contains(errOut, filepath.Join(dir, "missing")) || !strings.Contains(errOut, "does not exist") {
		t.Errorf("sandbox gone: want exit 1 naming the missing path; got %d %q", code, errOut)
	}
	code, _, errOut = run("sandbox", "-config", cfg, "note")
	if code != 2 || !strings.Contains(errOut, `did you mean "notes"`) {
		t.Errorf("sandbox note: want exit 2 and a suggestion; got %d %q", code, errOut)
	}
	if code, _, _ = run("sandbox", "-config", cfg); code != 2 {
		t.Errorf("sandbox without a server: exit %d, want 2", code)
	}
	code, out, _ = run("sandbox", "-config", cfg, "stranger")
	if code != 0 || !strings.Contains(out, `user: no-such-user-mcpvisor: `) || !strings.Contains(out, "not a user on this machine") {
		t.Errorf("sandbox stranger: want the user's problem on its line; got %d\n%s", code, out)
	}
	code, _, errOut = run("validate", "-config", cfg)
	if code != 0 || !strings.Contains(errOut, `Warning: server "stranger": user in the sandbox of "stranger" is "no-such-user-mcpvisor"`) {
		t.Errorf("validate: want a warning about the unknown user; got %d %q", code, errOut)
	}
	// validate accepts the file and warns about the missing path.
	code, _, errOut = run("validate", "-config", cfg)
	if code != 0 || !strings.Contains(errOut, `server "gone": sandbox path `+filepath.Join(dir, "missing")+" does not exist") {
		t.Errorf("validate: want exit 0 and a warning naming the missing path; got %d %q", code, errOut)
	}
}

// `mcpvisor status` shows each server's sandbox summary in SANDBOX ("-"
// without one), and -json carries it as "sandbox".
func TestStatusShowsSandbox(t *testing.T) {
	addr := freePort(t)
	cfg := writeConfig(t, fmt.Sprintf(`host {
  listen = %q
}
server "boxed" {
  command = %q
  sandbox {
    read    = [%q]
    network = "none"
  }
}
server "free" {
  command = %q
}
`, addr, echoBin, filepath.Dir(echoBin), echoBin))
	startRun(t, nil, cfg, addr)
	var out string
	// Through the control socket, as an operator: an anonymous caller of
	// /status sees readiness only (docs/auth.md).
	testutil.Eventually(t, 30*time.Second, "both servers ready", func() bool {
		_, out, _ = runBin(t, nil, "status", "-config", cfg)
		return strings.Count(out, " ready ") == 2
	})
	lines := strings.Split(out, "\n")
	var header, boxed, free string
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "SERVER"):
			header = l
		case strings.HasPrefix(l, "boxed"):
			boxed = l
		case strings.HasPrefix(l, "free"):
			free = l
		}
	}
	col := strings.Index(header, "SANDBOX")
	if col < 0 {
		t.Fatalf("no SANDBOX column:\n%s", out)
	}
	if !strings.HasPrefix(boxed[col:], "landlock: read 1, write 0; net none") {
		t.Errorf("boxed's SANDBOX: %q\n%s", boxed[col:], out)
	}
	if !strings.HasPrefix(free[col:], "- ") {
		t.Errorf("free's SANDBOX: %q\n%s", free[col:], out)
	}
	_, js, _ := runBin(t, nil, "status", "-config", cfg, "-json")
	if !strings.Contains(js, `"sandbox": "landlock: read 1, write 0; net none"`) {
		t.Errorf("status -json lacks the sandbox:\n%s", js)
	}
}
