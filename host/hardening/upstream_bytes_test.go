//go:build unix

package hardening_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

const (
	// endlessBodyBytes is what an "endless" answer sends at most before the
	// upstream gives up: far past any limit, and enough to blow the RSS
	// bound below when read whole.
	endlessBodyBytes = 400 << 20
	// endlessRSSBound bounds mcpvisor's RSS growth while an upstream sends
	// an endless answer (the default max_message_size is 16 MiB).
	endlessRSSBound = 200 * mb
	// bytesTool is the bytes upstream's tool as mcpvisor exposes it.
	bytesTool = "big__t"
)

// bytesUpstream is a streamable HTTP MCP server on net/http whose one
// tool, "t", answers by its "mode" argument:
//
//   - "ok": a small result;
//   - "endless-length": declares a Content-Length of a terabyte and sends
//     endlessBodyBytes of one JSON string;
//   - "endless-chunked": the same without a length (chunked);
//   - "big": a valid result of "size" bytes of text, with a Content-Length;
//   - "big-chunked": the same, chunked;
//   - "sse-big": an event stream whose result event holds "size" bytes;
//   - "sse-endless": an event stream whose result event never ends (until
//     endlessBodyBytes).
type bytesUpstream struct {
	srv      *http.Server
	ln       net.Listener
	bigCalls atomic.Int64 // big and endless answers begun
	inits    atomic.Int64 // initialize requests: one per session
}

func startBytesUpstream(t *testing.T) *bytesUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &bytesUpstream{ln: ln}
	u.srv = &http.Server{Handler: http.HandlerFunc(u.serveHTTP), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		u.srv.Serve(ln)
	}()
	t.Cleanup(func() {
		u.srv.Close()
		<-done
	})
	return u
}

func (u *bytesUpstream) url() string { return "http://" + u.ln.Addr().String() + "/mcp" }

func (u *bytesUpstream) serveHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
	case http.MethodDelete:
		return
	default:
		w.Header().Set("Allow", "POST, DELETE")
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Arguments struct {
				Mode string `json:"mode"`
				Size int    `json:"size"`
			} `json:"arguments"`
		} `json:"params"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if len(msg.ID) == 0 {
		w.WriteHeader(http.StatusAccepted) // a notification
		return
	}
	answer := func(result string) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(msg.ID)+`,"result":`+result+`}`)
	}
	switch msg.Method {
	case "initialize":
		u.inits.Add(1)
		w.Header().Set("Mcp-Session-Id", "bytes-session-1")
		answer(`{"protocolVersion":"` + sessionProtocol + `","capabilities":{"tools":{}},"serverInfo":{"name":"bytes","version":"1"}}`)
	case "tools/list":
		answer(`{"tools":[{"name":"t","description":"answers with as many bytes as asked","inputSchema":{"type":"object"}}]}`)
	case "tools/call":
		u.call(w, msg.ID, msg.Params.Arguments.Mode, msg.Params.Arguments.Size)
	default:
		answer(`{}`)
	}
}

// call writes a tools/call answer of the given mode (see bytesUpstream).
func (u *bytesUpstream) call(w http.ResponseWriter, id json.RawMessage, mode string, size int) {
	head := `{"jsonrpc":"2.0","id":` + string(id) + `,"result":{"content":[{"type":"text","text":"`
	tail := `"}]}}`
	w.Header().Set("Content-Type", "application/json")
	switch mode {
	case "ok":
		io.WriteString(w, head+"ok"+tail)
		return
	case "endless-length", "endless-chunked":
		u.bigCalls.Add(1)
		if mode == "endless-length" {
			w.Header().Set("Content-Length", strconv.Itoa(1<<40))
		}
		io.WriteString(w, head)
		w.(http.Flusher).Flush()
		chunk := strings.Repeat("x", 64<<10)
		for n := 0; n < endlessBodyBytes; n += len(chunk) {
			if _, err := io.WriteString(w, chunk); err != nil {
				return // mcpvisor stopped reading
			}
		}
		return
	case "sse-big", "sse-endless":
		// An event stream: a progress notification, then the result as
		// one event ("sse-big": size bytes of text, TypeScript's key
		// order) or an event that never ends.
		u.bigCalls.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: message\nid: 1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"working\"}}\n\n")
		io.WriteString(w, "event: message\nid: 2\ndata: ")
		if mode == "sse-big" {
			io.WriteString(w, `{"result":{"content":[{"type":"text","text":"`+strings.Repeat("y", size)+`"}]},"jsonrpc":"2.0","id":`+string(id)+"}\n\n")
			return
		}
		w.(http.Flusher).Flush()
		chunk := strings.Repeat("x", 64<<10)
		for n := 0; n < endlessBodyBytes; n += len(chunk) {
			if _, err := io.WriteString(w, chunk); err != nil {
				return // mcpvisor stopped reading
			}
		}
		return
	case "big", "big-chunked":
		u.bigCalls.Add(1)
		text := strings.Repeat("y", size)
		if mode == "big" {
			w.Header().Set("Content-Length", strconv.Itoa(len(head)+len(text)+len(tail)))
		}
		io.WriteString(w, head)
		if mode == "big-chunked" {
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, text+tail)
		return
	}
	http.Error(w, "unknown mode "+mode, http.StatusBadRequest)
}

// bytesBlock is the server block for the bytes upstream, with extra
// attributes.
func bytesBlock(u *bytesUpstream, attrs string) string {
	return fmt.Sprintf(`server "big" {
  url             = %s
  timeout         = "60s"
  connect_timeout = "10s"
%s}
`, hclString(u.url()), attrs)
}

// callMode calls the bytes upstream's tool through mcpvisor.
func callMode(ctx context.Context, cs *mcp.ClientSession, mode string, size int) (*mcp.CallToolResult, error) {
	return cs.CallTool(ctx, &mcp.CallToolParams{Name: bytesTool, Arguments: map[string]any{"mode": mode, "size": size}})
}

// requireOK requires a call to have succeeded with text of want bytes
// (-1: any).
func requireOK(t *testing.T, what string, res *mcp.CallToolResult, err error, want int) {
	t.Helper()
	if err != nil {
		t.Errorf("%s failed: %v", what, err)
		return
	}
	if res.IsError || len(res.Content) != 1 {
		t.Errorf("%s: want one text, got isError=%v content=%s", what, res.IsError, contentText(res))
		return
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok || (want >= 0 && len(tc.Text) != want) {
		t.Errorf("%s: want %d bytes of text, got %s", what, want, contentText(res))
	}
}

// TestUpstreamEndlessJSONBody runs an HTTP upstream that answers a
// tools/call with an endless application/json body, with a Content-Length
// of a terabyte or chunked. The call must fail with an error that names
// the server, the limit and the setting to raise; mcpvisor's RSS must grow
// by less than 200 MB; calls to another server and to the same server must
// succeed meanwhile and afterwards, and the server must stay ready (the
// session survives: it is not counted as a crash).
func TestUpstreamEndlessJSONBody(t *testing.T) {
	testUpstreamEndless(t, "endless-length", "endless-chunked")
}

// TestUpstreamOversizedEvent is TestUpstreamEndlessJSONBody for an upstream
// that answers with an event stream: its result event is 20 MiB, over the
// default max_message_size of 16 MiB, or never ends.
func TestUpstreamOversizedEvent(t *testing.T) {
	testUpstreamEndless(t, "sse-big", "sse-endless")
}

func testUpstreamEndless(t *testing.T, modes ...string) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			u := startBytesUpstream(t)
			mv := startMcpvisor(t, echoBlock()+"\n"+bytesBlock(u, ""))
			cs := connectClient(t, mv)
			waitTool(t, cs, bytesTool)
			waitTool(t, cs, "echo__echo")

			before := mv.rssKB(t)
			peak := mv.trackPeak(t)
			ctx, cancel := context.WithTimeout(context.Background(), callBound)
			defer cancel()

			var wg sync.WaitGroup
			var endlessErr error
			var endlessRes *mcp.CallToolResult
			wg.Go(func() { endlessRes, endlessErr = callMode(ctx, cs, mode, 20<<20) })
			// Meanwhile: another server, and the same one.
			for i := range 4 {
				wg.Go(func() {
					res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__echo", Arguments: map[string]any{"text": "meanwhile"}})
					requireOK(t, fmt.Sprintf("echo call %d during the endless answer", i), res, err, -1)
				})
				wg.Go(func() {
					res, err := callMode(ctx, cs, "ok", 0)
					requireOK(t, fmt.Sprintf("ok call %d to the same server during the endless answer", i), res, err, 2)
				})
			}
			wg.Wait()
			peakKB := peak.peakKB()
			t.Logf("RSS before %d kB, peak %d kB (+%d kB)", before, peakKB, peakKB-before)
			t.Logf("endless call: result %v, error %v", endlessRes != nil, endlessErr)

			if u.bigCalls.Load() == 0 {
				t.Fatal("the upstream never got the endless call (the test tested nothing)")
			}
			if ctx.Err() != nil {
				t.Fatalf("the calls did not end within %s", callBound)
			}
			if endlessErr == nil {
				t.Errorf("the endless answer's call succeeded (isError=%v, %s); it must fail", endlessRes.IsError, contentText(endlessRes))
			} else {
				for _, want := range []string{`"big"`, "max_message_size", "16MiB", "server block"} {
					if !strings.Contains(endlessErr.Error(), want) {
						t.Errorf("the endless answer's error does not say %s: %v", want, endlessErr)
					}
				}
			}
			if grow := peakKB - before; grow > endlessRSSBound {
				t.Errorf("the endless answer grew mcpvisor's RSS by %d MB (from %d MB to %d MB), bound %d MB",
					grow/mb, before/mb, peakKB/mb, endlessRSSBound/mb)
			}

			// Afterwards: the same session still serves, and the server
			// was never taken for crashed.
			res, err := callMode(ctx, cs, "ok", 0)
			requireOK(t, "a call to the same server afterwards", res, err, 2)
			res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__echo", Arguments: map[string]any{"text": "after"}})
			requireOK(t, "an echo call afterwards", res, err, -1)
			if st := mv.status(t)["big"]; st.State != "ready" {
				t.Errorf("after the endless answer the server is %q (last error %q), want ready", st.State, st.LastError)
			}
			if n := u.inits.Load(); n != 1 {
				t.Errorf("mcpvisor initialized %d sessions with the upstream; the endless answer must fail its call, not the session", n)
			}
			if n := mv.limitHits(t, "max_message_size"); n < 1 {
				t.Errorf("mcpvisor_limit_hits_total{limit=\"max_message_size\"} is %d after the endless answer, want at least 1", n)
			}
			mv.alive(t)
			mv.healthz(t, "after the endless answer")
		})
	}
}

const (
	// budgetInflight is the host's max_inflight_bytes in the budget test,
	// and budgetMessage the server's max_message_size.
	budgetInflight = 16 << 20
	budgetMessage  = 8 << 20
	// budgetResult is each large result's text, budgetCalls how many are
	// asked for at once: 24 × 6 MiB is 144 MiB, over four times the budget.
	budgetResult = 6 << 20
	budgetCalls  = 24
	// budgetRSSBound bounds mcpvisor's RSS growth while the results are in
	// flight. Each result is held several times over on its way through
	// (the body, the decoded result, the answer encoded for the client),
	// and the Go heap grows to twice what is live before collecting: with
	// the budget the growth stays well within this (about 350 MB with two
	// results in flight), without it every result is held at once (about
	// 1.6 GB).
	budgetRSSBound = 700 * mb
)

// TestUpstreamResultsWithinInflightBudget asks an HTTP upstream for 24
// results of 6 MiB at once, with a Content-Length and chunked, through a
// mcpvisor whose max_inflight_bytes is 16 MiB. The client reads each answer
// as it comes, without decoding it, so that what piles up is what mcpvisor
// reads from the upstream, not what it has yet to write to a slow client.
// Every call must either succeed whole or fail as busy, naming the
// setting; mcpvisor's RSS must stay bounded; and the server must stay
// ready, on its first session.
func TestUpstreamResultsWithinInflightBudget(t *testing.T) {
	for _, mode := range []string{"big", "big-chunked"} {
		t.Run(mode, func(t *testing.T) {
			u := startBytesUpstream(t)
			mv := startMcpvisorWith(t, fmt.Sprintf("  max_inflight_bytes = %d\n", budgetInflight),
				echoBlock()+"\n"+bytesBlock(u, fmt.Sprintf("  max_message_size = %d\n", budgetMessage)))
			cs := connectClient(t, mv)
			waitTool(t, cs, bytesTool)
			raw := openRawSession(t, mv)

			before := mv.rssKB(t)
			peak := mv.trackPeak(t)
			var wg sync.WaitGroup
			var ok, busy atomic.Int64
			for i := range budgetCalls {
				wg.Go(func() {
					n, head, tail := raw.callDiscard(t, i+1, fmt.Sprintf(`{"name":%q,"arguments":{"mode":%q,"size":%d}}`, bytesTool, mode, budgetResult))
					switch {
					case n > budgetResult && strings.Contains(tail, `"isError":false`) || n > budgetResult && !strings.Contains(tail, "isError"):
						ok.Add(1)
					case strings.Contains(head, "busy"):
						busy.Add(1)
						if !strings.Contains(head, "max_inflight_bytes") || !strings.Contains(head, `\"big\"`) {
							t.Errorf("call %d: a busy error must name the server and max_inflight_bytes: %s", i, head)
						}
					default:
						t.Errorf("call %d: neither a whole result nor a busy error (%d bytes): %.300s … %.300s", i, n, head, tail)
					}
				})
			}
			wg.Wait()
			peakKB := peak.peakKB()
			t.Logf("%d calls succeeded, %d were refused as busy; RSS before %d kB, peak %d kB (+%d kB)",
				ok.Load(), busy.Load(), before, peakKB, peakKB-before)
			if ok.Load() == 0 {
				t.Errorf("no large call succeeded")
			}
			if grow := peakKB - before; grow > budgetRSSBound {
				t.Errorf("%d results of %d MiB grew mcpvisor's RSS by %d MB (from %d MB to %d MB), bound %d MB with max_inflight_bytes = %d MiB",
					budgetCalls, budgetResult>>20, grow/mb, before/mb, peakKB/mb, budgetRSSBound/mb, budgetInflight>>20)
			}
			ctx, cancel := context.WithTimeout(context.Background(), callBound)
			defer cancel()
			res, err := callMode(ctx, cs, "ok", 0)
			requireOK(t, "a call afterwards", res, err, 2)
			if n := u.inits.Load(); n != 1 {
				t.Errorf("mcpvisor initialized %d sessions with the upstream; large results must not end the session", n)
			}
			if st := mv.status(t)["big"]; st.State != "ready" {
				t.Errorf("after the large results the server is %q (last error %q), want ready", st.State, st.LastError)
			}
			mv.alive(t)
		})
	}
}

// callDiscard sends one tools/call on the raw session and reads the whole
// answer as it comes, keeping only its first and last 4 kB.
func (s *rawSession) callDiscard(t *testing.T, id int, params string) (n int64, head, tail string) {
	return s.callDiscardAfter(t, id, params, 0)
}

// callDiscardAfter is callDiscard by a slow client: it starts reading the
// answer's body only delay after its head arrived.
func (s *rawSession) callDiscardAfter(t *testing.T, id int, params string, delay time.Duration) (n int64, head, tail string) {
	req, err := http.NewRequest(http.MethodPost, "http://"+s.mv.addr+"/mcp",
		strings.NewReader(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":%s}`, id, params)))
	if err != nil {
		t.Error(err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", sessionProtocol)
	req.Header.Set("Mcp-Session-Id", s.id)
	resp, err := s.hc.Do(req)
	if err != nil {
		t.Errorf("POST /mcp: %v", err)
		return
	}
	defer resp.Body.Close()
	time.Sleep(delay)
	ends := &headTail{}
	n, err = io.Copy(ends, resp.Body)
	if err != nil {
		t.Errorf("reading the answer to call %d: %v", id, err)
	}
	return n, string(ends.head), string(ends.tail)
}

// headTail keeps the first and the last 4 kB written to it.
type headTail struct{ head, tail []byte }

func (h *headTail) Write(p []byte) (int, error) {
	const keep = 4 << 10
	if room := keep - len(h.head); room > 0 {
		h.head = append(h.head, p[:min(room, len(p))]...)
	}
	h.tail = append(h.tail, p[max(0, len(p)-keep):]...)
	if len(h.tail) > keep {
		h.tail = h.tail[len(h.tail)-keep:]
	}
	return len(p), nil
}

// TestOversizedResultStdioAndPlugin runs a server that answers a
// tools/call with a message of 4 MiB while its max_message_size is 1 MiB,
// with the id before the result (as the go-sdk writes it) and after it (as
// the TypeScript SDK does), over stdio and through the unix transport
// plugin. The call must fail with an error naming the server and the
// setting; the session must survive (the next call is answered by the
// same process, on the same connection) and the server must stay ready.
func TestOversizedResultStdioAndPlugin(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "bigstdio")
	if err := testutil.GoBuild(bin, "./host/hardening/internal/bigstdio"); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"stdio", "plugin"} {
		t.Run(kind, func(t *testing.T) {
			reach := fmt.Sprintf("  command = %s\n", hclString(bin))
			if kind == "plugin" {
				dir, err := os.MkdirTemp("", "mcpvisor-hardening-") // socket paths are short
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.RemoveAll(dir) })
				sock := filepath.Join(dir, "s.sock")
				srv := testutil.StartServer(t, bin, "-unix", sock)
				srv.WaitLine(t, "listening on unix:", readyTimeout)
				reach = fmt.Sprintf("  plugin \"unix\" {\n    command = %s\n    config = { socket = %s }\n  }\n", hclString(unixPlugin(t)), hclString(sock))
			}
			block := fmt.Sprintf("server \"bigio\" {\n%s  max_message_size = \"1MiB\"\n  timeout = \"60s\"\n}\n", reach)
			mv := startMcpvisor(t, block)
			cs := connectClient(t, mv)
			waitTool(t, cs, "bigio__t")
			ctx, cancel := context.WithTimeout(context.Background(), callBound)
			defer cancel()
			call := func(mode string) (*mcp.CallToolResult, error) {
				return cs.CallTool(ctx, &mcp.CallToolParams{Name: "bigio__t", Arguments: map[string]any{"mode": mode, "size": 4 << 20}})
			}
			// The ok call names the process (stdio) or the connection
			// (plugin) that answered it.
			session := func(when string) string {
				res, err := call("ok")
				requireOK(t, "the ok call "+when, res, err, -1)
				if err != nil || len(res.Content) == 0 {
					t.FailNow()
				}
				return res.Content[0].(*mcp.TextContent).Text
			}
			first := session("before")
			for _, mode := range []string{"id-first", "result-first"} {
				res, err := call(mode)
				if err == nil {
					t.Errorf("%s: a 4 MiB result over a 1 MiB max_message_size succeeded (isError=%v)", mode, res.IsError)
					continue
				}
				for _, want := range []string{`"bigio"`, "max_message_size (1MiB)", "server block"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s: the error does not say %s: %v", mode, want, err)
					}
				}
				if now := session("after " + mode); now != first {
					t.Errorf("%s: the oversized result ended the session (%s before, %s now); it must fail only its call", mode, first, now)
				}
			}
			if st := mv.status(t)["bigio"]; st.State != "ready" {
				t.Errorf("the server is %q (last error %q), want ready", st.State, st.LastError)
			}
		})
	}
}

// TestSlowClientsResultsWithinInflightBudget runs servers whose results
// (6 MiB each, under their max_message_size) arrive whole — a stdio line,
// or one event of a POST's event stream — for clients that read
// their answers slowly, so that every result is held while its client is
// not reading. Each counts against the host's max_inflight_bytes (16 MiB)
// until its answer has been written: results past the budget fail as
// busy, naming the server and the setting, instead of piling up; the
// calls that fit succeed, the server's session goes on, and /metrics
// counts the refusals. (A JSON body is read under the budget as it arrives
// and waits for room instead: TestUpstreamResultsWithinInflightBudget.)
func TestSlowClientsResultsWithinInflightBudget(t *testing.T) {
	const (
		calls     = 12
		size      = 6 << 20
		slowRead  = time.Second
		budgetMiB = 16
	)
	bin := filepath.Join(t.TempDir(), "bigstdio")
	if err := testutil.GoBuild(bin, "./host/hardening/internal/bigstdio"); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"stdio", "sse"} {
		t.Run(kind, func(t *testing.T) {
			server, mode := "bigio", "id-first"
			block := fmt.Sprintf("server \"bigio\" {\n  command = %s\n  max_message_size = \"8MiB\"\n  timeout = \"60s\"\n}\n", hclString(bin))
			var u *bytesUpstream
			if kind != "stdio" {
				u = startBytesUpstream(t)
				server, mode, block = "big", "sse-big", bytesBlock(u, "  max_message_size = \"8MiB\"\n")
			}
			tool := server + "__t"
			if u != nil {
				tool = bytesTool
			}
			mv := startMcpvisorWith(t, fmt.Sprintf("  max_inflight_bytes = \"%dMiB\"\n", budgetMiB), block)
			cs := connectClient(t, mv)
			waitTool(t, cs, tool)
			raw := openRawSession(t, mv)

			var wg sync.WaitGroup
			var ok, busy atomic.Int64
			for i := range calls {
				wg.Go(func() {
					n, head, tail := raw.callDiscardAfter(t, i+1, fmt.Sprintf(`{"name":%q,"arguments":{"mode":%q,"size":%d}}`, tool, mode, size), slowRead)
					switch {
					case n > size && !strings.Contains(tail, `"isError":true`):
						ok.Add(1)
					case strings.Contains(head, "busy"):
						busy.Add(1)
						if !strings.Contains(head, "max_inflight_bytes") || !strings.Contains(head, `\"`+server+`\"`) {
							t.Errorf("call %d: a busy error must name the server and max_inflight_bytes: %s", i, head)
						}
					default:
						t.Errorf("call %d: neither a whole result nor a busy error (%d bytes): %.300s … %.300s", i, n, head, tail)
					}
				})
			}
			wg.Wait()
			t.Logf("%d calls of %d MiB for slow clients: %d succeeded, %d refused as busy", calls, size>>20, ok.Load(), busy.Load())
			if ok.Load() == 0 {
				t.Error("no large call succeeded")
			}
			if busy.Load() == 0 {
				t.Errorf("%d results of %d MiB held for slow clients all got through a %d MiB max_inflight_bytes", calls, size>>20, budgetMiB)
			}
			if n := mv.limitHits(t, "max_inflight_bytes"); n < int(busy.Load()) {
				t.Errorf("mcpvisor_limit_hits_total{limit=\"max_inflight_bytes\"} is %d, want at least the %d busy calls", n, busy.Load())
			}
			ctx, cancel := context.WithTimeout(context.Background(), callBound)
			defer cancel()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"mode": "ok"}})
			requireOK(t, "a call afterwards", res, err, -1)
			if st := mv.status(t)[server]; st.State != "ready" || st.Generation != 1 {
				t.Errorf("after the refused results the server is %q, generation %d (last error %q); refusing results must not end its session", st.State, st.Generation, st.LastError)
			}
			mv.alive(t)
		})
	}
}
