package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/internal/gateway"
	"github.com/mcpvisor/mcpvisor/host/internal/wire"
)

// lineClient speaks raw JSON-RPC lines to a gateway served over pipes, as
// a stdio client of `run --stdio` does, so a test can send what no SDK
// client would.
type lineClient struct {
	t   *testing.T
	w   *os.File
	out *bufio.Reader
}

func serveLines(t *testing.T, e *env) *lineClient {
	t.Helper()
	upR, upW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	downR, downW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.gw.ServeTransport(ctx, wire.NewLineTransport(upR, downW)) }()
	t.Cleanup(func() {
		cancel()
		upW.Close()
		<-done
		downR.Close()
	})
	c := &lineClient{t: t, w: upW, out: bufio.NewReader(downR)}
	c.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"lines","version":"1"}}}`)
	c.answer(0)
	c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return c
}

func (c *lineClient) send(line string) {
	c.t.Helper()
	if _, err := c.w.WriteString(line + "\n"); err != nil {
		c.t.Fatal(err)
	}
}

// answer reads lines until the response to id, skipping notifications.
func (c *lineClient) answer(id int) map[string]json.RawMessage {
	c.t.Helper()
	got := make(chan map[string]json.RawMessage, 1)
	go func() {
		for {
			line, err := c.out.ReadString('\n')
			if err != nil {
				close(got)
				return
			}
			var m map[string]json.RawMessage
			if json.Unmarshal([]byte(line), &m) == nil && string(m["id"]) == fmt.Sprint(id) {
				got <- m
				return
			}
		}
	}()
	select {
	case m, ok := <-got:
		if !ok {
			c.t.Fatalf("connection ended before the answer to %d", id)
		}
		return m
	case <-time.After(30 * time.Second):
		c.t.Fatalf("no answer to request %d", id)
		return nil
	}
}

// A tools/call whose params name the tool twice, or in another case, or
// nest deeper than the go-sdk allows, is not forwarded as bytes: an
// upstream that matches JSON keys case-insensitively (the test backend
// decodes with encoding/json, which does) would otherwise read a name the
// registry never routed. The SDK path answers such calls instead, with the
// one name it decoded, or refuses them.
func TestForwardRefusesAmbiguousAndDeepParams(t *testing.T) {
	e := newEnv(t, gateway.Options{})
	c := serveLines(t, e)

	before := e.gw.Forwarded()
	c.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"alpha__echo_args","arguments":{"a":1}}}`)
	if m := c.answer(1); m["result"] == nil || e.gw.Forwarded() != before+1 {
		t.Fatalf("plain call: %s, forwarded %d", m["error"], e.gw.Forwarded()-before)
	}

	for i, params := range []string{
		`{"name":"alpha__echo_args","NAME":"alpha__fail","arguments":{}}`,
		`{"NAME":"alpha__fail","name":"alpha__echo_args","arguments":{}}`,
		`{"name":"alpha__fail","name":"alpha__echo_args","arguments":{}}`,
		`{"name":"alpha__echo_args","_meta":{},"_META":{"progressToken":1},"arguments":{}}`,
	} {
		id := 10 + i
		before := e.gw.Forwarded()
		c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":%s}`, id, params))
		m := c.answer(id)
		if e.gw.Forwarded() != before {
			t.Errorf("%s: forwarded as bytes", params)
		}
		// Whatever the SDK decided, the tool that ran is the one the
		// last exact "name" key names, and never the one behind "NAME".
		if strings.Contains(string(m["result"]), "Tool failed") {
			t.Errorf("%s: the hidden tool ran: %s", params, m["result"])
		}
	}

	deep := strings.Repeat(`{"a":`, 1500) + "1" + strings.Repeat("}", 1500)
	before = e.gw.Forwarded()
	e.rec["alpha"].mu.Lock()
	calls := len(e.rec["alpha"].toolNames)
	e.rec["alpha"].mu.Unlock()
	c.send(`{"jsonrpc":"2.0","id":20,"method":"tools/call","params":{"name":"alpha__echo_args","arguments":` + deep + `}}`)
	if m := c.answer(20); m["error"] == nil {
		t.Errorf("a call nested 1,500 deep was not refused: %.200s", m["result"])
	}
	e.rec["alpha"].mu.Lock()
	defer e.rec["alpha"].mu.Unlock()
	if e.gw.Forwarded() != before || len(e.rec["alpha"].toolNames) != calls {
		t.Error("a call nested 1,500 deep reached the upstream")
	}
}

// resources/read and prompts/get are forwarded as bytes on stdio too: the
// prompt reaches its server under its original name, the resource by its
// URI, and the answers are the upstream's results.
func TestForwardReadsAndPrompts(t *testing.T) {
	e := newEnv(t, gateway.Options{})
	c := serveLines(t, e)

	before := e.gw.Forwarded()
	c.send(`{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"alpha__greet","arguments":{"who":"<you>"}}}`)
	m := c.answer(1)
	if !strings.Contains(string(m["result"]), `"hello <you>"`) {
		t.Fatalf("prompts/get: %s %s", m["result"], m["error"])
	}
	c.send(`{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"mem://alpha/notes/7"}}`)
	if m := c.answer(2); !strings.Contains(string(m["result"]), `"note mem://alpha/notes/7"`) {
		t.Fatalf("resources/read: %s %s", m["result"], m["error"])
	}
	if n := e.gw.Forwarded() - before; n != 2 {
		t.Errorf("%d of 2 requests forwarded as bytes", n)
	}
	e.rec["alpha"].mu.Lock()
	defer e.rec["alpha"].mu.Unlock()
	if got := e.rec["alpha"].promptNames; len(got) != 1 || got[0] != "greet" {
		t.Errorf("the upstream got prompts %q, want [greet]", got)
	}
}
