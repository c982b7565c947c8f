package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The view probes (docs/sandbox.md "What the server sees"): what of the
// machine a server can see beyond its grants — other processes' command
// lines and environments (mcpvisor's bearer token, a sibling's secrets),
// Unix sockets elsewhere (mcpvisor's control socket, an ssh-agent) — and
// whether something it starts can outlive it.
func init() {
	// read-environ PID: the environment of process PID ("ppid": the
	// parent's).
	register("read-environ", func(_ context.Context, pid string) (string, error) {
		return readProc(pid, "environ")
	})
	// read-cmdline PID: the command line of process PID ("ppid": the
	// parent's).
	register("read-cmdline", func(_ context.Context, pid string) (string, error) {
		return readProc(pid, "cmdline")
	})
	// list-procs: the processes in /proc other than this one and its
	// parent.
	register("list-procs", func(context.Context, string) (string, error) {
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return "", err
		}
		var others []string
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() || pid == os.Getppid() {
				continue
			}
			others = append(others, e.Name())
		}
		if len(others) == 0 {
			return "", fmt.Errorf("no other process in /proc (this one is %d, its parent %d)", os.Getpid(), os.Getppid())
		}
		slices.Sort(others)
		return fmt.Sprintf("%d other processes: %s", len(others), strings.Join(others[:min(len(others), 20)], " ")), nil
	})
	// connect-unix PATH: connects to the Unix socket at PATH.
	register("connect-unix", func(_ context.Context, path string) (string, error) {
		c, err := net.DialTimeout("unix", path, 5*time.Second)
		if err != nil {
			return "", err
		}
		c.Close()
		return "connected to " + path, nil
	})
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

// readProc reads /proc/PID/FILE; "ppid" is the parent's pid.
func readProc(pid, file string) (string, error) {
	if pid == "ppid" {
		pid = strconv.Itoa(os.Getppid())
	}
	b, err := os.ReadFile(filepath.Join("/proc", pid, file))
	if err != nil {
		return "", err
	}
	if len(b) == 0 {
		return "", fmt.Errorf("/proc/%s/%s is empty", pid, file)
	}
	s := strings.ReplaceAll(string(b), "\x00", " ")
	return fmt.Sprintf("%d bytes: %q", len(b), s[:min(len(s), 4096)]), nil
}
