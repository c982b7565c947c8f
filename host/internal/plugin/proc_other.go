//go:build !linux

package plugin

import "syscall"

// sysProcAttr puts the plugin in its own process group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
