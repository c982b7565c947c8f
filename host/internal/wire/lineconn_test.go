package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// DecodeMessage must agree with the SDK's own decoder on every input the
// SDK accepts, so swapping the transport changes nothing but the cost.
func FuzzDecodeMessage(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":"mcpvisor-fast-1","result":{"content":[]}}`,
		`{"jsonrpc":"2.0","id":7,"error":{"code":-32042,"message":"custom","data":{"a":1}}}`,
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}`,
		`{"jsonrpc":"2.0","method":""}`,
		`{"jsonrpc":"1.0","id":1,"result":{}}`,
		`{"jsonrpc":"2.0","result":{}}`,
		`{"jsonrpc":"2.0","id":[1],"result":{}}`,
		`{"jsonrpc":"2.0","id":-0,"result":{}}`,
		`{"jsonrpc":"2.0","id":-123456789012345,"result":{}}`,
		`{"jsonrpc":"2.0","id":1234567890123456789,"result":{}}`,
		`{"jsonrpc":"2.0","id":1.5,"result":{}}`,
		`{"jsonrpc":"2.0","id":1e3,"result":{}}`,
		`{"jsonrpc":"2.0","id":"a\u0041\"<","result":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want, werr := jsonrpc.DecodeMessage(data)
		got, gerr := DecodeMessage(data)
		if werr != nil {
			return // the SDK rejects it; we may be more lenient, never stricter
		}
		if gerr != nil {
			t.Fatalf("SDK accepts %q, DecodeMessage says %v", data, gerr)
		}
		wb, _ := jsonrpc.EncodeMessage(want)
		gb, _ := jsonrpc.EncodeMessage(got)
		if !bytes.Equal(compact(t, wb), compact(t, gb)) {
			t.Fatalf("decoded differently:\n sdk  %s\n ours %s", wb, gb)
		}
		if reflect.TypeOf(want) != reflect.TypeOf(got) {
			t.Fatalf("message type %T, SDK %T", got, want)
		}
	})
}

func FuzzAppendID(f *testing.F) {
	f.Add(int64(7), "mcpvisor-rq-1")
	f.Add(int64(-1<<63), "<&>\u2028\"\x00\xff")
	f.Fuzz(func(t *testing.T, n int64, s string) {
		for _, v := range []any{float64(n), s, nil} {
			id, err := jsonrpc.MakeID(v)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := json.Marshal(id.Raw())
			if got := AppendID([]byte("x"), id); string(got) != "x"+string(want) {
				t.Fatalf("AppendID(%#v) = %s, json.Marshal %s", id.Raw(), got[1:], want)
			}
		}
	})
}

func compact(t *testing.T, b []byte) []byte {
	var out bytes.Buffer
	if err := jsonCompact(&out, b); err != nil {
		return b
	}
	return out.Bytes()
}

func TestLineConnReadsBatchesLongLinesAndStopsOnClose(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	_, sink, _ := os.Pipe()
	conn, _ := (&lineTransport{r: r, w: sink}).Connect(context.Background())
	long := `{"jsonrpc":"2.0","id":3,"result":{"text":"` + strings.Repeat("x", 200<<10) + `"}}`
	go func() {
		io.WriteString(w, "\n"+`[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","method":"notifications/message","params":{}}]`+"\n")
		io.WriteString(w, long+"\n")
	}()
	ctx := context.Background()
	for i, wantResponse := range []bool{true, false, true} {
		msg, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if _, isResponse := msg.(*jsonrpc.Response); isResponse != wantResponse {
			t.Fatalf("message %d is %T", i, msg)
		}
	}
	done := make(chan error, 1)
	go func() { _, err := conn.Read(ctx); done <- err }()
	conn.Close()
	if err := <-done; err == nil {
		t.Fatal("Read returned no error after Close")
	}
	w.Close()
}

func jsonCompact(dst *bytes.Buffer, src []byte) error { return json.Compact(dst, src) }

// A client's line that cannot be decoded is answered with a parse error
// and skipped; the next message is read as usual.
func TestClientLineConnAnswersUndecodableLines(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	conn, _ := NewClientLineTransport(r, outW).Connect(context.Background())
	defer conn.Close()
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	go func() {
		io.WriteString(w, "not json\n")
		io.WriteString(w, `{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":`+deep+"}}\n")
		io.WriteString(w, `{"jsonrpc":"2.0","id":2,"method":"ping"}`+"\n")
	}()
	msg, err := conn.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if req, ok := msg.(*jsonrpc.Request); !ok || req.Method != "ping" {
		t.Fatalf("read %#v, want the ping after the bad lines", msg)
	}
	buf := make([]byte, 4096)
	var got strings.Builder
	for strings.Count(got.String(), "\n") < 2 {
		n, err := outR.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got.Write(buf[:n])
	}
	for i, line := range strings.Split(strings.TrimSpace(got.String()), "\n") {
		if !strings.HasPrefix(line, `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: `) || !json.Valid([]byte(line)) {
			t.Errorf("answer %d: %s", i, line)
		}
	}
	w.Close()
}
