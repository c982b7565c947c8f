package plugin

/*
Design note: mcpvisor starts plugin processes itself.

go-plugin starts a plugin through a runner. Its own, the command runner in
go-plugin/internal/cmdrunner, starts the exec.Cmd it is given after setting
cmd.Stdin = os.Stdin — the host's standard input. Under `mcpvisor run
--stdio` that is the MCP client's pipe, so a plugin that read it would steal
(and could read) the client's messages and break the session.
ClientConfig.RunnerFunc replaces that runner, and the command runner is
internal to go-plugin, so runner below is mcpvisor's own: the command
runner's few lines of exec.Cmd plumbing, plus

  - stdin on /dev/null: a plugin that reads it gets EOF at once;
  - the plugin in its own process group (transport.ProcessGroup, as a
    stdio server's), and Kill that kills the whole group, so that a plugin
    killed for missing its handshake leaves no child behind;
  - the binary's SHA-256 checked just before exec against the hash the block
    requires (sha256, else the lock file), and the process started from the
    very bytes that were hashed (image.go), not from the path again.
    go-plugin's SecureConfig cannot do it any more: with a RunnerFunc,
    go-plugin checks the path of its placeholder command, which is empty;
  - a kill when the dial's context ends before the handshake: the
    supervisor stopping must not wait out go-plugin's StartTimeout;
  - stderr read here rather than by go-plugin: every line goes into the tail
    that error messages quote, and the lines the server's log would show
    pass the server's output rate limit before go-plugin logs them at their
    level.
*/

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/mcpvisor/mcpvisor/host/internal/transport"
)

// maxOutputLine bounds one line of plugin stderr, like go-plugin's own
// default buffer; the rest of a longer line is counted and dropped.
const maxOutputLine = 64 << 10

// runner is one plugin process, started for go-plugin (runner.Runner).
type runner struct {
	cmd    *exec.Cmd
	group  *transport.ProcessGroup
	path   string
	want   string       // the SHA-256 the binary must have; "" when unlocked
	logger hclog.Logger // the server's
	out    *output

	stdoutR  *os.File // our end of the plugin's stdout: the handshake line and anything after it
	stdoutW  *os.File // the plugin's end, closed once it has its copy
	stderrR  *os.File // our end of the plugin's stderr
	stderrW  *os.File // the plugin's end, closed once it has its copy
	forward  *io.PipeReader
	forwardW *io.PipeWriter // the admitted stderr lines, for go-plugin to log

	// socketDir is the directory go-plugin made for the plugin's socket.
	// go-plugin removes it in Kill, but only for a process that started.
	socketDir string

	abort     <-chan struct{} // the dial's context is done
	handshook <-chan struct{} // closed when go-plugin's start returned

	pid int
}

// checksumError is the runner's refusal to start a binary whose SHA-256
// is not the one its block requires.
type checksumError struct {
	path string
	got  string // the binary's hash; "" when it could not be read
	err  error  // why it could not be read
}

func (e *checksumError) Error() string {
	if e.err != nil {
		return fmt.Sprintf("cannot hash %s: %v", e.path, e.err)
	}
	return fmt.Sprintf("%s has SHA-256 %s", e.path, e.got)
}

// newRunner prepares the plugin process from go-plugin's spec, which
// carries the environment go-plugin adds (magic cookie, mTLS certificate,
// socket directory). The pipes are os.Pipe files handed to the child
// directly, so exec.Cmd starts no copying goroutine of its own.
func (d *Dialer) newRunner(spec *exec.Cmd, socketDir, path, want string, group *transport.ProcessGroup, out *output, abort, handshook <-chan struct{}) (*runner, error) {
	cmd := exec.Command(path, d.args...)
	cmd.Env = append(append([]string(nil), d.env...), spec.Env...)
	cmd.Dir = d.dir
	cmd.SysProcAttr = group.SysProcAttr()
	// cmd.Stdin stays nil: the child's standard input is /dev/null.
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		os.RemoveAll(socketDir)
		return nil, err
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdoutR.Close()
		stdoutW.Close()
		os.RemoveAll(socketDir)
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = stdoutW, stderrW
	forward, forwardW := io.Pipe()
	return &runner{
		cmd:       cmd,
		path:      path,
		want:      want,
		group:     group,
		logger:    d.logger,
		out:       out,
		stdoutR:   stdoutR,
		stdoutW:   stdoutW,
		stderrR:   stderrR,
		stderrW:   stderrW,
		forward:   forward,
		forwardW:  forwardW,
		socketDir: socketDir,
		abort:     abort,
		handshook: handshook,
	}, nil
}

// Start checks the binary's hash and starts the process, a locked one
// from the verified image of its binary.
func (r *runner) Start(context.Context) error {
	if r.want != "" {
		im, err := verifiedImage(r.path, r.want, r.socketDir)
		if err != nil {
			r.abandon()
			return err
		}
		defer im.close()
		// Args[0] stays the binary's path: the plugin sees its own name.
		r.cmd.Path = im.execPath
		r.cmd.ExtraFiles = im.files
	}
	if err := r.cmd.Start(); err != nil {
		r.abandon()
		return err
	}
	// The child has its copies; ours must go, or we would never see EOF.
	r.stdoutW.Close()
	r.stderrW.Close()
	r.pid = r.cmd.Process.Pid
	r.group.Started(r.pid)
	r.logger.Debug("plugin started", "path", r.path, "pid", r.pid)
	go r.copyStderr()
	go r.killOnAbort()
	return nil
}

// abandon releases what a process that never started would have used.
func (r *runner) abandon() {
	for _, f := range []*os.File{r.stdoutR, r.stdoutW, r.stderrR, r.stderrW} {
		f.Close()
	}
	r.forwardW.Close()
	os.RemoveAll(r.socketDir)
}

// killOnAbort kills the plugin when the dial gives up before go-plugin's
// start has returned: the supervisor is stopping, or connect_timeout has
// passed (go-plugin's own StartTimeout, set to the same deadline, also
// kills it then; whichever comes first).
func (r *runner) killOnAbort() {
	select {
	case <-r.abort:
		select {
		case <-r.handshook:
		default:
			r.logger.Debug("killing a plugin that has not completed its handshake", "pid", r.pid)
			r.killGroup()
		}
	case <-r.handshook:
	}
}

// copyStderr feeds every stderr line to the tail and passes the lines the
// log would show through the rate limit to go-plugin, which logs them.
func (r *runner) copyStderr() {
	defer r.stderrR.Close()
	defer r.forwardW.Close()
	defer r.out.limiter.Flush()
	br := bufio.NewReaderSize(r.stderrR, maxOutputLine)
	var level lineLeveler
	for {
		line, cut, err := transport.ReadCappedLine(br)
		if len(line) > 0 || cut > 0 {
			text := string(line)
			if cut > 0 {
				text += fmt.Sprintf(" … (%d more bytes of this line not shown)", cut)
			}
			r.out.tail.addLine(text)
			// A line below the log level is dropped by go-plugin anyway;
			// it must not spend the budget of the lines that are shown.
			if level.of(text) >= r.logger.GetLevel() && r.out.limiter.Allow() {
				// go-plugin reads until EOF; a failed write means it is gone.
				r.forwardW.Write([]byte(text + "\n"))
			}
		}
		if err != nil {
			return
		}
	}
}

// levelPrefixes are the line prefixes go-plugin logs a plain stderr line
// by.
var levelPrefixes = []struct {
	prefix string
	level  hclog.Level
}{
	{"[TRACE]", hclog.Trace}, {"[DEBUG]", hclog.Debug}, {"[INFO]", hclog.Info}, {"[WARN]", hclog.Warn}, {"[ERROR]", hclog.Error},
}

// lineLeveler tells the level go-plugin logs a plugin's stderr line at: a
// JSON line's own @level; otherwise the level of a [LEVEL] prefix, error
// from the first line of a panic on, and debug for any other line.
type lineLeveler struct {
	inPanic bool
}

func (l *lineLeveler) of(line string) hclog.Level {
	if strings.HasPrefix(line, "{") {
		var e struct {
			Level string `json:"@level"`
		}
		if json.Unmarshal([]byte(line), &e) == nil {
			if lvl := hclog.LevelFromString(e.Level); lvl != hclog.NoLevel {
				return lvl
			}
			return hclog.Debug
		}
	}
	for _, p := range levelPrefixes {
		if strings.HasPrefix(line, p.prefix) {
			return p.level
		}
	}
	if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") {
		l.inPanic = true
	}
	if l.inPanic {
		return hclog.Error
	}
	return hclog.Debug
}

// Wait waits for the process to exit. go-plugin calls it once it has read
// stdout to the end.
func (r *runner) Wait(context.Context) error {
	err := r.cmd.Wait()
	r.stdoutR.Close()
	return err
}

// Kill kills the plugin's whole process group.
func (r *runner) Kill(context.Context) error {
	r.killGroup()
	return nil
}

// killGroup SIGKILLs the plugin's process group, which is the plugin and
// anything it started.
func (r *runner) killGroup() {
	if r.pid <= 0 {
		return
	}
	if err := r.group.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		r.logger.Debug("killing plugin process group failed", "pgid", r.group.Pgid(), "error", err)
	}
}

func (r *runner) Stdout() io.ReadCloser { return r.stdoutR }
func (r *runner) Stderr() io.ReadCloser { return r.forward }
func (r *runner) Name() string          { return r.path }

// ID is the process id; empty for a process that never started, which
// go-plugin's Kill then leaves alone (abandon has cleaned up).
func (r *runner) ID() string {
	if r.pid == 0 {
		return ""
	}
	return strconv.Itoa(r.pid)
}

// Diagnose adds to go-plugin's error about an unrecognised handshake line.
func (r *runner) Diagnose(context.Context) string {
	return fmt.Sprintf("%s is not an mcpvisor transport plugin, was built for another platform, or failed the go-plugin handshake", r.path)
}

// The plugin runs on this machine, so addresses need no translation.
func (*runner) PluginToHost(network, addr string) (string, string, error) { return network, addr, nil }
func (*runner) HostToPlugin(network, addr string) (string, string, error) { return network, addr, nil }
