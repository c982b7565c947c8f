package transport

import "syscall"

// sysProcAttr puts the child in its own process group and, on Linux, has
// the kernel kill it if mcpvisor dies without stopping it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
