package transport

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/host/internal/h1text"
)

// FuzzReadResponse checks that whenever readSimpleResponse takes a
// response, http.ReadResponse reads the same one: status, headers,
// framing, body, and where the next response starts.
func FuzzReadResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nCache-Control: no-cache, no-transform\r\nConnection: keep-alive\r\nContent-Type: text/event-stream\r\nDate: Thu, 26 Nov 2026 02:54:08 GMT\r\nTransfer-Encoding: chunked\r\n\r\n5a\r\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"mcpvisor-fast-1\",\"result\":{\"content\":[]}}\r\n\r\n\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n",
		"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}next",
		"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
		"HTTP/1.1 202\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\nrest",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab",
		"HTTP/1.1 200 OK\r\nX-A: 1\r\nx-a:  2 \t\r\nContent-Length: 1\r\n\r\n!",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n!",
		"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n!",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(data), 16<<10)
		got := readSimpleResponse(br, nil)
		if got == nil {
			return
		}
		// A connection's header storage, used before by another response,
		// must read this one the same.
		var hb h1text.Header
		readSimpleResponse(bufio.NewReader(strings.NewReader("HTTP/1.1 200 OK\r\nX-A: 1\r\nX-A: 2\r\nContent-Type: x\r\nContent-Length: 0\r\n\r\n")), &hb)
		if again := readSimpleResponse(bufio.NewReaderSize(bytes.NewReader(data), 16<<10), &hb); again == nil || !reflect.DeepEqual(again.Header, got.Header) {
			t.Fatalf("read with reused storage: %v, fresh: %q", again, got.Header)
		}
		wbr := bufio.NewReaderSize(bytes.NewReader(data), 16<<10)
		want, err := http.ReadResponse(wbr, nil)
		if err != nil {
			t.Fatalf("taken, but net/http refuses it: %v", err)
		}
		if got.Status != want.Status || got.StatusCode != want.StatusCode || got.Proto != want.Proto ||
			got.ContentLength != want.ContentLength || got.Close != want.Close ||
			!reflect.DeepEqual(got.TransferEncoding, want.TransferEncoding) || !reflect.DeepEqual(got.Header, want.Header) {
			t.Fatalf("read differently:\n ours %q %d %q cl=%d close=%v te=%q %q\n http %q %d %q cl=%d close=%v te=%q %q",
				got.Status, got.StatusCode, got.Proto, got.ContentLength, got.Close, got.TransferEncoding, got.Header,
				want.Status, want.StatusCode, want.Proto, want.ContentLength, want.Close, want.TransferEncoding, want.Header)
		}
		gb, gerr := io.ReadAll(got.Body)
		wb, werr := io.ReadAll(want.Body)
		if !bytes.Equal(gb, wb) || (gerr == nil) != (werr == nil) {
			t.Fatalf("bodies differ: ours %q (%v), net/http %q (%v)", gb, gerr, wb, werr)
		}
		if gerr != nil {
			return // the connection is not reused after a broken body
		}
		grest, _ := io.ReadAll(br)
		wrest, _ := io.ReadAll(wbr)
		if !bytes.Equal(grest, wrest) {
			t.Fatalf("the next response starts at %q; net/http: %q", grest, wrest)
		}
	})
}

func TestReadResponseFallsBack(t *testing.T) {
	for _, s := range []string{
		"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n!",
		"HTTP/1.1 200 OK\r\n\r\nto the end",
		"HTTP/1.1 100 Continue\r\n\r\n",
		"HTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: caf\xc3\xa9\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nConnection: upgrade\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n", // head not all here
	} {
		if readSimpleResponse(bufio.NewReader(bytes.NewReader([]byte(s))), nil) != nil {
			t.Errorf("took %q; it is net/http's", s)
		}
	}
	// And what it leaves is read by net/http as before.
	br := bufio.NewReader(bytes.NewReader([]byte("HTTP/1.1 200 OK\r\n\r\nto the end")))
	resp, err := readResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "to the end" {
		t.Fatalf("body %q", b)
	}
}
