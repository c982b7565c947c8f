//go:build unix

package hardening_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const (
	// upstreamRSSBudget bounds mcpvisor's RSS growth while it reads one
	// hostile upstream answer.
	upstreamRSSBudget = 100 * mb
	// hugeHeaderBytes is the size of the oversized header block.
	hugeHeaderBytes = 20 << 20
	// earlyHints is how many 103 responses come before the real one.
	earlyHints = 1000
	// earlyHintsPad is the Link header each padded 103 carries: 1,000 of
	// them make 16 MB of informational heads, past any sane bound on the
	// header bytes read for one response (net/http's default is 10 MB).
	earlyHintsPad = 16 << 10
	// badTool is the fake upstream's only tool as mcpvisor exposes it.
	badTool = "bad__t"
	// callBound bounds a tool call through mcpvisor to the fake upstream;
	// the bad server's own call timeout (badBlock) is 20 s.
	callBound = 60 * time.Second
)

// A misbehaviour writes a hostile answer to the JSON-RPC request id (null
// for none) on w. The connection is closed after it.
type misbehaviour func(w *bufio.Writer, id json.RawMessage)

// callResult is a valid tools/call answer to id.
func callResult(id json.RawMessage) string {
	return `{"jsonrpc":"2.0","id":` + string(id) + `,"result":{"content":[{"type":"text","text":"ok"}]}}`
}

// hugeHeader answers 200 with 20 MB of header lines, then a valid body.
func hugeHeader(w *bufio.Writer, id json.RawMessage) {
	w.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
	value := strings.Repeat("a", 4<<10)
	for i, n := 0, 0; n < hugeHeaderBytes; i++ {
		k, err := fmt.Fprintf(w, "X-Pad-%05d: %s\r\n", i, value)
		if err != nil {
			return // mcpvisor stopped reading: the connection is closed
		}
		n += k
	}
	body := callResult(id)
	fmt.Fprintf(w, "Content-Length: %d\r\n\r\n%s", len(body), body)
}

// endlessEventBytes is how much an endless SSE event sends before the
// fake upstream gives up: past the 16 MiB the go-sdk (and mcpvisor's
// notification relay) buffer for one event.
const endlessEventBytes = 40 << 20

// endlessEvent answers 200 with an event stream whose first event never
// ends: one data line of endlessEventBytes.
func endlessEvent(w *bufio.Writer, id json.RawMessage) {
	w.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\ndata: ")
	chunk := strings.Repeat("x", 64<<10)
	for n := 0; n < endlessEventBytes; n += len(chunk) {
		if _, err := w.WriteString(chunk); err != nil {
			return // mcpvisor stopped reading: the connection is closed
		}
	}
}

// hints answers with earlyHints 103 responses, each with a Link header of
// pad bytes (none when 0), then a valid 200.
func hints(pad int) misbehaviour {
	return func(w *bufio.Writer, id json.RawMessage) {
		link := ""
		if pad > 0 {
			link = "Link: </" + strings.Repeat("x", pad) + ">; rel=preload\r\n"
		}
		for range earlyHints {
			if _, err := w.WriteString("HTTP/1.1 103 Early Hints\r\n" + link + "\r\n"); err != nil {
				return // mcpvisor stopped reading: the connection is closed
			}
		}
		body := callResult(id)
		fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
}

// fakeUpstream is a streamable HTTP MCP server on a raw TCP listener: it
// answers initialize (with a session id), notifications (202), GET (405),
// DELETE, tools/list (one tool, "t") and other requests ({}) properly, and
// tools/call — or, once badInit is set, every request — with its
// misbehaviour.
type fakeUpstream struct {
	ln      net.Listener
	bad     misbehaviour
	badInit atomic.Bool
	served  atomic.Int64 // hostile answers written (or begun)
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

func startFake(t *testing.T, bad misbehaviour) *fakeUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeUpstream{ln: ln, bad: bad, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

func (f *fakeUpstream) url() string { return "http://" + f.ln.Addr().String() + "/mcp" }

func (f *fakeUpstream) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.conns[c] = struct{}{}
		f.mu.Unlock()
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer func() {
				f.mu.Lock()
				delete(f.conns, c)
				f.mu.Unlock()
				c.Close()
			}()
			f.serve(c)
		}()
	}
}

// serve answers the requests of one connection until it closes or a
// misbehaviour was written.
func (f *fakeUpstream) serve(c net.Conn) {
	br := bufio.NewReader(c)
	bw := bufio.NewWriterSize(c, 64<<10)
	for {
		c.SetDeadline(time.Now().Add(callBound))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
		req.Body.Close()
		if err != nil {
			return
		}
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		json.Unmarshal(body, &msg)
		id := msg.ID
		if len(id) == 0 {
			id = json.RawMessage("null")
		}
		if f.badInit.Load() || (req.Method == http.MethodPost && msg.Method == "tools/call") {
			f.served.Add(1)
			f.bad(bw, id)
			bw.Flush()
			return
		}
		switch {
		case req.Method == http.MethodGet:
			writeResponse(bw, http.StatusMethodNotAllowed, "Allow: POST, DELETE\r\n", "")
		case req.Method == http.MethodDelete:
			writeResponse(bw, http.StatusOK, "", "")
		case req.Method != http.MethodPost:
			writeResponse(bw, http.StatusMethodNotAllowed, "Allow: POST, DELETE\r\n", "")
		case len(msg.ID) == 0 || msg.Method == "":
			// A notification, or an answer to a request of ours.
			writeResponse(bw, http.StatusAccepted, "", "")
		case msg.Method == "initialize":
			writeResponse(bw, http.StatusOK, "Mcp-Session-Id: fake-session-1\r\n",
				`{"jsonrpc":"2.0","id":`+string(id)+`,"result":{"protocolVersion":"`+sessionProtocol+
					`","capabilities":{"tools":{}},"serverInfo":{"name":"fake","version":"1"}}}`)
		case msg.Method == "tools/list":
			writeResponse(bw, http.StatusOK, "",
				`{"jsonrpc":"2.0","id":`+string(id)+`,"result":{"tools":[{"name":"t","description":"misbehaves","inputSchema":{"type":"object"}}]}}`)
		default:
			writeResponse(bw, http.StatusOK, "", `{"jsonrpc":"2.0","id":`+string(id)+`,"result":{}}`)
		}
		if bw.Flush() != nil {
			return
		}
	}
}

// writeResponse writes one response; a non-empty body is JSON.
func writeResponse(w *bufio.Writer, code int, extra, body string) {
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\n%s", code, http.StatusText(code), extra)
	if body != "" {
		w.WriteString("Content-Type: application/json\r\n")
	}
	fmt.Fprintf(w, "Content-Length: %d\r\n\r\n%s", len(body), body)
}

// badBlock is the server block for the fake upstream: bounded calls and
// connects, parked after its first failed connect.
func badBlock(f *fakeUpstream) string {
	return fmt.Sprintf(`server "bad" {
  url             = %s
  timeout         = "20s"
  connect_timeout = "10s"
  reconnect {
    max_retries = 0
  }
}
`, hclString(f.url()))
}

var hostileAnswers = []struct {
	name string
	bad  misbehaviour
	// mustFail: the answer is past any sane bound, so the call (or
	// connect) must fail; otherwise it may succeed or fail, but must end.
	mustFail bool
}{
	{"header-20MB", hugeHeader, true},
	{"103x1000-16KB-each", hints(earlyHintsPad), true},
	{"103x1000-bare", hints(0), false},
	{"sse-event-40MB", endlessEvent, true},
}

// TestHostileUpstreamAnswerToToolCall runs an HTTP upstream that connects
// properly and answers tools/call with a 20 MB header block, with 1,000
// 103 Early Hints before its answer, or with an event stream whose first
// event never ends. A call through mcpvisor's /mcp must
// end within the bound — failing cleanly where the answer is past any sane
// bound — while mcpvisor's RSS grows by less than 100 MB and /healthz
// keeps answering.
func TestHostileUpstreamAnswerToToolCall(t *testing.T) {
	for _, tc := range hostileAnswers {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, tc.bad)
			mv := startMcpvisor(t, echoBlock()+"\n"+badBlock(f))
			cs := connectClient(t, mv)
			waitTool(t, cs, badTool)
			if st := mv.status(t)["bad"]; st.State != "ready" {
				t.Fatalf("the fake upstream should be ready before the call; status: %+v", st)
			}

			before := mv.rssKB(t)
			peak := mv.trackPeak(t)
			ctx, cancel := context.WithTimeout(context.Background(), callBound)
			defer cancel()
			start := time.Now()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: badTool, Arguments: map[string]any{}})
			took := time.Since(start).Round(time.Millisecond)
			peakKB := peak.peakKB()

			outcome := fmt.Sprintf("error %v", err)
			if err == nil {
				outcome = fmt.Sprintf("result isError=%v content=%s", res.IsError, contentText(res))
			}
			t.Logf("call took %s: %s", took, outcome)
			t.Logf("RSS before %d kB, peak %d kB (+%d kB); hostile answers served: %d",
				before, peakKB, peakKB-before, f.served.Load())
			t.Logf("status of bad: %+v", mv.status(t)["bad"])

			if f.served.Load() == 0 {
				t.Errorf("the fake upstream never got the tools/call (the test tested nothing)")
			}
			if ctx.Err() != nil {
				t.Errorf("the call did not end within %s", callBound)
			} else if tc.mustFail && err == nil && !res.IsError {
				t.Errorf("the call succeeded; an upstream answer with %s must fail it cleanly", tc.name)
			}
			if grow := peakKB - before; grow > upstreamRSSBudget {
				t.Errorf("the hostile answer grew mcpvisor's RSS by %d MB (from %d MB to %d MB), budget %d MB",
					grow/mb, before/mb, peakKB/mb, upstreamRSSBudget/mb)
			}
			mv.alive(t)
			mv.healthz(t, "after the call")
		})
	}
}

// TestHostileUpstreamAnswerToInitialize adds (by SIGHUP reload) an HTTP
// upstream that answers initialize itself with a 20 MB header block, or
// with 1,000 padded 103 Early Hints. The server must show in /status as
// not ready with a last_error, mcpvisor's RSS must grow by less than
// 100 MB, and /healthz must keep answering.
func TestHostileUpstreamAnswerToInitialize(t *testing.T) {
	for _, tc := range hostileAnswers {
		if !tc.mustFail {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, tc.bad)
			f.badInit.Store(true)
			mv := startMcpvisor(t, echoBlock())

			before := mv.rssKB(t)
			peak := mv.trackPeak(t)
			cfg := hostConfig(mv.addr, "", echoBlock()+"\n"+badBlock(f))
			if err := os.WriteFile(mv.config, []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Kill(mv.pid, syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}

			deadline := time.Now().Add(callBound)
			var st serverStatus
			for {
				var ok bool
				st, ok = mv.status(t)["bad"]
				if ok && st.State == "ready" {
					t.Fatalf("an upstream whose initialize answer is %s became ready: %+v", tc.name, st)
				}
				if ok && st.State != "starting" && st.LastError != "" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("within %s of the reload, /status never showed the server failed with a last_error; last: %+v (present: %v)",
						callBound, st, ok)
				}
				time.Sleep(50 * time.Millisecond)
			}
			peakKB := peak.peakKB()
			t.Logf("status of bad: %+v", st)
			t.Logf("RSS before %d kB, peak %d kB (+%d kB); hostile answers served: %d",
				before, peakKB, peakKB-before, f.served.Load())
			if f.served.Load() == 0 {
				t.Errorf("the fake upstream never got a request (the test tested nothing)")
			}
			if grow := peakKB - before; grow > upstreamRSSBudget {
				t.Errorf("the hostile answer grew mcpvisor's RSS by %d MB (from %d MB to %d MB), budget %d MB",
					grow/mb, before/mb, peakKB/mb, upstreamRSSBudget/mb)
			}
			mv.alive(t)
			mv.healthz(t, "after the failed connect")
		})
	}
}

// contentText is a call result's text content, shortened for messages.
func contentText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	s := b.String()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return fmt.Sprintf("%q", s)
}
