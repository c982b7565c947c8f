package transport

/*
Design note: owning a stdio server process.

mcpvisor must see a stdio server die the moment it dies, and must leave
nothing behind when it stops one — including the grandchildren of wrappers
like `npx` or `sh -c`, which hold the pipes open after the wrapper is gone.

So the host owns the exec.Cmd itself rather than using the SDK's
CommandTransport:

  - The child runs in a process group of its own, so one signal to -pgid
    reaches the wrapper and everything it started. On Linux Pdeathsig kills
    the child, and the group's keeper the rest of the group, if mcpvisor
    itself dies without cleaning up (see group.go).
  - stdin/stdout/stderr are os.Pipe files handed to the child directly.
    exec.Cmd then starts no copying goroutines, so cmd.Wait returns as soon
    as the direct child exits — even when a grandchild still holds the pipes.
  - One goroutine calls cmd.Wait and closes `exited`. That channel is the
    death signal; nothing polls.
  - Stop is: close stdin (a well-behaved server exits on EOF), wait briefly,
    SIGTERM the group, SIGKILL the group after the grace period. Stragglers
    in the group (orphaned grandchildren) are signalled even when the direct
    child is already gone. Once the group is empty its keeper is released.
*/

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/time/rate"

	"github.com/mcpvisor/mcpvisor/host/config"
	bounds "github.com/mcpvisor/mcpvisor/host/internal/limits"
	"github.com/mcpvisor/mcpvisor/host/internal/resources"
	"github.com/mcpvisor/mcpvisor/host/internal/sandbox"
	"github.com/mcpvisor/mcpvisor/host/internal/wire"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

const (
	// stdinCloseGrace is how long a server gets to exit on its own after its
	// stdin is closed, before it is sent SIGTERM.
	stdinCloseGrace = 300 * time.Millisecond

	// termGrace is how long the process group gets after SIGTERM before
	// SIGKILL (docs/design.md §4: 2 s).
	termGrace = 2 * time.Second

	// stragglerPoll is how often Stop checks whether orphaned members of the
	// group are gone after the direct child has exited. This is the only
	// poll, and it runs only while stopping.
	stragglerPoll = 20 * time.Millisecond

	// stderrTailLines is how many stderr lines are kept for error messages.
	stderrTailLines = 20

	// stderrRate and stderrBurst bound how many stderr lines per second a
	// server gets logged: a chatty server cannot flood mcpvisor's log. The
	// lines over the limit are counted and summarized ("N lines dropped").
	stderrRate  = 100
	stderrBurst = 500

	// stderrBytesRate and stderrBytesBurst bound the same in bytes: lines
	// of up to maxStderrLine within the line rate would still be 800 kB a
	// second, tens of GB a day (docs/design.md §17: logs are bounded in
	// bytes). 32 KiB a second is a chatty server's debug log.
	stderrBytesRate  = 32 << 10
	stderrBytesBurst = 256 << 10

	// StderrTotalRate and StderrTotalBurst are the default bound, in bytes,
	// of what every server's stderr together adds to the host's log
	// (Options.StderrTotal): sixteen servers at their own bound would
	// still be half a megabyte a second.
	StderrTotalRate  = 128 << 10
	StderrTotalBurst = 1 << 20

	// strayRate and strayBurst bound the warnings about stray stdout lines.
	strayRate  = 1
	strayBurst = 5

	// strayShown is how much of a stray stdout line is logged and kept.
	strayShown = 200

	// maxStderrLine bounds one logged stderr line. A longer line is cut
	// (the rest up to its newline is counted and dropped) but never stops
	// the reading: a server whose stderr pipe closed would die of EPIPE on
	// its next write.
	maxStderrLine = 8 << 10
)

// newLimits makes a server process's limits; the tests swap in
// resources.NewWithoutCgroups to try the fallback on a machine with
// cgroups.
var newLimits = resources.New

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
	// MaxMessageSize bounds one JSON-RPC line on the server's stdout (the
	// server's max_message_size); zero means the go-sdk's default. A
	// response over it fails its call and the session goes on.
	MaxMessageSize int64
	// Server names the server block in the error of such a call.
	Server string

	// Sandbox, when set, confines the process with the kernel
	// (docs/design.md §18.1).
	Sandbox *config.Sandbox
	// Rlimits are set and Cgroups joined before the command runs
	// (docs/design.md §18.2).
	Rlimits []sandbox.Rlimit
	Cgroups []string
	// Limits bounds the process group's memory, processes and open files
	// (the server's limits block; docs/design.md §18.2). Zero: no limits.
	Limits config.Limits
	// OnLimitStop, if set, is called once when the process group is
	// stopped for going over its memory limit, with the reason (which
	// wraps ErrMemoryLimit), before the stop begins.
	OnLimitStop func(err error)
	// StderrTotal, if set, is the bound in bytes shared by every server's
	// stderr (Options.StderrTotal); each process has its own bound too.
	StderrTotal *rate.Limiter
	// LimitHits counts the stderr lines not logged (limit stderr_bytes).
	LimitHits *bounds.Hits
	// StderrLog, if set, keeps the stderr lines that pass the limits
	// above, a mark where some were dropped, and a mark at each start
	// (Options.StderrLog).
	StderrLog StderrLog
}

// StderrLog keeps a server's recent stderr across its processes, for
// `mcpvisor logs` (host/internal/serverlog.Log). Only one goroutine of a
// process calls Line and Dropped; Started is called before it begins.
type StderrLog interface {
	// Line keeps one stderr line that passed the limits.
	Line(text string)
	// Dropped says that lines (bytes of them) were dropped by the limits
	// since the last kept line.
	Dropped(lines, bytes int)
	// Started marks the start of the process pid.
	Started(pid int)
}

// Process is a running stdio server in its own process group.
type Process struct {
	cmd    *exec.Cmd
	group  *ProcessGroup
	stdin  *os.File // our write end of the child's stdin
	stdout *os.File // our read end of the child's stdout
	logger hclog.Logger
	// maxMessage bounds one JSON-RPC line (ProcessConfig.MaxMessageSize).
	maxMessage int64
	server     string

	exited  chan struct{}
	waitErr error // set before exited closes

	tailMu sync.Mutex
	tail   []string
	// stray is the first stray stdout line (cut to strayShown bytes).
	stray string
	// strays counts stray stdout lines; strayLimit and errLimit rate-limit
	// what is logged of them and of stderr.
	strays     int
	strayLimit *rate.Limiter
	errLimit   *rate.Limiter // stderr lines a second
	errBytes   *rate.Limiter // stderr bytes a second, this process's
	errTotal   *rate.Limiter // stderr bytes a second, every server's; may be nil
	hits       *bounds.Hits
	kept       StderrLog // may be nil
	dropped    int       // stderr lines not logged since the last logged one
	droppedB   int       // their bytes

	// tmp is the private temporary directory of a sandboxed server,
	// removed once its group is gone.
	tmp string

	stopOnce sync.Once
	stopErr  error

	// limits enforces ProcessConfig.Limits; nil without limits.
	limits      *resources.Group
	onLimitStop func(error)
	// memErr is set when the group was stopped (or OOM-killed) for its
	// memory limit; Err then wraps it.
	memErr atomic.Pointer[resources.MemoryLimitError]
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
		return nil, fmt.Errorf("%w: command %q not found: %w (check `command` and PATH)", recovery.ErrCannotStart, cfg.Command, err)
	}

	spec, tmp, warning, err := sandbox.Prepare(cfg.Sandbox, cfg.Server, cfg.Command, path, cfg.Args, cfg.Env, cfg.Dir)
	if err != nil {
		// A missing path or a kernel without the Landlock it needs: no
		// retry can fix that.
		return nil, fmt.Errorf("%w: %w", recovery.ErrCannotStart, err)
	}
	if warning != "" {
		logger.Warn("sandbox not fully enforced: " + warning)
	}
	spec.Rlimits, spec.Cgroups = cfg.Rlimits, cfg.Cgroups
	// The limits block's cgroups and rlimits are applied by the launcher
	// in the child, before the command runs: no window in which the
	// server (or a child it forks) runs outside them (docs/design.md
	// §18.2).
	var limits *resources.Group
	if !cfg.Limits.IsZero() {
		if limits, err = newLimits(cfg.Server, cfg.Limits, ErrMemoryLimit, logger); err != nil {
			// No cgroup for a limit that needs one, and no best_effort:
			// no retry makes one (docs/sandbox.md, "Limits").
			if tmp != "" {
				os.RemoveAll(tmp)
			}
			return nil, fmt.Errorf("%w: server %q: its limits cannot be enforced here: %w", recovery.ErrCannotStart, cfg.Server, err)
		}
		ls := limits.Spec()
		spec.Rlimits = append(spec.Rlimits, ls.Rlimits...)
		spec.Cgroups = append(spec.Cgroups, ls.CgroupDirs...)
	}
	// removeTmp undoes what the start made (the private temp directory,
	// the cgroups) on every failed start below.
	removeTmp := func() {
		spec.CloseStatus()
		limits.Close()
		if tmp != "" {
			os.RemoveAll(tmp)
		}
	}
	// The launcher (host/internal/sandbox) confines itself and execs the
	// command in place (same pid, same group, same keeper) or, for a
	// sandbox block, stays as the init of the server's own pid namespace
	// (docs/design.md §18.1).
	cmd := exec.Command(path, cfg.Args...)
	if spec.Needed() {
		if cmd, err = sandbox.Command(spec); err != nil {
			removeTmp()
			return nil, fmt.Errorf("%w: %w", recovery.ErrCannotStart, err)
		}
	}

	inR, inW, err := os.Pipe()
	if err != nil {
		removeTmp()
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		removeTmp()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		removeTmp()
		return nil, err
	}

	var group *ProcessGroup
	if spec.Contained() {
		// The server's init leads the group and takes the whole pid
		// namespace with it when it dies: no keeper (a process in a new
		// pid namespace cannot join a group outside it).
		group = &ProcessGroup{}
	} else {
		group = NewProcessGroup(logger)
	}
	if !spec.Needed() {
		cmd.Env = cfg.Env
	}
	cmd.Dir = cfg.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.SysProcAttr = group.SysProcAttr()
	sandbox.ProcAttr(spec, cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		group.Release()
		closeAll(inR, inW, outR, outW, errR, errW)
		removeTmp()
		if spec.OwnNetwork && errors.Is(err, syscall.EPERM) {
			return nil, fmt.Errorf("%w: starting %q: %w: network = \"none\" needs a network namespace (and, when mcpvisor is not root, a user namespace), which this system refused (docs/sandbox.md, \"Kernel requirements\")", recovery.ErrCannotStart, cfg.Command, err)
		}
		if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.ENOEXEC) || errors.Is(err, fs.ErrNotExist) {
			// Not executable, not a program, or its working directory
			// is missing: no retry can fix that.
			return nil, fmt.Errorf("%w: starting %q: %w", recovery.ErrCannotStart, cfg.Command, err)
		}
		return nil, fmt.Errorf("starting %q: %w", cfg.Command, err)
	}
	if spec.Contained() {
		group.startedInit(cmd.Process.Pid)
	} else {
		group.Started(cmd.Process.Pid)
	}
	spec.Started()
	// The child has its copies; ours of its ends must go, or we would never
	// see EOF on stdout.
	closeAll(inR, outW, errW)

	p := &Process{
		cmd:    cmd,
		group:  group,
		stdin:  inW,
		stdout: outR,
		logger: logger,
		exited: make(chan struct{}),
		tmp:    tmp,

		maxMessage: cfg.MaxMessageSize,
		server:     cfg.Server,

		strayLimit: rate.NewLimiter(strayRate, strayBurst),
		errLimit:   rate.NewLimiter(stderrRate, stderrBurst),
		errBytes:   rate.NewLimiter(stderrBytesRate, stderrBytesBurst),
		errTotal:   cfg.StderrTotal,
		hits:       cfg.LimitHits,
		kept:       cfg.StderrLog,

		limits:      limits,
		onLimitStop: cfg.OnLimitStop,
	}
	if limits != nil {
		kv := []any{"pid", cmd.Process.Pid, "mode", limits.Mode()}
		if l := cfg.Limits; l.Memory > 0 {
			kv = append(kv, "memory", config.FormatSize(l.Memory))
		}
		if l := cfg.Limits; l.Processes > 0 {
			kv = append(kv, "processes", l.Processes)
		}
		if l := cfg.Limits; l.OpenFiles > 0 {
			kv = append(kv, "open_files", l.OpenFiles)
		}
		logger.Debug("server process limits applied", kv...)
		go limits.Watch(group.Pgid(), group.Keeper(), p.exited, p.overMemory)
	}
	if p.kept != nil {
		p.kept.Started(cmd.Process.Pid)
	}
	stderrDone := make(chan struct{})
	go p.readStderr(errR, stderrDone)
	go func() {
		err := spec.ExitErr(cmd.Wait())
		// Give the stderr reader a moment to take the last lines (the crash
		// message is usually there) without waiting on grandchildren that
		// may hold the pipe open.
		select {
		case <-stderrDone:
		case <-time.After(50 * time.Millisecond):
		}
		p.waitErr = err
		if limits != nil && limits.MemoryByCgroup() {
			// A kernel OOM kill in the memory cgroup is the same reason
			// as a sampled excess.
			if e := limits.Check(0, 0); e != nil && p.memErr.CompareAndSwap(nil, e) {
				p.limitStopped(e)
			}
		}
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
			p.logStderr(text)
			p.tailMu.Lock()
			p.tail = append(p.tail, text)
			if len(p.tail) > stderrTailLines {
				p.tail = p.tail[len(p.tail)-stderrTailLines:]
			}
			p.tailMu.Unlock()
		}
		if err != nil {
			if p.kept != nil && p.dropped > 0 {
				// The last lines were dropped: the kept log says so.
				p.kept.Dropped(p.dropped, p.droppedB)
			}
			return
		}
	}
}

// logStderr logs a stderr line within the rate limits, in lines and in
// bytes, of this process and of every server together; over them, lines
// are counted (and their bytes) and the counts are logged with the next
// line that fits. Only one goroutine (readStderr) calls it.
func (p *Process) logStderr(text string) {
	n := len(text) + 1
	now := time.Now()
	if !p.errLimit.AllowN(now, 1) || !p.errBytes.AllowN(now, n) || (p.errTotal != nil && !p.errTotal.AllowN(now, n)) {
		p.dropped++
		p.droppedB += n
		p.hits.Hit(bounds.StderrBytes)
		return
	}
	if p.dropped > 0 {
		p.logger.Warn("stderr lines dropped: the server writes faster than the log takes", "dropped", p.dropped, "dropped_bytes", p.droppedB,
			"stream", "stderr", "lines_per_second", stderrRate, "bytes_per_second", stderrBytesRate)
		if p.kept != nil {
			p.kept.Dropped(p.dropped, p.droppedB)
		}
		p.dropped, p.droppedB = 0, 0
	}
	p.logger.Info(text, "stream", "stderr")
	if p.kept != nil {
		p.kept.Line(text)
	}
}

// strayLine is told of a line on the server's stdout that is not an MCP
// message; it is skipped, logged within a rate limit, and the first one is
// kept for error messages (a server that never answers initialize because
// it printed a banner says so).
func (p *Process) strayLine(line []byte) {
	shown := string(line[:min(len(line), strayShown)])
	p.tailMu.Lock()
	p.strays++
	if p.stray == "" {
		p.stray = shown
	}
	p.tailMu.Unlock()
	if p.strayLimit.Allow() {
		p.logger.Warn("server wrote a line to stdout that is not an MCP message; skipped (stdout is for protocol messages only: a server must log to stderr)",
			"line", recovery.Redact(shown), "stream", "stdout")
	}
}

// Stray returns the first line the server wrote to stdout that was not an
// MCP message, or "".
func (p *Process) Stray() string {
	p.tailMu.Lock()
	defer p.tailMu.Unlock()
	return p.stray
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

// Pid is the direct child's process id. Its process group is led by the
// group's keeper where there is one (see group.go), else by the child.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

var _ ProcessLink = (*Process)(nil)
var _ UsageReporter = (*Process)(nil)

// Usage is what a server's process group uses (resources.Usage).
type Usage = resources.Usage

// UsageReporter is a link whose process group can be measured, for
// status and the metrics gauges.
type UsageReporter interface {
	// Usage measures the group; ok is false once it has exited or where
	// it cannot be measured.
	Usage() (u Usage, ok bool)
}

// Transport returns the JSON-RPC transport over the process's stdio.
func (p *Process) Transport() mcp.Transport {
	return wire.NewServerLineTransport(p.stdout, p.stdin, p.strayLine, p.maxMessage, p.tooLarge)
}

// tooLarge is the error of a call whose response line was longer than
// the server's max_message_size.
func (p *Process) tooLarge(limit int64) error {
	p.logger.Warn("upstream response over max_message_size refused", "limit", limit)
	return MessageTooLarge(p.server, "", limit, -1)
}

// Done is closed when the direct child has exited.
func (p *Process) Done() <-chan struct{} { return p.exited }

// Err describes how the process exited, with the last stderr lines. It wraps
// recovery.ErrProcessExited, and ErrMemoryLimit when the group was stopped
// (or OOM-killed) for its memory limit: "memory limit 512MiB exceeded".
// It is nil while the process runs.
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
	stray := p.stray
	p.tailMu.Unlock()
	if e := p.memErr.Load(); e != nil {
		return fmt.Errorf("%w: %w (%s)%s", recovery.ErrProcessExited, e, how, tailNote(tail, stray))
	}
	return fmt.Errorf("%w (%s)%s", recovery.ErrProcessExited, how, tailNote(tail, stray))
}

// tailNote is what Err adds of the last stderr lines and the first stray
// stdout line.
func tailNote(tail, stray string) string {
	var more string
	if tail != "" {
		more += "; last stderr: " + recovery.Redact(lastLines(tail, 3))
	}
	if stray != "" {
		more += fmt.Sprintf("; it wrote %q to stdout, which is for MCP messages only", recovery.Redact(stray))
	}
	return more
}

// overMemory is told by the limits' watcher that the group is over its
// memory limit: the group is stopped through Close, and the exit that
// follows is a crash whose error wraps ErrMemoryLimit, so the supervisor
// restarts the server and counts it against the retry budget.
func (p *Process) overMemory(e *resources.MemoryLimitError) {
	if !p.memErr.CompareAndSwap(nil, e) {
		return
	}
	p.limitStopped(e)
	go p.Close(context.Background())
}

// limitStopped logs a memory-limit stop and tells OnLimitStop.
func (p *Process) limitStopped(e *resources.MemoryLimitError) {
	kv := []any{"pid", p.Pid(), "limit", config.FormatSize(e.Limit)}
	if e.OOMKill {
		kv = append(kv, "by", "kernel OOM killer in the server's memory cgroup")
	} else {
		kv = append(kv, "rss", fmt.Sprintf("%.1fMiB", float64(e.RSS)/(1<<20)))
	}
	p.logger.Warn(e.Error()+"; stopping the server's process group, the supervisor restarts it", kv...)
	if p.onLimitStop != nil {
		p.onLimitStop(e)
	}
}

// Usage measures the server's processes: the members of its cgroup where
// its limits made one, else its process group (the keeper left out). ok
// is false once the server has exited, or where it cannot be measured.
func (p *Process) Usage() (u resources.Usage, ok bool) {
	select {
	case <-p.exited:
		return resources.Usage{}, false
	default:
	}
	if p.limits != nil {
		return p.limits.Usage(p.group.Pgid(), p.group.Keeper())
	}
	return resources.GroupUsage(p.group.Pgid(), p.group.Keeper())
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
	if p.tmp != "" {
		// Last, once the group is gone or SIGKILLed.
		defer os.RemoveAll(p.tmp)
	}
	// Runs last: the cgroups go once the group is gone.
	defer p.limits.Close()
	p.stdin.Close()
	defer p.stdout.Close()
	// The keeper guards the group until stop is done with it.
	defer p.group.Release()

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
		return fmt.Errorf("process %d did not exit after SIGKILL", p.Pid())
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
	return p.group.Empty()
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
	if err := p.group.Signal(sig); err != nil {
		p.logger.Debug("signalling process group failed", "pgid", p.group.Pgid(), "signal", sig, "error", err)
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

// safeEnvNames are the host variables a child inherits (docs/design.md §10). The
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

// ErrMemoryLimit is wrapped by the error of a process stopped because its
// process group went over its limits.memory (docs/design.md §18.2); the
// supervisor counts the restart that follows with reason memory_limit.
var ErrMemoryLimit = errors.New("memory limit exceeded")
