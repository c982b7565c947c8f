//go:build linux

package main

// Probes of the limits (docs/sandbox.md, "Limits"): memory no RSS shows,
// forks, and a daemon that leaves the server's process group.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// daemonEnv, set in this program's environment, makes it a stage of the
// double-forked daemon instead of the server: "1" starts stage 2 in a new
// session and exits; "2" writes its pid to the file daemonPidEnv names
// and sleeps for ever, reparented to init, in no process group of the
// server's. Its own variable, not daemon_unix.go's daemonStage: both
// init functions read theirs, and the first one to match would run the
// wrong daemon (daemon_unix.go's stage 2 wants the pidfile in os.Args).
const (
	daemonEnv    = "HOSTILE_SETSID_DAEMON_STAGE"
	daemonPidEnv = "HOSTILE_SETSID_DAEMON_PIDFILE"
)

var (
	heldMu sync.Mutex
	held   []int // memfds kept open, so their memory stays
	// children are the fork probe's sleeping children, never waited for.
	children []*exec.Cmd
)

func init() {
	switch os.Getenv(daemonEnv) {
	case "1":
		cmd := exec.Command("/proc/self/exe")
		cmd.Env = append(os.Environ(), daemonEnv+"=2")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "hostile daemon stage 1:", err)
			os.Exit(1)
		}
		os.Exit(0)
	case "2":
		if err := os.WriteFile(os.Getenv(daemonPidEnv), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			os.Exit(1)
		}
		for {
			time.Sleep(time.Hour)
		}
	}

	// memfd ARG: writes ARG MiB into a memfd it keeps open and never maps,
	// memory no process's RSS shows.
	register("memfd", func(_ context.Context, arg string) (string, error) {
		n, err := strconv.Atoi(arg)
		if err != nil || n <= 0 {
			return "", fmt.Errorf("memfd wants a size in MiB, got %q", arg)
		}
		fd, err := unix.MemfdCreate("hostile", 0)
		if err != nil {
			return "", fmt.Errorf("memfd_create: %w", err)
		}
		chunk := make([]byte, 1<<20)
		for i := range chunk {
			chunk[i] = byte(i)
		}
		for i := 0; i < n; i++ {
			if _, err := unix.Write(fd, chunk); err != nil {
				unix.Close(fd)
				return "", fmt.Errorf("writing MiB %d of the memfd: %w", i+1, err)
			}
		}
		heldMu.Lock()
		held = append(held, fd)
		heldMu.Unlock()
		return fmt.Sprintf("holding %d MiB in a memfd", n), nil
	})
	// fork ARG: starts ARG sleeping children (kept) and says how many it
	// started; the first failure is the refusal. The children are not
	// waited for: a goroutine blocked in Wait holds an OS thread, which
	// counts against limits.processes like a child, and the Go runtime
	// dies (throw "newosproc", not an error a probe can report) when it
	// cannot create a thread it needs. They sleep until the server's stop
	// kills them.
	register("fork", func(_ context.Context, arg string) (string, error) {
		n, err := strconv.Atoi(arg)
		if err != nil || n <= 0 {
			return "", fmt.Errorf("fork wants a count, got %q", arg)
		}
		spareThreads(2)
		for i := 0; i < n; i++ {
			cmd := exec.Command("/bin/sleep", "3600")
			if err := cmd.Start(); err != nil {
				return "", fmt.Errorf("started %d: %w", i, err)
			}
			heldMu.Lock()
			children = append(children, cmd)
			heldMu.Unlock()
		}
		return fmt.Sprintf("started %d", n), nil
	})
	// setsid-daemon ARG: a setsid, double-forked daemon that writes its pid to
	// the file ARG once it runs; the result is that pid.
	register("setsid-daemon", func(_ context.Context, pidfile string) (string, error) {
		os.Remove(pidfile)
		cmd := exec.Command("/proc/self/exe")
		cmd.Env = append(os.Environ(), daemonEnv+"=1", daemonPidEnv+"="+pidfile)
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("daemon stage 1: %w", err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			if b, err := os.ReadFile(pidfile); err == nil && len(b) > 0 {
				return "daemon " + string(b), nil
			}
			if time.Now().After(deadline) {
				return "", fmt.Errorf("the daemon wrote no pid to %s", pidfile)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// spareThreads makes the Go runtime create n OS threads now, which it
// keeps idle for later: once the fork probe has filled limits.processes
// (threads count against it like processes), a runtime that needs a new
// thread (each fork blocks its thread in a read of the child's exec
// status, and the scheduler may hand the rest to another) cannot create
// one and aborts the whole server (pthread_create failed), where the
// probe must report the refused fork instead. Two are enough (no crash
// in 40 runs under a pids limit of 16, against 7 in 30 without), and few
// enough to leave a server under processes = 16 room for its children.
// Each goroutine locks a thread of its own while all wait; unlocked, the
// threads go back to the runtime's idle list.
func spareThreads(n int) {
	var ready, done sync.WaitGroup
	release := make(chan struct{})
	for range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			ready.Done()
			<-release
			runtime.UnlockOSThread()
		}()
	}
	ready.Wait()
	close(release)
	done.Wait()
}
