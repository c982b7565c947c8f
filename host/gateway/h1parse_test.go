package gateway

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"slices"
	"testing"
)

// parseHead parses head into a new request.
func parseHead(head []byte) (*frontRequest, error) {
	req := &frontRequest{}
	if err := req.parse(head); err != nil {
		return nil, err
	}
	return req, nil
}

// headEnd returns the length of the head at the start of b (through the
// first empty line), or -1.
func headEnd(b []byte) int {
	if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 {
		return i + 4
	}
	return -1
}

// FuzzParseHead checks the property the front's safety rests on: whenever
// parseHead takes a request, net/http reading the same bytes either
// refuses it or frames it exactly the same way — same method, target and
// body length, the next request starting at the same byte. A disagreement
// would let a request be smuggled past one of them.
func FuzzParseHead(f *testing.F) {
	for _, s := range []string{
		"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}GET / HTTP/1.1\r\n\r\n",
		"GET /mcp HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
		"POST /mcp HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello",
		"POST /mcp HTTP/1.1\r\nHost: x\r\n Content-Length: 5\r\n\r\nhello",
		"POST /mcp HTTP/1.1\nHost: x\nContent-Length: 0\n\n",
		"POST /mcp HTTP/1.0\r\nHost: x\r\n\r\n",
		"POST /mcp HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, close\r\nContent-Length: 1\r\n\r\nx",
		"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nX: a\x00b\r\n\r\nx",
		"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:8811\r\nmcp-session-id: s1\r\nMcp-Session-Id: s2\r\naccept: application/json\r\nAccept:  text/event-stream \r\n" +
			"content-type: application/json\r\norigin: http://localhost\r\nAUTHORIZATION: Bearer t\r\nMcp-Protocol-Version: 2025-11-25\r\nContent-Length: 2\r\n\r\n{}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		n := headEnd(in)
		if n < 0 {
			return
		}
		req, err := parseHead(in[:n])
		checkReusedParse(t, in[:n], req, err)
		if err != nil {
			return
		}
		end := n + int(req.contentLength)
		if req.contentLength > int64(len(in)-n) {
			return // the body is not all there; nothing to compare
		}
		rd := bytes.NewReader(in)
		br := bufio.NewReader(rd)
		hr, err := http.ReadRequest(br)
		if err != nil {
			return // net/http refuses it: it answers 400 and closes
		}
		if _, err := io.Copy(io.Discard, hr.Body); err != nil {
			t.Fatalf("net/http could not read the body the front framed: %v", err)
		}
		consumed := len(in) - rd.Len() - br.Buffered()
		if consumed != end {
			t.Fatalf("framing differs: front ends the request at %d, net/http at %d\n%q", end, consumed, in)
		}
		if hr.Method != req.method || hr.RequestURI != req.target {
			t.Fatalf("request line differs: front %s %s, net/http %s %s", req.method, req.target, hr.Method, hr.RequestURI)
		}
		if hr.ContentLength != req.contentLength && !(hr.ContentLength == -1 && req.contentLength == 0) {
			t.Fatalf("Content-Length differs: front %d, net/http %d", req.contentLength, hr.ContentLength)
		}
		if len(hr.TransferEncoding) > 0 {
			t.Fatalf("net/http saw Transfer-Encoding %v in a head the front framed", hr.TransferEncoding)
		}
		if req.close != hr.Close {
			t.Fatalf("Connection: close differs: front %v, net/http %v", req.close, hr.Close)
		}
		// The fields the gateway reads must read the same.
		for _, k := range []string{"Mcp-Session-Id", "Mcp-Protocol-Version", "Origin", "Authorization", "Content-Type"} {
			if got, want := req.get(k), hr.Header.Get(k); got != want {
				t.Fatalf("%s differs: front %q, net/http %q", k, got, want)
			}
		}
		if !slices.Equal(req.accept, hr.Header.Values("Accept")) {
			t.Fatalf("Accept differs: front %q, net/http %q", req.accept, hr.Header.Values("Accept"))
		}
		if req.hosts == 1 && req.get("Host") != hr.Host {
			t.Fatalf("Host differs: front %q, net/http %q", req.get("Host"), hr.Host)
		}
	})
}

// checkReusedParse parses head again into a request that held another
// head before, as a connection's second request is: the result must be
// the fresh parse's, nothing of the earlier head left over.
func checkReusedParse(t *testing.T, head []byte, fresh *frontRequest, freshErr error) {
	t.Helper()
	var reused frontRequest
	if err := reused.parse([]byte("POST /other HTTP/1.1\r\nHost: a\r\nHost: b\r\nX-Many: 1\r\nX-Many: 2\r\nConnection: close\r\nContent-Length: 9\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	err := reused.parse(head)
	if (err == nil) != (freshErr == nil) {
		t.Fatalf("reused parse of %q: error %v, fresh parse %v", head, err, freshErr)
	}
	if err != nil {
		return
	}
	if reused.method != fresh.method || reused.target != fresh.target || reused.hosts != fresh.hosts ||
		reused.contentLength != fresh.contentLength || reused.close != fresh.close ||
		!slices.Equal(reused.fields, fresh.fields) || !slices.Equal(reused.accept, fresh.accept) {
		t.Fatalf("reused parse of %q differs from a fresh one:\n%+v\n%+v", head, reused, *fresh)
	}
}

func TestParseHeadRefuses(t *testing.T) {
	for name, head := range map[string]string{
		"HTTP/1.0":           "GET / HTTP/1.0\r\n\r\n",
		"bare LF":            "GET / HTTP/1.1\nHost: x\r\n\r\n",
		"stray CR":           "GET / HTTP/1.1\r\nHost: x\ry\r\n\r\n",
		"obs-fold":           "GET / HTTP/1.1\r\nHost: x\r\n y\r\n\r\n",
		"space before colon": "GET / HTTP/1.1\r\nHost : x\r\n\r\n",
		"chunked":            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
		"two lengths":        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
		"signed length":      "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +1\r\n\r\n",
		"list length":        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1, 1\r\n\r\n",
		"huge length":        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1234567890123456789\r\n\r\n",
		"expect":             "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n",
		"upgrade":            "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
		"NUL in value":       "GET / HTTP/1.1\r\nHost: x\x00\r\n\r\n",
		"space in target":    "GET /a b HTTP/1.1\r\nHost: x\r\n\r\n",
		"no empty line":      "GET / HTTP/1.1\r\nHost: x\r\n",
	} {
		if _, err := parseHead([]byte(head)); err != errHandoff {
			t.Errorf("%s: parseHead took %q (err %v); it must leave it to net/http", name, head, err)
		}
	}
	req, err := parseHead([]byte("POST /mcp HTTP/1.1\r\nhost:  127.0.0.1:8811 \r\nContent-Length: 12\r\nConnection: Keep-Alive, Close\r\nMcp-Session-Id: abc\r\n\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	if req.method != "POST" || req.target != "/mcp" || req.contentLength != 12 || !req.close || req.hosts != 1 ||
		req.get("Host") != "127.0.0.1:8811" || req.get("Mcp-Session-Id") != "abc" {
		t.Fatalf("parsed %+v", req)
	}
}
