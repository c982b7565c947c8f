package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
	// exit CODE: the server exits with CODE (default 3) just after it
	// answers: a crash.
	register("exit", func(_ context.Context, code string) (string, error) {
		n, err := strconv.Atoi(code)
		if err != nil {
			n = 3
		}
		go func() {
			time.Sleep(100 * time.Millisecond)
			os.Exit(n)
		}()
		return fmt.Sprintf("exiting with status %d", n), nil
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
}

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
