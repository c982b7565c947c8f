// Package testutil holds what mcpvisor's tests share: building the example
// servers into real binaries, starting them as real processes, and checking
// /proc for processes left behind.
package testutil

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// RepoRoot returns the repository root (the directory holding go.mod).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// BuildExamples builds the named example servers (examples/servers/<name>)
// into dir and returns their paths by name. Call it from TestMain.
func BuildExamples(dir string, names ...string) (map[string]string, error) {
	out := map[string]string{}
	args := []string{"build", "-o", dir + string(os.PathSeparator)}
	for _, n := range names {
		args = append(args, "./examples/servers/"+n)
		out[n] = filepath.Join(dir, n)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %v: %v\n%s", names, err, b)
	}
	return out, nil
}

// GoBuild builds the package pkg, a path relative to the repository root
// such as "./plugins/unix", into the file out, with extra go build flags
// (for example "-ldflags", "-X main.version=2" for a binary with other
// content).
func GoBuild(out, pkg string, flags ...string) error {
	args := append([]string{"build", "-o", out}, flags...)
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// Alive reports whether pid exists and is not a zombie.
func Alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// GroupMembers lists the live pids whose process group is pgid.
func GroupMembers(pgid int) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := getpgid(pid); err == nil && g == pgid && Alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Descendants lists the live descendants of pid (children, grandchildren…).
func Descendants(pid int) []int {
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		if len(f) > 2 {
			pp, _ := strconv.Atoi(f[1])
			parent[p] = pp
		}
	}
	var out []int
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				if Alive(p) {
					out = append(out, p)
				}
				break
			}
		}
	}
	return out
}

// Eventually waits until cond is true, checking every 10 ms, or fails the
// test after timeout. Use it only for conditions with no event to wait on
// (like /proc contents); the timeout is a hang guard, not an expectation.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Server is an example server process started by a test.
type Server struct {
	Cmd *exec.Cmd
	URL string

	mu    sync.Mutex
	lines []string
	cond  chan struct{}
}

// StartServer starts bin with args (e.g. "-http", "127.0.0.1:0") and, when it
// serves HTTP, waits for its "listening on URL" line. The process is killed
// and reaped when the test ends.
func StartServer(t testing.TB, bin string, args ...string) *Server {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = groupAttr()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &Server{Cmd: cmd, cond: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.mu.Lock()
			s.lines = append(s.lines, sc.Text())
			close(s.cond)
			s.cond = make(chan struct{})
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		killGroup(cmd.Process.Pid)
		cmd.Wait()
	})
	for _, a := range args {
		if a == "-http" || a == "-sse" {
			line := s.WaitLine(t, "listening on ", 30*time.Second)
			s.URL = strings.TrimSpace(strings.TrimPrefix(line, "listening on "))
		}
	}
	return s
}

// WaitLine waits for a stderr line starting with prefix (already seen lines
// count) and returns it.
func (s *Server) WaitLine(t testing.TB, prefix string, timeout time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	seen := 0
	for {
		s.mu.Lock()
		for ; seen < len(s.lines); seen++ {
			if strings.HasPrefix(s.lines[seen], prefix) {
				l := s.lines[seen]
				s.mu.Unlock()
				return l
			}
		}
		ch := s.cond
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("no stderr line starting %q within %s", prefix, timeout)
		}
	}
}

// CountLines returns how many stderr lines so far start with prefix.
func (s *Server) CountLines(prefix string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, l := range s.lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// leakMarkers are stack substrings of goroutines that must not outlive a
// test binary's tests: the MCP SDK's, mcpvisor's own, and HTTP servers'.
var leakMarkers = []string{
	"modelcontextprotocol/go-sdk",
	"github.com/mcpvisor/mcpvisor/host",
	"github.com/hashicorp/go-plugin",
	"net/http.(*conn).serve",
}

// LeakedGoroutines waits up to timeout for goroutines of the SDK, the host
// or an HTTP server to finish, and returns the stacks of those that did
// not ("" when none leaked). Call it from TestMain after m.Run.
func LeakedGoroutines(timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	self := "testutil.LeakedGoroutines"
	for {
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, self) || strings.Contains(g, "testing.(*M).") || strings.Contains(g, "testing.tRunner") {
				continue
			}
			for _, m := range leakMarkers {
				if strings.Contains(g, m) {
					leaked = append(leaked, g)
					break
				}
			}
		}
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// RunWithLeakCheck runs the tests and fails the binary if goroutines leaked.
func RunWithLeakCheck(m *testing.M) int {
	code := m.Run()
	if code == 0 {
		if leaked := LeakedGoroutines(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines leaked after the tests:\n%s\n", leaked)
			code = 1
		}
	}
	return code
}

// Mcpvisor is the key under which BuildAndRun puts the mcpvisor binary.
const Mcpvisor = "mcpvisor"

// BuildAndRun is a TestMain body: it builds the named example servers (and
// the mcpvisor binary itself when a name is Mcpvisor) into a temporary
// directory, hands their paths to use, runs the tests with a goroutine
// leak check, removes the directory and returns the exit code.
func BuildAndRun(m *testing.M, use func(bins map[string]string), names ...string) int {
	dir, err := os.MkdirTemp("", "mcpvisor-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	var examples []string
	withHost := false
	for _, n := range names {
		if n == Mcpvisor {
			withHost = true
		} else {
			examples = append(examples, n)
		}
	}
	bins := map[string]string{}
	if len(examples) > 0 {
		if bins, err = BuildExamples(dir, examples...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if withHost {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, Mcpvisor), ".")
		cmd.Dir = RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building mcpvisor: %v\n%s", err, out)
			return 1
		}
		bins[Mcpvisor] = filepath.Join(dir, Mcpvisor)
	}
	use(bins)
	return RunWithLeakCheck(m)
}

// Buffer is an io.Writer a test can read while a process (or a logger)
// writes to it from another goroutine.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Browser follows an OAuth authorization URL's redirects, as the browser
// of a logged-in user who has consented would, to the client's redirect
// listener (for LoginOptions.Open). A page other than 200 at the end is
// an error: a person would read it and give up.
func Browser(ctx context.Context, authURL string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, authURL, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the browser ended at %s with HTTP %s", resp.Request.URL.Path, resp.Status)
	}
	return nil
}
