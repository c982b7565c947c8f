//go:build unix

package hardening_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// ambiguousCalls name the exposed tool "cs__safe" under the exact key
// "name" and the hidden upstream tool "danger" under a case variant, in
// either order, or name a tool twice. An upstream decoding with Go's
// encoding/json (mcp-go does) reads the last case-insensitive match.
var ambiguousCalls = []string{
	`{"name":"cs__safe","NAME":"danger","arguments":{}}`,
	`{"NAME":"danger","name":"cs__safe","arguments":{}}`,
	`{"name":"cs__safe","Name":"danger","arguments":{}}`,
	`{"name":"danger","name":"cs__safe","arguments":{}}`,
	`{"name":"cs__safe","nAmE":"cs__danger","arguments":{}}`,
}

// deepArguments nests 5,000 objects: five times what the go-sdk accepts,
// within what encoding/json decodes.
var deepArguments = strings.Repeat(`{"a":`, 5000) + "1" + strings.Repeat("}", 5000)

// undecodable nests 20,000 objects, past what any Go JSON decoder reads.
var undecodable = strings.Repeat(`{"a":`, 20000) + "1" + strings.Repeat("}", 20000)

// mcpgoBlock builds the mcp-go server (host/hardening/internal/mcpgo) and
// returns a server block "cs" running it with "danger" hidden, plus the
// file the server appends to whenever "danger" runs.
func mcpgoBlock(t *testing.T) (block, dangerLog string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "mcpgo")
	if err := testutil.GoBuild(bin, "./host/hardening/internal/mcpgo"); err != nil {
		t.Fatal(err)
	}
	dangerLog = filepath.Join(dir, "danger.log")
	block = fmt.Sprintf("server \"cs\" {\n  command = %s\n  env = { MCPGO_DANGER_LOG = %s }\n  tools { exclude = [\"danger\"] }\n}\n",
		hclString(bin), hclString(dangerLog))
	return block, dangerLog
}

// The control: the mcp-go server on its own really does run the tool a
// case-variant key names. Without this the test below could pass against
// an upstream that is not case-insensitive and prove nothing.
func TestMcpGoUpstreamIsCaseInsensitive(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "mcpgo")
	if err := testutil.GoBuild(bin, "./host/hardening/internal/mcpgo"); err != nil {
		t.Fatal(err)
	}
	c := startLines(t, exec.Command(bin))
	c.initialize(t)
	c.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"safe","NAME":"danger","arguments":{}}}`)
	if got := c.answer(t, 1); !strings.Contains(got, "danger ran") {
		t.Fatalf("mcp-go did not read the case-variant key, so it cannot stand for a case-insensitive upstream: %s", got)
	}
}

// Regression (#13, 6): a client cannot reach a hidden tool of a
// case-insensitive upstream through duplicate or case-variant keys, over
// `run --stdio` (whose tools/call is passed through as bytes) nor over
// HTTP; the upstream stays up and serves the next calls.
func TestCaseVariantNameCannotReachHiddenTool(t *testing.T) {
	block, dangerLog := mcpgoBlock(t)

	t.Run("stdio", func(t *testing.T) {
		c := startStdioMcpvisor(t, block)
		c.initialize(t)
		c.waitTool(t, "cs__safe")
		for i, params := range ambiguousCalls {
			id := 10 + i
			c.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":%s}`, id, params))
			if got := c.answer(t, id); strings.Contains(got, "danger ran") {
				t.Errorf("%s reached the hidden tool: %s", params, got)
			}
		}
		c.send(t, `{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"cs__safe","arguments":{}}}`)
		if got := c.answer(t, 99); !strings.Contains(got, "safe ran") {
			t.Errorf("a plain call after the ambiguous ones: %s", got)
		}
	})

	t.Run("http", func(t *testing.T) {
		mv := startMcpvisor(t, block)
		s := openRawSession(t, mv)
		waitTool(t, connectClient(t, mv), "cs__safe")
		for i, params := range ambiguousCalls {
			if got := s.call(t, 10+i, "tools/call", params); strings.Contains(got, "danger ran") {
				t.Errorf("%s reached the hidden tool: %s", params, got)
			}
		}
		if got := s.call(t, 99, "tools/call", `{"name":"cs__safe","arguments":{}}`); !strings.Contains(got, "safe ran") {
			t.Errorf("a plain call after the ambiguous ones: %s", got)
		}
		if st := mv.status(t)["cs"]; st.State != "ready" {
			t.Errorf("cs is %s after the ambiguous calls (%s), want ready", st.State, st.LastError)
		}
	})

	if b, err := os.ReadFile(dangerLog); err == nil {
		t.Errorf("the hidden tool ran %d time(s)", bytes.Count(b, []byte("\n")))
	}
}

// Regression (#13, 7): a request nested 5,000 deep, which makes a go-sdk
// stdio server exit, never reaches one through mcpvisor: three of them
// leave the echo server running, unparked, and another client's call
// succeeds. Over `run --stdio`, a line too deep to decode at all is
// answered with a parse error and the session goes on.
func TestDeepRequestDoesNotParkGoSDKUpstream(t *testing.T) {
	// The control: the echo example (go-sdk) exits on such a line when
	// it reaches it directly.
	direct := startLines(t, exec.Command(bins["echo"]))
	direct.initialize(t)
	direct.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":`+deepArguments+`}}`)
	select {
	case <-direct.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the go-sdk echo server survived a request nested 5,000 deep on its own, so it cannot stand for an upstream that dies of one")
	}

	t.Run("stdio", func(t *testing.T) {
		c := startStdioMcpvisor(t, echoBlock())
		c.initialize(t)
		c.waitTool(t, "echo__echo")
		for i := range 3 {
			id := 10 + i
			c.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo__echo","arguments":%s}}`, id, deepArguments))
			if got := c.answer(t, id); !strings.Contains(got, `"error"`) {
				t.Errorf("a request nested 5,000 deep was not refused: %.300s", got)
			}
		}
		c.send(t, `{"jsonrpc":"2.0","id":20,"method":"tools/call","params":{"name":"echo__echo","arguments":`+undecodable+`}}`)
		if got := c.answer(t, -1); !strings.Contains(got, `"code":-32700`) {
			t.Errorf("a line nested 20,000 deep: %.300s, want a parse error", got)
		}
		c.send(t, `{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"echo__echo","arguments":{"text":"still here"}}}`)
		if got := c.answer(t, 99); !strings.Contains(got, "still here") {
			t.Errorf("the echo server did not serve the next call: %s", got)
		}
	})

	t.Run("http", func(t *testing.T) {
		mv := startMcpvisor(t, echoBlock())
		other := connectClient(t, mv)
		waitTool(t, other, "echo__echo")
		s := openRawSession(t, mv)
		for i := range 3 {
			if got := s.call(t, 10+i, "tools/call", `{"name":"echo__echo","arguments":`+deepArguments+`}`); strings.Contains(got, `"result"`) {
				t.Errorf("a request nested 5,000 deep was answered with a result: %.300s", got)
			}
		}
		if st := mv.status(t)["echo"]; st.State != "ready" {
			t.Errorf("echo is %s after three deep requests (%s), want ready", st.State, st.LastError)
		}
		res, err := other.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo__echo", Arguments: map[string]any{"text": "other client"}})
		if err != nil || res.IsError || !strings.Contains(contentText(res), "other client") {
			t.Errorf("another client's call after the deep requests: %v %v", err, res)
		}
	})
}

// lineConn speaks raw JSON-RPC lines to a process's stdin and stdout.
type lineConn struct {
	w     io.WriteCloser
	lines chan string
	done  chan struct{} // closed when the process has exited
}

func startLines(t *testing.T, cmd *exec.Cmd) *lineConn {
	t.Helper()
	w, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &testutil.Buffer{}
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &lineConn{w: w, lines: make(chan string, 64), done: make(chan struct{})}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 32<<20) // answers of 15 MiB: passthrough_linux_test.go
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	go func() {
		cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		w.Close()
		syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(stopTimeout):
			t.Errorf("%s did not exit within %s of SIGTERM", filepath.Base(cmd.Path), stopTimeout)
		}
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
		for range c.lines {
		}
		if t.Failed() {
			t.Logf("%s stderr (last 8 kB):\n%s", filepath.Base(cmd.Path), tail(stderr.String(), 8<<10))
		}
	})
	return c
}

// startStdioMcpvisor runs `mcpvisor run --stdio` with the given servers.
func startStdioMcpvisor(t *testing.T, servers string) *lineConn {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.hcl")
	cfg := "host {\n  log_level = \"debug\"\n  drain = \"0s\"\n}\n\n" + servers
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return startLines(t, exec.Command(bins[testutil.Mcpvisor], "run", "--stdio", "-config", path))
}

func (c *lineConn) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(c.w, line+"\n"); err != nil {
		t.Fatalf("writing a request: %v", err)
	}
}

// answer returns the line answering request id (-1: id null), skipping
// everything else.
func (c *lineConn) answer(t *testing.T, id int) string {
	t.Helper()
	want := fmt.Sprint(id)
	if id < 0 {
		want = "null"
	}
	timeout := time.After(callBound)
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				t.Fatalf("the process closed stdout before answering request %d", id)
			}
			var m struct {
				ID json.RawMessage `json:"id"`
			}
			if json.Unmarshal([]byte(line), &m) == nil && string(m.ID) == want {
				return line
			}
		case <-timeout:
			t.Fatalf("no answer to request %d within %s", id, callBound)
		}
	}
}

func (c *lineConn) initialize(t *testing.T) {
	t.Helper()
	c.send(t, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+sessionProtocol+`","capabilities":{},"clientInfo":{"name":"hardening-lines","version":"1"}}}`)
	if got := c.answer(t, 0); !strings.Contains(got, `"result"`) {
		t.Fatalf("initialize: %s", got)
	}
	c.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

// waitTool waits until tools/list names tool.
func (c *lineConn) waitTool(t *testing.T, tool string) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for id := 1000; ; id++ {
		c.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list"}`, id))
		if strings.Contains(c.answer(t, id), `"name":"`+tool+`"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("tool %q not listed within %s", tool, readyTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rawSession is an MCP session on mcpvisor's /mcp driven with hand-written
// JSON-RPC bodies, so a test can send what no SDK client would.
type rawSession struct {
	mv *mcpvisor
	hc *http.Client
	id string
}

func openRawSession(t *testing.T, mv *mcpvisor) *rawSession {
	t.Helper()
	s := &rawSession{mv: mv, hc: newHTTPClient(t, callBound)}
	resp, body := s.post(t, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+sessionProtocol+`","capabilities":{},"clientInfo":{"name":"hardening-raw","version":"1"}}}`)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"result"`) {
		t.Fatalf("initialize: %s %s", resp.Status, body)
	}
	s.id = resp.Header.Get("Mcp-Session-Id")
	if resp, body := s.post(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %s %s", resp.Status, body)
	}
	return s
}

func (s *rawSession) post(t *testing.T, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+s.mv.addr+"/mcp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", sessionProtocol)
	if s.id != "" {
		req.Header.Set("Mcp-Session-Id", s.id)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		t.Fatalf("POST /mcp: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatalf("reading the answer to POST /mcp: %v", err)
	}
	return resp, string(b)
}

// call sends one request and returns the JSON-RPC message answering it
// (from a JSON body or an event stream), or the HTTP error as text.
func (s *rawSession) call(t *testing.T, id int, method, params string) string {
	t.Helper()
	resp, body := s.post(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params))
	if resp.StatusCode != http.StatusOK {
		return resp.Status + ": " + body
	}
	want := fmt.Sprint(id)
	for _, line := range strings.Split(body, "\n") {
		data := strings.TrimPrefix(strings.TrimSpace(line), "data:")
		var m struct {
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal([]byte(data), &m) == nil && string(m.ID) == want {
			return data
		}
	}
	t.Fatalf("no answer to request %d in: %.500s", id, body)
	return ""
}
