package transport

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// keeperShell runs the group keeper. An absolute path, because the
	// host's PATH may not hold a shell and the keeper's environment is
	// empty.
	keeperShell = "/bin/sh"

	// keeperScript is the keeper's whole program, shell builtins only. It
	// ignores the signals Stop and terminals send to the group, says it is
	// ready, and blocks until its stdin reaches EOF — which happens only
	// when mcpvisor's write end is closed, that is when mcpvisor dies —
	// then SIGKILLs its own process group, the server's.
	keeperScript = `trap '' HUP INT QUIT TERM; echo ready; read -r line; kill -9 0`

	// keeperStartTimeout bounds the wait for the keeper's "ready". A
	// keeper that is not ready by then is killed and the server starts
	// without one.
	keeperStartTimeout = 5 * time.Second
)

// errNoKeeper means the platform has no group keeper.
var errNoKeeper = errors.New("no process group keeper on this platform")

// childProcAttr puts the child into process group pgid (a new group it
// leads when pgid is 0) and has the kernel kill it if mcpvisor dies
// without stopping it. The keeper kills the rest of the group.
func childProcAttr(pgid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pgid: pgid, Pdeathsig: syscall.SIGKILL}
}

// groupKeeper is the running keeper of one process group (see group.go).
type groupKeeper struct {
	cmd *exec.Cmd
	// hold is the write end of the keeper's stdin. Nothing is ever
	// written: its closing, by mcpvisor's death, is the keeper's signal.
	hold *os.File
}

// startGroupKeeper starts a keeper leading a new process group and waits
// until it ignores the signals it must survive.
func startGroupKeeper() (*groupKeeper, error) {
	holdR, holdW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		closeAll(holdR, holdW)
		return nil, err
	}
	defer readyR.Close()
	cmd := exec.Command(keeperShell, "-c", keeperScript)
	cmd.Env = []string{}
	cmd.Dir = "/" // never pin the server's working directory
	cmd.Stdin, cmd.Stdout = holdR, readyW
	// No Pdeathsig: the keeper must outlive mcpvisor long enough to kill
	// the group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	closeAll(holdR, readyW)
	if err != nil {
		holdW.Close()
		return nil, fmt.Errorf("starting %s: %w", keeperShell, err)
	}
	k := &groupKeeper{cmd: cmd, hold: holdW}
	// Until the keeper has run its trap, Stop's SIGTERM would kill it.
	readyR.SetReadDeadline(time.Now().Add(keeperStartTimeout))
	buf := make([]byte, len("ready\n"))
	if _, err := io.ReadFull(readyR, buf); err != nil || !bytes.Equal(buf, []byte("ready\n")) {
		k.stop()
		if err == nil {
			err = fmt.Errorf("unexpected output %q", buf)
		}
		return nil, fmt.Errorf("%s keeper not ready: %w", keeperShell, err)
	}
	return k, nil
}

// pid is the keeper's pid, the group's id; 0 for no keeper.
func (k *groupKeeper) pid() int {
	if k == nil {
		return 0
	}
	return k.cmd.Process.Pid
}

// stop kills and reaps the keeper, then drops the pipe it watches. Killing
// it first matters: its EOF would kill the group.
func (k *groupKeeper) stop() {
	k.cmd.Process.Kill()
	k.cmd.Wait()
	k.hold.Close()
}

// groupHasLiveMembers reports whether any non-zombie process other than
// except is in process group pgid. kill(-pgid, 0) alone is not enough: an
// orphaned member that was killed stays a zombie until init reaps it, and in
// containers whose init does not reap promptly that would hold Stop for the
// full grace; and the group's keeper is always there.
func groupHasLiveMembers(pgid, except int) bool {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == except {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the parenthesised command: state ppid pgrp …
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err == nil && g == pgid {
			return true
		}
	}
	return false
}
