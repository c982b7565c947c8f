package transport

/*
Design note: process groups on Windows are job objects.

Windows has no process groups and no signals a console-less child can be
sent, so a server and everything it starts run in a job object instead, as
go-plugin and Nomad do. The job is created with
JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE and its handle is not inheritable, so
only mcpvisor holds it: whatever way mcpvisor ends, the kernel closes the
handle and kills every process in the job. Started assigns the child to the
job; processes it starts afterwards are in the job too. A child that starts
a process before Started has run (a few microseconds after the child
starts) leaves that process outside the job.

Signal(SIGKILL) terminates the job. There is no SIGTERM: Stop's polite step
is closing the server's stdin, and after the grace period the job is
terminated. Empty asks the job how many processes are active.

If the job cannot be created or the child cannot be assigned to it, the
group degrades to the child alone: SIGKILL terminates the child (not what
it started) and nothing kills it if mcpvisor is killed. That is logged.
docs/operations.md describes the Windows behaviour.
*/

import (
	"errors"
	"sync"
	"syscall"
	"unsafe"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/windows"
)

// ProcessGroup is the job object one server process (a stdio server or a
// plugin) and everything it starts run in. Build the child's exec.Cmd with
// SysProcAttr, call Started once it runs, and Release when the group is
// empty (or has been killed).
type ProcessGroup struct {
	logger hclog.Logger
	pid    int // the child's pid, 0 before Started

	mu   sync.Mutex     // guards job and proc
	job  windows.Handle // 0: no job; only the child itself is killed
	proc windows.Handle // the child, held open so its pid is not reused

	releaseOnce sync.Once
}

// NewProcessGroup creates the job object for one child process. A job that
// cannot be created is logged and the group degrades to the child alone.
func NewProcessGroup(logger hclog.Logger) *ProcessGroup {
	g := &ProcessGroup{logger: logger}
	job, err := newKillOnCloseJob()
	if err != nil {
		g.warn("no job object; stopping a server kills only its own process, and if mcpvisor is killed the server may outlive it", err)
		return g
	}
	g.job = job
	return g
}

// newKillOnCloseJob creates a job whose processes all die when its last
// handle is closed.
func newKillOnCloseJob() (windows.Handle, error) {
	job, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return 0, err
	}
	info := windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION{
		BasicLimitInformation: windows.JOBOBJECT_BASIC_LIMIT_INFORMATION{
			LimitFlags: windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
		},
	}
	if _, err := windows.SetInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		windows.CloseHandle(job)
		return 0, err
	}
	return job, nil
}

// SysProcAttr is the child's SysProcAttr. The job is joined in Started.
func (g *ProcessGroup) SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{}
}

// Started records the child's pid and assigns the child to the job. A
// child that cannot be assigned is logged and the group degrades to it.
// Call it right after the child started, while its exec.Cmd still holds
// the process (so the pid is the child's).
func (g *ProcessGroup) Started(pid int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pid = pid
	h, err := windows.OpenProcess(windows.PROCESS_SET_QUOTA|windows.PROCESS_TERMINATE, false, uint32(pid))
	if err == nil {
		g.proc = h
	}
	if g.job == 0 {
		return
	}
	if err == nil {
		err = windows.AssignProcessToJobObject(g.job, h)
	}
	if err == nil {
		return
	}
	g.warn("cannot put the server in its job object; stopping it kills only its own process, and if mcpvisor is killed it may outlive it", err)
	windows.CloseHandle(g.job)
	g.job = 0
}

// Pgid is the child's pid (0 before Started): status and logs show it.
func (g *ProcessGroup) Pgid() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pid
}

// Keeper is 0: Windows groups have no keeper process.
func (g *ProcessGroup) Keeper() int { return 0 }

// startedInit is Started: there is no contained start here.
func (g *ProcessGroup) startedInit(pid int) { g.Started(pid) }

// Signal delivers sig to the group. Only SIGKILL means anything on
// Windows: it terminates every process in the job (or the child alone
// when there is no job). Other signals do nothing; closing the server's
// stdin is the polite request to exit.
func (g *ProcessGroup) Signal(sig syscall.Signal) error {
	if sig != syscall.SIGKILL {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.job != 0:
		return windows.TerminateJobObject(g.job, 1)
	case g.proc != 0:
		// Terminating a process that has exited already fails with
		// access denied; the handle still names the child, never a
		// stranger, so that error means "gone".
		if err := windows.TerminateProcess(g.proc, 1); err != nil && !errors.Is(err, windows.ERROR_ACCESS_DENIED) {
			return err
		}
	}
	return nil
}

// jobAccounting is JOBOBJECT_BASIC_ACCOUNTING_INFORMATION, which
// golang.org/x/sys/windows does not define.
type jobAccounting struct {
	TotalUserTime             int64
	TotalKernelTime           int64
	ThisPeriodTotalUserTime   int64
	ThisPeriodTotalKernelTime int64
	TotalPageFaultCount       uint32
	TotalProcesses            uint32
	ActiveProcesses           uint32
	TotalTerminatedProcesses  uint32
}

// Empty reports whether no live process is left in the job. Without a job
// it reports true: the caller waits for the child itself.
func (g *ProcessGroup) Empty() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.job == 0 || g.pid <= 0 {
		return true
	}
	var info jobAccounting
	if err := windows.QueryInformationJobObject(g.job, windows.JobObjectBasicAccountingInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info)), nil); err != nil {
		return true
	}
	return info.ActiveProcesses == 0
}

// Release closes the job's handle, which kills whatever is still in it,
// and the child's. Call it once the group is empty or killed.
func (g *ProcessGroup) Release() {
	g.releaseOnce.Do(func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.job != 0 {
			windows.CloseHandle(g.job)
			g.job = 0
		}
		if g.proc != 0 {
			windows.CloseHandle(g.proc)
			g.proc = 0
		}
	})
}

func (g *ProcessGroup) warn(msg string, err error) {
	if g.logger != nil {
		g.logger.Warn(msg, "error", err)
	}
}
