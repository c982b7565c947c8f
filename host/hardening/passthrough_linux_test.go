//go:build linux

package hardening_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// byteSession is a 2025-11-25 session with mcpvisor over HTTP, spoken by
// hand, so that a test sees the bytes of an answer as they were written.
type byteSession struct {
	t    *testing.T
	addr string
	id   string
	hc   *http.Client
}

func openByteSession(t *testing.T, mv *mcpvisor) *byteSession {
	t.Helper()
	s := &byteSession{t: t, addr: mv.addr, hc: &http.Client{Timeout: 2 * time.Minute}}
	resp := s.postResp(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if s.id = resp.Header.Get("Mcp-Session-Id"); s.id == "" {
		t.Fatalf("initialize: no Mcp-Session-Id (status %d)", resp.StatusCode)
	}
	resp = s.postResp(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return s
}

// request is the HTTP request of one POST of body on the session.
func (s *byteSession) request(body string) string {
	sess := ""
	if s.id != "" {
		sess = "Mcp-Session-Id: " + s.id + "\r\n"
	}
	return fmt.Sprintf("POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
		"Mcp-Protocol-Version: 2025-11-25\r\n%sContent-Length: %d\r\n\r\n%s", s.addr, sess, len(body), body)
}

func (s *byteSession) postResp(body string) *http.Response {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+s.addr+"/mcp", strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	if s.id != "" {
		req.Header.Set("Mcp-Session-Id", s.id)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		s.t.Fatalf("POST %.80s: %v", body, err)
	}
	return resp
}

// call posts a request and returns the JSON-RPC message that answers it,
// as written: the data of the event stream's message event, or the JSON
// body.
func (s *byteSession) call(body string) []byte {
	s.t.Helper()
	resp := s.postResp(body)
	defer resp.Body.Close()
	all, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("reading the answer to %.80s: %v", body, err)
	}
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("POST %.80s: status %d: %.300s", body, resp.StatusCode, all)
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return all
	}
	for line := range bytes.SplitSeq(all, []byte("\n")) {
		if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok && bytes.Contains(d, []byte(`"id"`)) {
			return d
		}
	}
	s.t.Fatalf("no answer in the event stream of %.80s: %.300s", body, all)
	return nil
}

func bigBlock(name string) string {
	return fmt.Sprintf("server %q {\n  command = %s\n  args = [\"-big\"]\n}\n", name, hclString(bins["echo"]))
}

// TestResultsPassThroughAsBytes calls a tool whose result is 15 MiB of '<'
// and reads a resource of 15 MiB of '<' over HTTP (then over `run
// --stdio`), with the result budget at 32 MiB: each answer must be the upstream's bytes exactly (encoding/json
// would write every '<' as \u003c, six times its size), and mcpvisor's
// peak RSS must stay within 1.5 × max_inflight_bytes + 200 MB (a decoded,
// re-encoded and escaped result costs about 1 GB).
func TestResultsPassThroughAsBytes(t *testing.T) {
	const size = 15 << 20
	const budget = 32 << 20
	mv := startMcpvisorWith(t, "  max_inflight_bytes = \"32MiB\"\n", bigBlock("echo"))
	waitTool(t, connectClient(t, mv), "echo__big")
	s := openByteSession(t, mv)
	before := mv.rssKB(t) / mb
	peak := mv.trackPeak(t)

	text := strings.Repeat("<", size)
	calls := []struct{ req, result string }{
		{
			fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo__big","arguments":{"size":%d}}}`, size),
			`{"content":[{"type":"text","text":"` + text + `"}]}`,
		},
		{
			fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"big://text/%d"}}`, size),
			fmt.Sprintf(`{"contents":[{"uri":"big://text/%d","mimeType":"text/plain","text":"`, size) + text + `"}]}`,
		},
	}
	for i, c := range calls {
		got := s.call(c.req)
		want := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":%s}`, i+2, c.result)
		if !bytes.Equal(got, []byte(want)) {
			n := bytes.Count(got, []byte(`\u003c`))
			t.Fatalf("answer %d is not the upstream's bytes: %d bytes (want %d), %d \\u003c escapes; starts %.200s", i+2, len(got), len(want), n, got)
		}
	}
	peakMB := peak.peakKB() / mb
	bound := int64(1.5*budget>>20) + 200
	t.Logf("RSS %d MB before, peak %d MB (bound %d MB)", before, peakMB, bound)

	// A 2026-07-28 client takes the go-sdk's typed path (its results are
	// shaped for that version), which must not escape either.
	small := strings.Repeat("<", 1<<20)
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"_meta":{%s},"name":"echo__big","arguments":{"size":%d}}}`, statelessMeta, len(small))
	req, err := http.NewRequest(http.MethodPost, "http://"+mv.addr+"/mcp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo__big"} {
		req.Header.Set(k, v)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	all, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Contains(all, []byte(`"text":"`+small+`"`)) || bytes.Contains(all, []byte(`\u003c`)) || !bytes.Contains(all, []byte(`"resultType":"complete"`)) {
		t.Errorf("2026-07-28 answer (%v): %d bytes, %d \\u003c escapes; want the 1 MiB of '<' as they are, resultType complete; starts %.300s",
			err, len(all), bytes.Count(all, []byte(`\u003c`)), all)
	}

	// The same over `run --stdio`: each answer is one line, the
	// upstream's bytes in the envelope.
	c := startStdioMcpvisor(t, bigBlock("echo"))
	c.initialize(t)
	c.waitTool(t, "echo__big")
	for i, call := range calls {
		id := 20 + i
		c.send(t, strings.Replace(call.req, `"id":`+fmt.Sprint(i+2), `"id":`+fmt.Sprint(id), 1))
		got := c.answer(t, id)
		if want := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":%s}`, id, call.result); got != want {
			t.Errorf("stdio answer %d is not the upstream's bytes: %d bytes (want %d), %d \\u003c escapes; starts %.200s", id, len(got), len(want), strings.Count(got, `\u003c`), got)
		}
	}
	if peakMB > bound {
		t.Errorf("mcpvisor's peak RSS was %d MB passing two 15 MiB results, over 1.5 × max_inflight_bytes + 200 MB = %d MB", peakMB, bound)
	}
}

const (
	// stallConns is how many connections ask for a big answer and never
	// read it.
	stallConns = 100
	// stallSize is each such answer's size: more than the socket buffers
	// of a connection that reads nothing hold.
	stallSize = 6 << 20
)

// TestUnreadAnswersDroppedAndServersShareBudget opens 100 connections of
// one session that each ask server "flood" for a 6 MiB answer and never
// read it, with write_timeout = "2s" and max_inflight_bytes = "64MiB".
// Meanwhile calls to server "calm" must be answered (the flood holds at
// most its share of the budget); the unread answers must be dropped after
// the write deadline with a log line, freeing their bytes, so that a big
// call to "flood" succeeds again; mcpvisor's peak RSS must stay within
// 1.5 × max_inflight_bytes + 200 MB; and a session past
// max_inflight_per_session (64 by default) is refused with 503.
func TestUnreadAnswersDroppedAndServersShareBudget(t *testing.T) {
	const budget = 64 << 20
	mv := startMcpvisorWith(t, "  max_inflight_bytes = \"64MiB\"\n  write_timeout = \"2s\"\n", bigBlock("flood")+bigBlock("calm"))
	cs := connectClient(t, mv)
	waitTool(t, cs, "flood__big")
	waitTool(t, cs, "calm__big")
	flood := openByteSession(t, mv)
	calm := openByteSession(t, mv)
	peak := mv.trackPeak(t)

	dialer := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		// A receive buffer this small holds almost none of an answer.
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	conns := make([]net.Conn, 0, stallConns)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := range stallConns {
		req := flood.request(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"flood__big","arguments":{"size":%d,"char":"x"}}}`, 10000+i, stallSize))
		c, err := dialer.Dial("tcp", mv.addr)
		if err != nil {
			t.Fatalf("dialing: %v", err)
		}
		conns = append(conns, c)
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatalf("sending a call: %v", err)
		}
	}

	// Once the flood's answers fill what it may hold (some are refused
	// as busy), the calm server is served all the same.
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(mv.stderr.String(), "upstream response refused: max_inflight_bytes reached") {
		if time.Now().After(deadline) {
			t.Fatalf("100 calls for 6 MiB answers never filled max_inflight_bytes; log tail:\n%s", tail(mv.stderr.String(), 3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := calm.call(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"calm__big","arguments":{"size":%d}}}`, 100+i, 2<<20))
			if !bytes.Contains(got, []byte(`"result":{"content"`)) {
				t.Errorf("a call to calm during the flood failed: %.300s", got)
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("calls to calm took over a minute")
	}

	// The unread answers are dropped at their write deadline.
	deadline = time.Now().Add(time.Minute)
	for !strings.Contains(mv.stderr.String(), "client did not read its answer within write_timeout") {
		if time.Now().After(deadline) {
			t.Fatalf("no write_timeout log line a minute after 100 answers went unread; log tail:\n%s", tail(mv.stderr.String(), 3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Once the stalled answers are dropped, the flood's bytes are free
	// again: a big call to it is answered.
	deadline = time.Now().Add(time.Minute)
	for {
		got := flood.call(fmt.Sprintf(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"flood__big","arguments":{"size":%d}}}`, 8<<20))
		if bytes.Contains(got, []byte(`"result":{"content"`)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a call to flood still failed a minute after its unread answers' write deadline: %.300s", got)
		}
		time.Sleep(500 * time.Millisecond)
	}
	peakMB := peak.peakKB() / mb
	bound := int64(1.5*budget>>20) + 200
	t.Logf("peak RSS %d MB (bound %d MB)", peakMB, bound)

	// 70 calls in flight at once on one session: those past
	// max_inflight_per_session (64) get 503.
	var sleepers []net.Conn
	for i := range 70 {
		sleep := calm.request(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"calm__sleep","arguments":{"ms":3000}}}`, 1000+i))
		c, err := net.DialTimeout("tcp", mv.addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dialing: %v", err)
		}
		conns = append(conns, c)
		sleepers = append(sleepers, c)
		if _, err := io.WriteString(c, sleep); err != nil {
			t.Fatalf("sending a call: %v", err)
		}
	}
	statuses := map[int]int{}
	for _, c := range sleepers {
		c.SetReadDeadline(time.Now().Add(time.Minute))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("reading an answer to sleep: %v", err)
		}
		statuses[resp.StatusCode]++
		resp.Body.Close()
	}
	if statuses[http.StatusServiceUnavailable] == 0 || statuses[http.StatusOK] > 64 {
		t.Errorf("70 requests in flight on one session: statuses %v; want at most 64 admitted and the rest 503 (max_inflight_per_session)", statuses)
	}
	if peakMB > bound {
		t.Errorf("mcpvisor's peak RSS was %d MB with 100 unread 6 MiB answers, over 1.5 × max_inflight_bytes + 200 MB = %d MB", peakMB, bound)
	}
}

// TestBusySessionIsNotIdle: with session_idle_timeout = "2s", a session
// whose calls are all answered as bytes (before the go-sdk's handler,
// which never sees them) stays open while it calls every half second for
// 5 s, and is closed once it has been idle for longer than the timeout.
func TestBusySessionIsNotIdle(t *testing.T) {
	mv := startMcpvisorWith(t, "  session_idle_timeout = \"2s\"\n", bigBlock("echo"))
	waitTool(t, connectClient(t, mv), "echo__echo")
	s := openByteSession(t, mv)
	for i := range 10 {
		got := s.call(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo__echo","arguments":{"text":"n%d"}}}`, 10+i, i))
		if !bytes.Contains(got, []byte(fmt.Sprintf(`"text":"n%d"`, i))) {
			t.Fatalf("call %d of a busy session: %.300s", i, got)
		}
		time.Sleep(500 * time.Millisecond)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp := s.postResp(`{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"echo__echo","arguments":{"text":"x"}}}`)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a session idle for 30 s with session_idle_timeout = \"2s\" still answers (status %d)", resp.StatusCode)
		}
		time.Sleep(3 * time.Second)
	}
}
