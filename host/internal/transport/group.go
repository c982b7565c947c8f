//go:build unix

package transport

/*
Design note: nothing outlives mcpvisor, even SIGKILL.

A server runs in a process group of its own so that one signal reaches the
wrapper (`sh -c`, `npx`) and everything it started. Stop uses that. But when
mcpvisor is SIGKILLed it stops nothing, and Pdeathsig reaches only the direct
child: the wrapper's children are reparented to init and live on.

So on Linux every group has a keeper: a tiny /bin/sh started before the
server, as the group's leader, which ignores the terminal and termination
signals and blocks reading a pipe whose only write end is held by mcpvisor
(close-on-exec, so no other child inherits it). Whatever way mcpvisor dies,
the kernel closes that end; the keeper's read returns EOF and it runs
`kill -9 0`, which kills the whole group, itself included. The server is
then started into the keeper's group (setpgid to the keeper's pid).

Why a keeper beside the server and not a shim above it (Nomad's executor,
containerd's shim): the server stays mcpvisor's direct child, so its exit is
still seen by mcpvisor's own cmd.Wait the moment it happens, with the exact
exit status or signal, its pid is the one status shows, its pipes go
straight to mcpvisor, and Stop signals the group as before. A shim would
have to relay all of that. The keeper needs no re-exec of mcpvisor either,
so embedders whose binary is not mcpvisor get the same guarantee.

Why the keeper leads the group rather than joining the server's: the group
exists, with its keeper, before the server runs a single instruction, so
there is no window in which a child of the server escapes; and while the
keeper lives the group id cannot be reused by an unrelated process, so the
keeper's `kill -9 0` and Stop's kill(-pgid) never hit a stranger.

Where the keeper cannot run (no /bin/sh, as in scratch images; not Linux),
the server leads its own group as before and only Pdeathsig (Linux) covers
a SIGKILL of mcpvisor.
*/

import (
	"errors"
	"sync"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// ProcessGroup is the process group one server process (a stdio server or
// a plugin) and everything it starts run in. Build the child's exec.Cmd with
// SysProcAttr, call Started once it runs, and Release when the group is
// empty (or has been SIGKILLed).
type ProcessGroup struct {
	keeper *groupKeeper // nil: no keeper; the child leads its own group
	pgid   int          // 0 until known: the keeper's pid, else the child's
	// initPid is a contained server's init (docs/design.md §18.1): the
	// child, leading the group, and not the server's to be measured.
	initPid int

	releaseOnce sync.Once
}

// NewProcessGroup prepares the group for one child process, starting its
// keeper where the platform has one. A keeper that cannot start is logged
// and the group falls back to the child leading it (Pdeathsig only).
func NewProcessGroup(logger hclog.Logger) *ProcessGroup {
	k, err := startGroupKeeper()
	if err != nil {
		if !errors.Is(err, errNoKeeper) && logger != nil {
			logger.Warn("no process group keeper; if mcpvisor is killed, processes the server starts may outlive it", "error", err)
		}
		return &ProcessGroup{}
	}
	return &ProcessGroup{keeper: k, pgid: k.pid()}
}

// SysProcAttr is the child's SysProcAttr: the keeper's group when there is
// one, else a new group the child leads.
func (g *ProcessGroup) SysProcAttr() *syscall.SysProcAttr {
	return childProcAttr(g.pgid)
}

// Started records the child's pid: without a keeper, it is the group id.
func (g *ProcessGroup) Started(pid int) {
	if g.keeper == nil {
		g.pgid = pid
	}
}

// Pgid is the group's id (0 before Started when there is no keeper).
func (g *ProcessGroup) Pgid() int { return g.pgid }

// Keeper is the keeper's pid (or a contained server's init's), 0 without
// one: a member of the group that is not the server's, left out when the
// group is measured.
func (g *ProcessGroup) Keeper() int {
	if g.keeper == nil && g.initPid != 0 {
		return g.initPid
	}
	return g.keeper.pid()
}

// startedInit records the child of a group without a keeper that is a
// contained server's init: it leads the group and is not measured.
func (g *ProcessGroup) startedInit(pid int) {
	g.Started(pid)
	g.initPid = pid
}

// Signal sends sig to every process in the group. The keeper ignores every
// signal but SIGKILL, so SIGTERM reaches only the server and its children.
func (g *ProcessGroup) Signal(sig syscall.Signal) error {
	if g.pgid <= 0 {
		return nil
	}
	if err := syscall.Kill(-g.pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// Empty reports whether no live process but the keeper is left in the
// group.
func (g *ProcessGroup) Empty() bool {
	if g.pgid <= 0 {
		return true
	}
	return !groupHasLiveMembers(g.pgid, g.keeper.pid())
}

// Release ends the keeper and reaps it. Call it once the group is empty or
// SIGKILLed: after Release nothing kills the group when mcpvisor dies.
func (g *ProcessGroup) Release() {
	g.releaseOnce.Do(func() {
		if g.keeper != nil {
			g.keeper.stop()
		}
	})
}
