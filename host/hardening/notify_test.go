//go:build unix

package hardening_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
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

// upstreamKind is a way for mcpvisor to reach an example server.
type upstreamKind struct {
	name string
	// block starts the example server bin for the test and returns the
	// attributes of a server block that reaches it.
	block func(t *testing.T, bin string) string
}

// urlKind reaches bin over the network: the server runs with flags and a
// free address, and the block adds attrs to its url.
func urlKind(name string, flags []string, attrs string) upstreamKind {
	return upstreamKind{name, func(t *testing.T, bin string) string {
		srv := testutil.StartServer(t, bins[bin], append(flags, freeAddr(t))...)
		return fmt.Sprintf("  url = %s\n%s", hclString(srv.URL), attrs)
	}}
}

// upstreamKinds: a stdio process, a transport plugin (the unix plugin to
// the server's -unix socket), streamable HTTP on the default session-based
// version and on 2026-07-28 (stateless, one POST per request), and legacy
// SSE.
var upstreamKinds = []upstreamKind{
	{"stdio", func(t *testing.T, bin string) string {
		return fmt.Sprintf("  command = %s\n", hclString(bins[bin]))
	}},
	{"plugin", func(t *testing.T, bin string) string {
		dir, err := os.MkdirTemp("", "mcpvisor-hardening-") // socket paths are short
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		sock := filepath.Join(dir, "s.sock")
		srv := testutil.StartServer(t, bins[bin], "-unix", sock)
		srv.WaitLine(t, "listening on unix:", readyTimeout)
		return fmt.Sprintf("  plugin \"unix\" {\n    command = %s\n    config = { socket = %s }\n  }\n", hclString(unixPlugin(t)), hclString(sock))
	}},
	urlKind("http", []string{"-http"}, ""),
	urlKind("http-2026-07-28", []string{"-stateless", "-http"}, "  protocol_version = \"2026-07-28\"\n"),
	urlKind("sse", []string{"-sse"}, "  transport = \"sse\"\n"),
}

var unixPluginOnce struct {
	sync.Once
	path string
	err  error
}

// unixPlugin builds the unix transport plugin once per test binary.
func unixPlugin(t *testing.T) string {
	t.Helper()
	unixPluginOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mcpvisor-hardening-plugin-")
		if err != nil {
			unixPluginOnce.err = err
			return
		}
		unixPluginOnce.path = filepath.Join(dir, "mcpvisor-transport-unix")
		unixPluginOnce.err = testutil.GoBuild(unixPluginOnce.path, "./plugins/unix")
	})
	if unixPluginOnce.err != nil {
		t.Fatal(unixPluginOnce.err)
	}
	return unixPluginOnce.path
}

// serve starts the example server bin as u describes and an mcpvisor
// whose server block name reaches it, waits until mcpvisor lists the
// server's tool, and opens a raw session on mcpvisor.
func (u upstreamKind) serve(t *testing.T, bin, name, tool string) (*mcpvisor, *rawSession) {
	t.Helper()
	mv := startMcpvisor(t, fmt.Sprintf("server %q {\n%s}\n", name, u.block(t, bin)))
	waitTool(t, connectClient(t, mv), name+"__"+tool)
	return mv, openRawSession(t, mv)
}

// Regression (#13): every progress notification an upstream sends about a
// call — stdio, plugin, HTTP or legacy SSE — reaches the client on the
// call's own stream,
// in order, before the call's result — for clients on the session-based
// protocol and on 2026-07-28 alike. The go-sdk client hands a response
// to its caller as soon as it reads it but notifications to a handler
// goroutine, so without mcpvisor ordering them the last ones arrived after
// the result, where the downstream stream was already closed: dropped.
func TestProgressPrecedesResult(t *testing.T) {
	for _, up := range upstreamKinds {
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

// Regression (#13): log messages an upstream (stdio, plugin, HTTP or
// legacy SSE) sends while handling a call reach the client before the
// call's result.
func TestLogsPrecedeResult(t *testing.T) {
	for _, up := range upstreamKinds {
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
