package transport

/*
Design note: owning a stdio server process.

mcpvisor must see a stdio server die the moment it dies, and must leave
nothing behind when it stops one — including the grandchildren of wrappers
like `npx` or `sh -c`, which hold the pipes open after the wrapper is gone.

So the host owns the exec.Cmd itself rather than using the SDK's
CommandTransport:

  - The child runs in its own process group (Setpgid), so one signal to -pgid
    reaches the wrapper and everything it started. On Linux Pdeathsig kills
    the child if mcpvisor itself dies without cleaning up.
  - stdin/stdout/stderr are os.Pipe files handed to the child directly.
    exec.Cmd then starts no copying goroutines, so cmd.Wait returns as soon
    as the direct child exits — even when a grandchild still holds the pipes.
  - One goroutine calls cmd.Wait and closes `exited`. That channel is the
    death signal; nothing polls.
  - Stop is: close stdin (a well-behaved server exits on EOF), wait briefly,
    SIGTERM the group, SIGKILL the group after the grace period. Stragglers
    in the group (orphaned grandchildren) are signalled even when the direct
    child is already gone.
*/

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/wire"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

const (
	// stdinCloseGrace is how long a server gets to exit on its own after its
	// stdin is closed, before it is sent SIGTERM.
	stdinCloseGrace = 300 * time.Millisecond

	// termGrace is how long the process group gets after SIGTERM before
	// SIGKILL (DESIGN.md §4: 2 s).
	termGrace = 2 * time.Second

	// stragglerPoll is how often Stop checks whether orphaned members of the
	// group are gone after the direct child has exited. This is the only
	// poll, and it runs only while stopping.
	stragglerPoll = 20 * time.Millisecond

	// stderrTailLines is how many stderr lines are kept for error messages.
	stderrTailLines = 20

	// maxStderrLine bounds one logged stderr line. A longer line is cut
	// (the rest up to its newline is counted and dropped) but never stops
	// the reading: a server whose stderr pipe closed would die of EPIPE on
	// its next write.
	maxStderrLine = 8 << 10
)

// ProcessConfig describes a stdio server process.
type ProcessConfig struct {
	// Command is the program; looked up in PATH when it has no slash.
	Command string
	// Args are the program's arguments.
	Args []string
	// Env is the child's complete environment (see ChildEnv).
	Env []string
	// Dir is the working directory; empty means the host's.
	Dir string
	// Logger receives each stderr line at info level.
	Logger hclog.Logger
}

// Process is a running stdio server in its own process group.
type Process struct {
	cmd    *exec.Cmd
	pgid   int
	stdin  *os.File // our write end of the child's stdin
	stdout *os.File // our read end of the child's stdout
	logger hclog.Logger

	exited  chan struct{}
	waitErr error // set before exited closes

	tailMu sync.Mutex
	tail   []string

	stopOnce sync.Once
	stopErr  error
}

// StartProcess starts the process. The returned Process's Transport speaks
// newline-delimited JSON-RPC over its stdin and stdout.
func StartProcess(cfg ProcessConfig) (*Process, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	path, err := exec.LookPath(cfg.Command)
	if err != nil {
		return nil, fmt.Errorf("command %q not found: %w (check `command` and PATH)", cfg.Command, err)
	}

	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		return nil, err
	}

	cmd := exec.Command(path, cfg.Args...)
	cmd.Env = cfg.Env
	cmd.Dir = cfg.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		closeAll(inR, inW, outR, outW, errR, errW)
		return nil, fmt.Errorf("starting %q: %w", cfg.Command, err)
	}
	// The child has its copies; ours of its ends must go, or we would never
	// see EOF on stdout.
	closeAll(inR, outW, errW)

	p := &Process{
		cmd:    cmd,
		pgid:   cmd.Process.Pid,
		stdin:  inW,
		stdout: outR,
		logger: logger,
		exited: make(chan struct{}),
	}
	stderrDone := make(chan struct{})
	go p.readStderr(errR, stderrDone)
	go func() {
		err := cmd.Wait()
		// Give the stderr reader a moment to take the last lines (the crash
		// message is usually there) without waiting on grandchildren that
		// may hold the pipe open.
		select {
		case <-stderrDone:
		case <-time.After(50 * time.Millisecond):
		}
		p.waitErr = err
		close(p.exited)
	}()
	return p, nil
}

func (p *Process) readStderr(r *os.File, done chan<- struct{}) {
	defer close(done)
	defer r.Close()
	br := bufio.NewReaderSize(r, maxStderrLine)
	for {
		line, cut, err := readCappedLine(br)
		if len(line) > 0 || cut > 0 || err == nil {
			text := string(line)
			if cut > 0 {
				text += fmt.Sprintf(" … (%d more bytes of this line not shown)", cut)
			}
			p.logger.Info(text, "stream", "stderr")
			p.tailMu.Lock()
			p.tail = append(p.tail, text)
			if len(p.tail) > stderrTailLines {
				p.tail = p.tail[len(p.tail)-stderrTailLines:]
			}
			p.tailMu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// readCappedLine returns the next line without its line ending, at most
// the reader's buffer size of it, and how many bytes beyond that it
// dropped. err is set at the end of input (the line is the last,
// unterminated one, possibly empty).
func readCappedLine(br *bufio.Reader) (line []byte, cut int, err error) {
	line, err = br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		line = bytes.Clone(line)
		for errors.Is(err, bufio.ErrBufferFull) {
			var more []byte
			more, err = br.ReadSlice('\n')
			cut += len(more)
		}
		if err == nil {
			cut-- // the newline
		}
	}
	line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
	return line, cut, err
}

// Pid is the direct child's process id, which is also its process group id.
func (p *Process) Pid() int { return p.pgid }

// Transport returns the JSON-RPC transport over the process's stdio.
func (p *Process) Transport() mcp.Transport {
	return wire.NewLineTransport(p.stdout, p.stdin)
}

// Done is closed when the direct child has exited.
func (p *Process) Done() <-chan struct{} { return p.exited }

// Err describes how the process exited, with the last stderr lines. It wraps
// recovery.ErrProcessExited. It is nil while the process runs.
func (p *Process) Err() error {
	select {
	case <-p.exited:
	default:
		return nil
	}
	how := "exited"
	if p.waitErr != nil {
		how = p.waitErr.Error()
	} else {
		how = "exit status 0"
	}
	p.tailMu.Lock()
	tail := strings.Join(p.tail, "\n")
	p.tailMu.Unlock()
	if tail != "" {
		return fmt.Errorf("%w (%s); last stderr: %s", recovery.ErrProcessExited, how, recovery.Redact(lastLines(tail, 3)))
	}
	return fmt.Errorf("%w (%s)", recovery.ErrProcessExited, how)
}

// StderrTail returns the last lines the process wrote to stderr.
func (p *Process) StderrTail() []string {
	p.tailMu.Lock()
	defer p.tailMu.Unlock()
	return append([]string(nil), p.tail...)
}

// Close stops the process group: stdin closed, SIGTERM, then SIGKILL after
// the grace period. It returns when the direct child has been reaped and the
// group is empty, or when ctx is done (the group has been SIGKILLed by then).
func (p *Process) Close(ctx context.Context) error {
	p.stopOnce.Do(func() { p.stopErr = p.stop(ctx) })
	return p.stopErr
}

func (p *Process) stop(ctx context.Context) error {
	p.stdin.Close()
	defer p.stdout.Close()

	// A polite server exits on stdin EOF.
	if p.waitExited(ctx, stdinCloseGrace) && p.groupGone() {
		return nil
	}
	p.signalGroup(syscall.SIGTERM)
	if p.waitExited(ctx, termGrace) && p.waitGroupGone(ctx, termGrace) {
		return nil
	}
	p.signalGroup(syscall.SIGKILL)
	// After SIGKILL the direct child is reaped promptly by the Wait goroutine.
	select {
	case <-p.exited:
	case <-time.After(termGrace):
		return fmt.Errorf("process %d did not exit after SIGKILL", p.pgid)
	}
	p.waitGroupGone(context.Background(), termGrace)
	return nil
}

// waitExited waits up to d (or ctx) for the direct child to exit.
func (p *Process) waitExited(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.exited:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// groupGone reports whether no process is left in the child's group.
func (p *Process) groupGone() bool {
	return !groupHasLiveMembers(p.pgid)
}

func (p *Process) waitGroupGone(ctx context.Context, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !p.groupGone() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(stragglerPoll)
	}
	return true
}

func (p *Process) signalGroup(sig syscall.Signal) {
	if err := syscall.Kill(-p.pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		p.logger.Debug("signalling process group failed", "pgid", p.pgid, "signal", sig, "error", err)
	}
}

func closeAll(cs ...io.Closer) {
	for _, c := range cs {
		c.Close()
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// safeEnvNames are the host variables a child inherits (DESIGN.md §10). The
// host's other variables — tokens, cloud credentials — never reach a server.
var safeEnvNames = []string{"PATH", "HOME", "USER", "LANG", "LC_ALL", "TERM", "SHELL", "TMPDIR"}

// ChildEnv builds a child's environment: the safe set of the host's
// variables, every XDG_* variable, then the block's own env on top.
func ChildEnv(own map[string]string) []string {
	var env []string
	seen := map[string]bool{}
	for _, kv := range os.Environ() {
		k, _, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		if _, override := own[k]; override {
			continue
		}
		if strings.HasPrefix(k, "XDG_") || contains(safeEnvNames, k) {
			if !seen[k] {
				seen[k] = true
				env = append(env, kv)
			}
		}
	}
	for k, v := range own {
		env = append(env, k+"="+v)
	}
	return env
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
