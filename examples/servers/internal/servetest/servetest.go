// Package servetest builds the example servers and runs them as real
// subprocesses for tests: over stdio through the SDK's CommandTransport, or
// over HTTP with their stderr followed line by line.
//
// Every process a helper starts is killed and waited for when the test ends,
// so no test leaves a server behind.
package servetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stopGrace is how long Stop waits after SIGTERM before it kills.
const stopGrace = 5 * time.Second

// Build compiles the main package in the current directory (where go test
// runs a package's tests) into a new temporary directory. It is meant for
// TestMain; remove the returned directory when the tests are done.
func Build(name string) (bin, dir string, err error) {
	dir, err = os.MkdirTemp("", "mcpvisor-example-"+name+"-")
	if err != nil {
		return "", "", err
	}
	bin = filepath.Join(dir, name)
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		return "", "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, dir, nil
}

// Main is a TestMain body: it builds the server in the current directory,
// stores its path in *bin, runs the tests, removes the build and returns the
// exit code.
func Main(m *testing.M, name string, bin *string) int {
	b, dir, err := Build(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	*bin = b
	return m.Run()
}

// ConnectStdio starts bin with args as a stdio server and connects client to
// it. The session is closed, and the process waited for, at test cleanup.
func ConnectStdio(t testing.TB, client *mcp.Client, opts *mcp.ClientSessionOptions, bin string, args ...string) (*mcp.ClientSession, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stderr = &testWriter{t: t}
	transport := &mcp.CommandTransport{Command: cmd, TerminateDuration: time.Second}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, transport, opts)
	if err != nil {
		if cmd.Process != nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		t.Fatalf("connect to %s over stdio: %v", filepath.Base(bin), err)
	}
	t.Cleanup(func() {
		cs.Close() // closes stdin, then waits for the process (SIGTERM, SIGKILL after TerminateDuration)
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cs, cmd
}

// testWriter logs a subprocess's output through the test, line by line, and
// drops it once the test is over.
type testWriter struct {
	t    testing.TB
	mu   sync.Mutex
	buf  []byte
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			break
		}
		line := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		if !w.done {
			w.log(line)
		}
	}
	return len(p), nil
}

// log guards against logging after the test has ended, which panics.
func (w *testWriter) log(line string) {
	defer func() {
		if recover() != nil {
			w.done = true
		}
	}()
	w.t.Log("server: " + line)
}

// Process is an example server running with -http or -sse.
type Process struct {
	// Cmd is the running command.
	Cmd *exec.Cmd
	// URL is the endpoint the server reported on its "listening on" line.
	URL string

	exited  chan struct{} // closed when Wait has returned
	waitErr error         // set before exited is closed

	mu      sync.Mutex
	lines   []string
	changed chan struct{} // closed and replaced when lines grows or stderr ends
	eof     bool
}

// StartHTTP starts bin with args, which must include -http or -sse, and
// waits for the server to report its URL. The process is killed and waited
// for at test cleanup.
func StartHTTP(t testing.TB, bin string, args ...string) *Process {
	t.Helper()
	p := Start(t, bin, args...)
	line := p.WaitLine(t, "listening on ", 30*time.Second)
	p.URL = strings.TrimPrefix(line, "listening on ")
	return p
}

// Start starts bin with args and follows its stderr, without waiting for
// anything. Stdin is empty, so a stdio server exits at once. The process is
// killed and waited for at test cleanup.
func Start(t testing.TB, bin string, args ...string) *Process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Process{Cmd: cmd, exited: make(chan struct{}), changed: make(chan struct{})}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		p.read(t, stderr)
	}()
	go func() {
		<-readDone // Wait closes the pipe, so finish reading first
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.exited
	})
	return p
}

func (p *Process) read(t testing.TB, r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		p.mu.Lock()
		p.lines = append(p.lines, sc.Text())
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
	}
	p.mu.Lock()
	p.eof = true
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// Lines returns the stderr lines read so far.
func (p *Process) Lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// WaitLine waits for a stderr line that starts with prefix and returns it.
// It fails the test if none arrives within timeout or stderr ends first.
func (p *Process) WaitLine(t testing.TB, prefix string, timeout time.Duration) string {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		p.mu.Lock()
		for _, line := range p.lines {
			if strings.HasPrefix(line, prefix) {
				p.mu.Unlock()
				return line
			}
		}
		eof, changed := p.eof, p.changed
		p.mu.Unlock()
		if eof {
			t.Fatalf("stderr ended without a line starting with %q; got %q", prefix, p.Lines())
		}
		select {
		case <-changed:
		case <-timer.C:
			t.Fatalf("no stderr line starting with %q after %v; got %q", prefix, timeout, p.Lines())
		}
	}
}

// Signal sends sig to the process.
func (p *Process) Signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

// Wait waits up to timeout for the process to exit and returns its Wait
// error (nil for exit status 0).
func (p *Process) Wait(t testing.TB, timeout time.Duration) error {
	t.Helper()
	select {
	case <-p.exited:
		return p.waitErr
	case <-time.After(timeout):
		t.Fatalf("process %d still running after %v", p.Cmd.Process.Pid, timeout)
		return nil
	}
}

// Stop sends SIGTERM and waits for the process to exit, which a server must
// do promptly and cleanly; it fails the test otherwise.
func (p *Process) Stop(t testing.TB) {
	t.Helper()
	p.Signal(t, syscall.SIGTERM)
	if err := p.Wait(t, stopGrace); err != nil {
		t.Errorf("after SIGTERM: %v", err)
	}
}

// ExitCode returns the exit code of a Wait error, or 0 for nil and -1 if the
// process did not exit normally.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return exitErr.ExitCode()
	}
	return -1
}
