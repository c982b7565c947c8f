//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The daemon probe (docs/sandbox.md "What the server sees"): whether
// something the server starts the classic way outlives it.
func init() {
	// daemon PIDFILE: starts a daemon the classic way (setsid, then a
	// second fork so it is no session leader either), which writes its
	// pid to PIDFILE and then runs forever, ignoring SIGTERM and SIGHUP.
	// Its command line holds PIDFILE, so a test finds it in the host's
	// /proc by that.
	register("daemon", func(_ context.Context, pidfile string) (string, error) {
		cmd := exec.Command("/proc/self/exe", pidfile)
		cmd.Args[0] = daemonArg0
		cmd.Env = append(os.Environ(), daemonStage+"=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Run(); err != nil {
			return "", err
		}
		for range 100 {
			if b, err := os.ReadFile(pidfile); err == nil && len(b) > 0 {
				return "daemon running, pid " + strings.TrimSpace(string(b)), nil
			}
			time.Sleep(50 * time.Millisecond)
		}
		return "", fmt.Errorf("the daemon wrote no pid to %s", pidfile)
	})
	switch os.Getenv(daemonStage) {
	case "1":
		// The setsid'd child: fork the daemon and exit.
		cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
		cmd.Args[0] = daemonArg0
		cmd.Env = append(os.Environ(), daemonStage+"=2")
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "hostile daemon:", err)
			os.Exit(1)
		}
		os.Exit(0)
	case "2":
		signal.Ignore(syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
		pidfile := filepath.Clean(os.Args[1])
		if err := os.WriteFile(pidfile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
			os.Exit(1)
		}
		for {
			time.Sleep(time.Hour)
		}
	}
}

const (
	daemonArg0  = "hostile-daemon"
	daemonStage = "HOSTILE_DAEMON_STAGE"
)
