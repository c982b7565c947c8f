package testutil

import (
	"errors"
	"os"
	"syscall"
)

// groupAttr is nil: Windows has no process groups; killGroup kills the
// child alone.
func groupAttr() *syscall.SysProcAttr { return nil }

// killGroup kills the process pid (not what it started).
func killGroup(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		p.Kill()
		p.Release()
	}
}

// getpgid fails: Windows has no process groups.
func getpgid(int) (int, error) { return 0, errors.New("no process groups on Windows") }
