package hardening_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tmaxmax/go-sse"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// notifyRounds is how many calls each ordering test makes. Without the
// ordering, a notification sent just before the result loses the race in
// a few percent of calls on an idle machine, so every run of the test
// meets it many times over.
const notifyRounds = 40

// wireMessage is a JSON-RPC message as the client read it.
type wireMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		ProgressToken json.RawMessage `json:"progressToken"`
		Progress      float64         `json:"progress"`
		Level         string          `json:"level"`
	} `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// stream sends one request and returns every message of its answer in the
// order they were written: the event stream of a POST, read by an SSE
// parser other than the ones mcpvisor and the go-sdk use.
func (s *rawSession) stream(t *testing.T, id int, method, params string) []wireMessage {
	t.Helper()
	return streamRequest(t, s.hc, s.mv, sessionProtocol, s.id, id, method, params)
}

// statelessMeta is the _meta a 2026-07-28 client sends with every request
// (SEP-2575): its version, identity and capabilities.
const statelessMeta = `"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
	`"io.modelcontextprotocol/clientInfo":{"name":"hardening-raw","version":"1"},` +
	`"io.modelcontextprotocol/clientCapabilities":{}`

// streamRequest POSTs one request to mcpvisor's /mcp as a client on
// version (in session sessionID, if any) and returns every message of its
// answer in the order they were written.
func streamRequest(t *testing.T, hc *http.Client, mv *mcpvisor, version, sessionID string, id int, method, params string) []wireMessage {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+mv.addr+"/mcp",
		strings.NewReader(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", version)
	if sessionID != "" {
		req.Header.Set("Mcp-Session-Id", sessionID)
	}
	if version >= "2026-07-28" {
		// SEP-2575's routing headers, checked against the body.
		var p struct {
			Name string `json:"name"`
		}
		json.Unmarshal([]byte(params), &p)
		req.Header.Set("Mcp-Method", method)
		req.Header.Set("Mcp-Name", p.Name)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("POST /mcp: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		t.Fatalf("%s: %s %s", method, resp.Status, b)
	}
	var msgs []wireMessage
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		var m wireMessage
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&m); err != nil {
			t.Fatalf("%s: decoding the %s answer: %v", method, ct, err)
		}
		return append(msgs, m)
	}
	for ev, err := range sse.Read(resp.Body, nil) {
		if err != nil {
			t.Fatalf("%s: reading the event stream: %v", method, err)
		}
		if ev.Data == "" {
			continue
		}
		var m wireMessage
		if err := json.Unmarshal([]byte(ev.Data), &m); err != nil {
			t.Fatalf("%s: event %q is not a JSON-RPC message: %v", method, ev.Data, err)
		}
		msgs = append(msgs, m)
		if string(m.ID) == fmt.Sprint(id) {
			break
		}
	}
	return msgs
}

// describe renders messages for a failure report.
func describe(msgs []wireMessage) string {
	var b strings.Builder
	for _, m := range msgs {
		if m.Method != "" {
			fmt.Fprintf(&b, "\n  %s token=%s progress=%v level=%s", m.Method, m.Params.ProgressToken, m.Params.Progress, m.Params.Level)
		} else {
			fmt.Fprintf(&b, "\n  response id=%s error=%s", m.ID, m.Error)
		}
	}
	return b.String()
}

// remoteUpstream is a way to reach an example server over the network.
type remoteUpstream struct {
	name  string
	flags []string // the server's, besides the address
	attrs string   // of the server block, besides url
}

// remoteUpstreams: streamable HTTP on the default session-based version,
// on 2026-07-28 (stateless, one POST per request), and legacy SSE.
var remoteUpstreams = []remoteUpstream{
	{"http", []string{"-http"}, ""},
	{"http-2026-07-28", []string{"-stateless", "-http"}, "  protocol_version = \"2026-07-28\"\n"},
	{"sse", []string{"-sse"}, "  transport = \"sse\"\n"},
}

// serve starts the example server bin as u describes and an mcpvisor
// whose server block name reaches it, waits until mcpvisor lists the
// server's tool, and opens a raw session on mcpvisor.
func (u remoteUpstream) serve(t *testing.T, bin, name, tool string) (*mcpvisor, *rawSession) {
	t.Helper()
	srv := testutil.StartServer(t, bins[bin], append(u.flags, freeAddr(t))...)
	mv := startMcpvisor(t, fmt.Sprintf("server %q {\n  url = %s\n%s}\n", name, hclString(srv.URL), u.attrs))
	waitTool(t, connectClient(t, mv), name+"__"+tool)
	return mv, openRawSession(t, mv)
}

// Regression (#13): every progress notification an HTTP or legacy SSE
// upstream sends about a call reaches the client on the call's own stream,
// in order, before the call's result — for clients on the session-based
// protocol and on 2026-07-28 alike. The go-sdk client hands a response
// to its caller as soon as it reads it but notifications to a handler
// goroutine, so without mcpvisor ordering them the last ones arrived after
// the result, where the downstream stream was already closed: dropped.
func TestProgressPrecedesResultFromRemoteUpstreams(t *testing.T) {
	for _, up := range remoteUpstreams {
		t.Run(up.name, func(t *testing.T) {
			mv, s := up.serve(t, "echo", "web", "progress")
			const steps = 3
			for i := 1; i <= notifyRounds; i++ {
				token := fmt.Sprintf(`"tok-%d"`, i)
				var msgs []wireMessage
				if i%2 == 1 {
					msgs = s.stream(t, i, "tools/call",
						fmt.Sprintf(`{"name":"web__progress","arguments":{"steps":%d,"interval_ms":10},"_meta":{"progressToken":%s}}`, steps, token))
				} else {
					// Every other call as a 2026-07-28 client: stateless,
					// through the gateway's input bridge.
					msgs = streamRequest(t, s.hc, mv, "2026-07-28", "", i, "tools/call",
						fmt.Sprintf(`{"name":"web__progress","arguments":{"steps":%d,"interval_ms":10},"_meta":{"progressToken":%s,%s}}`, steps, token, statelessMeta))
				}
				ok := len(msgs) == steps+1
				for j := 0; ok && j < steps; j++ {
					m := msgs[j]
					ok = m.Method == "notifications/progress" && string(m.Params.ProgressToken) == token && m.Params.Progress == float64(j+1)
				}
				if ok {
					last := msgs[steps]
					ok = string(last.ID) == fmt.Sprint(i) && last.Error == nil && strings.Contains(string(last.Result), "done 3 steps")
				}
				if !ok {
					t.Fatalf("call %d: want %d progress notifications with token %s, then the result; got:%s", i, steps, token, describe(msgs))
				}
			}
		})
	}
}

// Regression (#13): log messages an HTTP or legacy SSE upstream sends
// while handling a call reach the client before the call's result.
func TestLogsPrecedeResultFromRemoteUpstreams(t *testing.T) {
	for _, up := range remoteUpstreams {
		t.Run(up.name, func(t *testing.T) {
			_, s := up.serve(t, "everything", "ev", "test_tool_with_logging")
			if got := s.call(t, 1, "logging/setLevel", `{"level":"debug"}`); !strings.Contains(got, `"result"`) {
				t.Fatalf("logging/setLevel: %s", got)
			}
			// The tool logs three times, 50 ms apart; the last log and the
			// result leave the server back to back.
			for i := 2; i < 2+notifyRounds/4; i++ {
				msgs := s.stream(t, i, "tools/call", `{"name":"ev__test_tool_with_logging","arguments":{}}`)
				logs := 0
				for _, m := range msgs {
					if m.Method == "notifications/message" {
						logs++
					}
				}
				last := msgs[len(msgs)-1]
				if logs != 3 || string(last.ID) != fmt.Sprint(i) || last.Error != nil {
					t.Fatalf("call %d: want 3 log messages, then the result; got:%s", i, describe(msgs))
				}
			}
		})
	}
}
