package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

/*
Design note: the init of a contained server (docs/design.md §18.1).

The launcher of a contained start is pid 1 of the server's pid namespace,
and stays so: it starts the server as the namespace's second process and
then only reaps. Pid 1 of a namespace is what the kernel reparents
orphans to (a setsid double-forked daemon included), and when it dies the
kernel kills every process of the namespace. So:

  - the server's exit is the end of the namespace: the init exits with the
    server, and nothing the server started outlives it, whichever way it
    ends — a crash, a stop by mcpvisor (SIGTERM to the group, SIGKILL after
    the grace), a SIGKILL of mcpvisor (the init's Pdeathsig), idle stop,
    max_lifetime, a reload;
  - the server is not pid 1, so it keeps the ordinary signal semantics (a
    server without a SIGTERM handler dies of SIGTERM) and need not reap.

The init leads the server's process group (there is no keeper: a process
in a new pid namespace cannot join a group outside it, and needs none),
so mcpvisor's group signals reach it along with the server and all the
server's group. It ignores SIGTERM, SIGINT, SIGHUP and SIGQUIT rather than
forwarding them: the same signal already reached the server directly,
and a forwarded copy would make it twice. A signal sent to its pid alone
does nothing; signal the group (kill -TERM -PID). SIGKILL ends it and the
namespace.

The init cannot die of the server's signal (the kernel protects a
namespace's init from its own signals), so it reports the server's wait
status on a pipe (fd 3) before it exits; mcpvisor reads it (ExitErr) and
shows "signal: killed" or "exit status 1" exactly as for a server it
started itself. The init closes its stdio once the server runs (mcpvisor
sees EOF when the server's side closes) and makes itself non-dumpable,
so the server cannot read its /proc files or ptrace it.
*/

// statusFD is the init's end of the status pipe.
const statusFD = 3

// runInit starts spec's command as this pid namespace's second process
// and stays as its init until it exits; it returns only if the command
// could not start.
func runInit(spec *Spec) error {
	syscall.CloseOnExec(statusFD)
	// Handled (not ignored) while the server is started, so the server
	// starts with the default dispositions.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	pid, err := syscall.ForkExec(spec.Path, spec.Args, &syscall.ProcAttr{Env: spec.Env, Files: []uintptr{0, 1, 2}})
	if err != nil {
		if errors.Is(err, syscall.EACCES) {
			return fmt.Errorf("starting %s: %w (if it is a script, is the interpreter on its #! line outside the sandbox's read paths? `mcpvisor sandbox NAME` lists them)", spec.Path, err)
		}
		return fmt.Errorf("starting %s: %w", spec.Path, err)
	}
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGPIPE)
	for fd := range 3 {
		syscall.Close(fd)
	}
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			os.Exit(ExitLaunchFailed) // cannot be: the server is its child
		}
		if got != pid {
			continue // an orphan of the server's, reaped
		}
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], uint32(ws))
		syscall.Write(statusFD, b[:])
		code := ws.ExitStatus()
		if ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		// The kernel kills the rest of the namespace now.
		os.Exit(code)
	}
}

// statusPipe gives cmd the init's end of the status pipe, as fd 3.
func (s *Spec) statusPipe(cmd *exec.Cmd) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	s.status = [2]*os.File{r, w}
	cmd.ExtraFiles = []*os.File{w}
	return nil
}

// Started closes mcpvisor's copy of the init's end of the status pipe;
// call it once the launcher has started.
func (s *Spec) Started() {
	if s != nil && s.status[1] != nil {
		s.status[1].Close()
	}
}

// CloseStatus closes both ends of the status pipe: for a start that
// failed.
func (s *Spec) CloseStatus() {
	if s == nil {
		return
	}
	for _, f := range s.status {
		if f != nil {
			f.Close()
		}
	}
}

// ExitErr is the error of the server's exit, given err, the launcher's
// (cmd.Wait's): for a contained start, the status the init reported, as
// cmd.Wait would have said it of the server itself ("exit status 1",
// "signal: killed"; nil for status 0). When the init reported nothing
// (the launch failed, or the init was killed), err.
func (s *Spec) ExitErr(err error) error {
	if s == nil || s.status[0] == nil {
		return err
	}
	defer s.status[0].Close()
	var b [4]byte
	if _, rerr := io.ReadFull(s.status[0], b[:]); rerr != nil {
		return err
	}
	ws := syscall.WaitStatus(binary.LittleEndian.Uint32(b[:]))
	if ws.Exited() && ws.ExitStatus() == 0 {
		return nil
	}
	return &serverExit{ws}
}

// serverExit is a contained server's exit, told by its init.
type serverExit struct{ ws syscall.WaitStatus }

// Error says it as os.ProcessState does.
func (e *serverExit) Error() string {
	switch {
	case e.ws.Exited():
		return fmt.Sprintf("exit status %d", e.ws.ExitStatus())
	case e.ws.Signaled():
		s := "signal: " + e.ws.Signal().String()
		if e.ws.CoreDump() {
			s += " (core dumped)"
		}
		return s
	}
	return fmt.Sprintf("wait status %#x", uint32(e.ws))
}

// ExitCode is the server's exit code, -1 when a signal ended it.
func (e *serverExit) ExitCode() int { return e.ws.ExitStatus() }
