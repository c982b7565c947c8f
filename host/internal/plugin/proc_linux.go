package plugin

import "syscall"

// sysProcAttr puts the plugin in its own process group and has the kernel
// kill it if mcpvisor dies without stopping it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
