//go:build unix

package conformance_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stopGrace is how long a process gets after SIGTERM before its process
// group is killed.
const stopGrace = 5 * time.Second

// startTimeout bounds waiting for a process to report that it is ready.
const startTimeout = 30 * time.Second

// process is a subprocess in its own process group, with its output kept
// line by line. At test cleanup the group gets SIGTERM, then SIGKILL after
// stopGrace, and the process is waited for; its output is logged if the
// test failed.
type process struct {
	name string
	cmd  *exec.Cmd

	exited chan struct{} // closed once Wait has returned
	err    error         // Wait's error, set before exited is closed

	mu      sync.Mutex
	lines   []string
	changed chan struct{} // closed and replaced when lines grows or output ends
	eof     bool
}

// startProcess starts cmd, whose Stdout and Stderr must be unset.
func startProcess(t *testing.T, name string, cmd *exec.Cmd) *process {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &process{name: name, cmd: cmd, exited: make(chan struct{}), changed: make(chan struct{})}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		p.read(pr)
	}()
	go func() {
		p.err = cmd.Wait()
		pw.Close()
		<-readDone
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("%s output:\n%s", name, tail(strings.Join(p.output(), "\n"), 8000))
		}
	})
	return p
}

func (p *process) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		p.mu.Lock()
		p.lines = append(p.lines, sc.Text())
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
	}
	io.Copy(io.Discard, r) // a line too long for the scanner must not block the process
	p.mu.Lock()
	p.eof = true
	close(p.changed)
	p.mu.Unlock()
}

func (p *process) output() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// waitLine returns the first output line containing substr, failing the
// test if the process exits or startTimeout passes first.
func (p *process) waitLine(t *testing.T, substr string) string {
	t.Helper()
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	for {
		p.mu.Lock()
		for _, l := range p.lines {
			if strings.Contains(l, substr) {
				p.mu.Unlock()
				return l
			}
		}
		eof, changed := p.eof, p.changed
		p.mu.Unlock()
		if eof {
			<-p.exited
			t.Fatalf("%s exited (%v) without printing %q", p.name, p.err, substr)
		}
		select {
		case <-changed:
		case <-timer.C:
			t.Fatalf("%s printed no line containing %q within %v", p.name, substr, startTimeout)
		}
	}
}

// running reports whether the process has not exited yet.
func (p *process) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM to the process group and waits; after stopGrace it
// kills the group. A process that needed SIGKILL fails the test: SIGTERM
// must shut mcpvisor and the example servers down promptly.
func (p *process) stop(t *testing.T) {
	pgid := p.cmd.Process.Pid
	if p.running() {
		syscall.Kill(-pgid, syscall.SIGTERM)
	}
	select {
	case <-p.exited:
	case <-time.After(stopGrace):
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.exited
		t.Errorf("%s still running %v after SIGTERM; killed", p.name, stopGrace)
		return
	}
	// Anything left in the group (a child that ignored SIGTERM) goes too.
	syscall.Kill(-pgid, syscall.SIGKILL)
	var exit *exec.ExitError
	if p.err != nil && !(errors.As(p.err, &exit) && exit.Exited()) {
		t.Logf("%s: %v", p.name, p.err)
	}
}

// tail returns at most the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("…(%d bytes cut)…\n%s", len(s)-n, s[len(s)-n:])
}
