//go:build unix

package transport_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
	"github.com/mcpvisor/mcpvisor/host/internal/transport"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

func TestProcessExitIsDetected(t *testing.T) {
	p, err := transport.StartProcess(transport.ProcessConfig{
		Command: "sh", Args: []string{"-c", "echo dying >&2; exit 7"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("exit not detected")
	}
	err = p.Err()
	if !errors.Is(err, recovery.ErrProcessExited) {
		t.Fatalf("Err() = %v, want it to wrap ErrProcessExited", err)
	}
	if !strings.Contains(err.Error(), "exit status 7") || !strings.Contains(err.Error(), "dying") {
		t.Errorf("Err() = %q, want the exit status and the stderr tail", err)
	}
}

// A wrapper whose child holds the pipes (like npx or sh -c) must not keep
// the process alive past Close, and Close must leave nothing in the group.
func TestCloseKillsWholeGroup(t *testing.T) {
	// sh ignores TERM here and its background child ignores it too, so
	// only the SIGKILL step can end them.
	p, err := transport.StartProcess(transport.ProcessConfig{
		Command: "sh", Args: []string{"-c", "trap '' TERM; (trap '' TERM; sleep 300) & wait"},
	})
	if err != nil {
		t.Fatal(err)
	}
	pgid, want := groupOf(t, p)
	deadline := time.Now().Add(5 * time.Second)
	for len(testutil.GroupMembers(pgid)) < want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := len(testutil.GroupMembers(pgid)); n < want {
		t.Fatalf("expected the wrapper and its child (and the keeper) in the group, found %d of %d", n, want)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if left := testutil.GroupMembers(pgid); len(left) > 0 {
		t.Fatalf("processes left in group %d after Close: %v", pgid, left)
	}
}

// When the wrapper dies but its child lives on holding the pipes, Done must
// still fire (cmd.Wait returns for the direct child) and Close must reap the
// orphan.
func TestWrapperDeathWithOrphanHoldingPipes(t *testing.T) {
	p, err := transport.StartProcess(transport.ProcessConfig{
		Command: "sh", Args: []string{"-c", "sleep 300 & wait"},
	})
	if err != nil {
		t.Fatal(err)
	}
	pgid, want := groupOf(t, p)
	deadline := time.Now().Add(5 * time.Second)
	for len(testutil.GroupMembers(pgid)) < want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	syscall.Kill(p.Pid(), syscall.SIGKILL) // the wrapper only
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("wrapper death not detected while its child holds the pipes")
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if left := testutil.GroupMembers(pgid); len(left) > 0 {
		t.Fatalf("orphans left in group %d: %v", pgid, left)
	}
}

// groupOf returns p's process group and how many members a wrapper with
// one child makes: 2, plus the group's keeper when it has one (the keeper
// leads the group, so the group id is not the wrapper's pid).
func groupOf(t *testing.T, p *transport.Process) (pgid, members int) {
	t.Helper()
	pgid, err := syscall.Getpgid(p.Pid())
	if err != nil {
		t.Fatal(err)
	}
	if pgid != p.Pid() {
		return pgid, 3
	}
	return pgid, 2
}

func TestChildEnvIsTheSafeSetPlusOwn(t *testing.T) {
	t.Setenv("MCPVISOR_TEST_SECRET", "hunter2")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "nope")
	t.Setenv("XDG_CONFIG_HOME", "/tmp/xdg")
	t.Setenv("HOME", "/home/test")
	env := transport.ChildEnv(map[string]string{"API_KEY": "k", "HOME": "/override"})
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := got[k]; dup {
			t.Errorf("variable %s appears twice", k)
		}
		got[k] = v
	}
	for _, k := range []string{"MCPVISOR_TEST_SECRET", "AWS_SECRET_ACCESS_KEY"} {
		if _, ok := got[k]; ok {
			t.Errorf("host secret %s leaked into the child environment", k)
		}
	}
	if got["XDG_CONFIG_HOME"] != "/tmp/xdg" || got["API_KEY"] != "k" || got["HOME"] != "/override" {
		t.Errorf("unexpected environment: %v", got)
	}
	if _, ok := got["PATH"]; !ok {
		t.Error("PATH missing")
	}
}

func TestMissingCommand(t *testing.T) {
	_, err := transport.StartProcess(transport.ProcessConfig{Command: "/nonexistent/mcp-server"})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/mcp-server") {
		t.Fatalf("err = %v, want one naming the command", err)
	}
}

// A stderr line longer than the log takes is cut, and the pipe stays
// open: the server's next stderr write succeeds (with the pipe closed it
// would die of SIGPIPE) and is logged too.
func TestLongStderrLineIsCutNotFatal(t *testing.T) {
	p, err := transport.StartProcess(transport.ProcessConfig{
		Command: "sh", Args: []string{"-c", `head -c 2000000 /dev/zero | tr '\0' x >&2; echo >&2; echo still-writing >&2; exit 3`},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("exit not detected")
	}
	msg := p.Err().Error()
	if !strings.Contains(msg, "exit status 3") {
		t.Errorf("Err() = %.300q, want exit status 3 (not a death by SIGPIPE)", msg)
	}
	tail := p.StderrTail()
	if len(tail) < 2 || tail[len(tail)-1] != "still-writing" {
		t.Fatalf("stderr tail ends %q, want the line after the long one", tail[max(0, len(tail)-1):])
	}
	long := tail[len(tail)-2]
	if !strings.HasPrefix(long, "xxxx") || !strings.Contains(long, "more bytes of this line not shown") || len(long) > 10<<10 {
		t.Errorf("long line logged as %d bytes: %.120q…", len(long), long)
	}
}

// A line on a server's stdout that is not an MCP message (a banner, a
// stray print) is skipped, not fatal: the session goes on, and the line is
// kept for error messages.
func TestStrayStdoutLineIsSkipped(t *testing.T) {
	p, err := transport.StartProcess(transport.ProcessConfig{
		Command: "sh", Args: []string{"-c", `echo 'hello, I am not MCP'; echo '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}'; sleep 30`},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	conn, err := p.Transport().Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msg, err := conn.Read(context.Background())
	if err != nil {
		t.Fatalf("Read after a stray line: %v, want the next message", err)
	}
	if req, ok := msg.(*jsonrpc.Request); !ok || req.Method != "notifications/message" {
		t.Fatalf("read %#v, want the notification after the stray line", msg)
	}
	if got := p.Stray(); got != "hello, I am not MCP" {
		t.Errorf("Stray() = %q", got)
	}
}
