//go:build unix

package testutil

import "syscall"

// groupAttr starts a child as the leader of a new process group, so that
// killGroup reaches everything it starts.
func groupAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// killGroup SIGKILLs the process group pid leads.
func killGroup(pid int) { syscall.Kill(-pid, syscall.SIGKILL) }

// getpgid is the process group of pid.
func getpgid(pid int) (int, error) { return syscall.Getpgid(pid) }
