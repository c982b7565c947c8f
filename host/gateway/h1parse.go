package gateway

import (
	"errors"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/mcpvisor/mcpvisor/host/internal/h1text"
)

// errHandoff reports a request head outside the strict subset the front
// frames itself (see the design note in h1.go): the connection goes to
// net/http, which decides what it is.
var errHandoff = errors.New("request left to net/http")

// frontRequest is one request head the front parsed.
type frontRequest struct {
	method, target string
	// fields are the header fields in order, names in canonical form.
	fields []headerField
	// accept are the values of the Accept fields, in order.
	accept []string
	// hosts counts the Host header lines.
	hosts int
	// contentLength is the body's length (0 without a Content-Length).
	contentLength int64
	// close is set by "Connection: close".
	close bool
}

type headerField struct{ key, value string }

// get returns the first value of the field named key (canonical), as
// http.Header's Get does, or "".
func (req *frontRequest) get(key string) string {
	for _, f := range req.fields {
		if f.key == key {
			return f.value
		}
	}
	return ""
}

// maxContentLengthDigits keeps Content-Length within int64.
const maxContentLengthDigits = 18

// parse parses an HTTP/1.1 request head — the request line and header
// lines, each ending in CRLF, and the empty line — into req, or returns
// errHandoff for anything outside the subset the front frames: another
// protocol version, bare LF or stray CR, obs-fold, a header name that is
// not a token, control characters in a value, Transfer-Encoding, Expect,
// Upgrade, or a Content-Length that is not one plain decimal number.
// Inside the subset the body is exactly Content-Length bytes (none
// without it), which is how net/http frames the same bytes;
// FuzzParseHead checks that. req's storage is reused (a connection's
// requests come one at a time, and nothing keeps a request's fields once
// it is answered).
func (req *frontRequest) parse(head []byte) error {
	text := string(head) // one copy; every field below is a substring
	line, rest, ok := cutLine(text)
	if !ok {
		return errHandoff
	}
	method, line, ok := strings.Cut(line, " ")
	if !ok || !h1text.IsToken(method) {
		return errHandoff
	}
	target, proto, ok := strings.Cut(line, " ")
	if !ok || len(target) == 0 || !h1text.IsVisible(target) || proto != "HTTP/1.1" {
		return errHandoff
	}
	clear(req.fields)
	clear(req.accept)
	*req = frontRequest{method: method, target: target, fields: req.fields[:0], accept: req.accept[:0]}
	seenLength := false
	for {
		if line, rest, ok = cutLine(rest); !ok {
			return errHandoff
		}
		if len(line) == 0 {
			break
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok || !h1text.IsToken(name) || !h1text.ValidValue(value) {
			return errHandoff
		}
		value = h1text.TrimOWS(value)
		key := textproto.CanonicalMIMEHeaderKey(name) // no copy when it is canonical
		req.fields = append(req.fields, headerField{key, value})
		switch key {
		case "Accept":
			req.accept = append(req.accept, value)
		case "Transfer-Encoding", "Expect", "Upgrade":
			return errHandoff
		case "Content-Length":
			if seenLength || len(value) == 0 || len(value) > maxContentLengthDigits || !h1text.AllDigits(value) {
				return errHandoff
			}
			seenLength = true
			req.contentLength, _ = strconv.ParseInt(value, 10, 64)
		case "Host":
			req.hosts++
		case "Connection":
			if h1text.HasToken(value, "close") {
				req.close = true
			}
			if h1text.HasToken(value, "upgrade") {
				return errHandoff
			}
		}
	}
	if len(rest) != 0 {
		return errHandoff // the caller passes exactly one head
	}
	return nil
}

// cutLine returns the line before the first CRLF of s and what follows.
// A line holding CR or LF anywhere else is refused.
func cutLine(s string) (line, rest string, ok bool) {
	i := strings.IndexByte(s, '\n')
	if i < 1 || s[i-1] != '\r' {
		return "", "", false
	}
	line = s[:i-1]
	if strings.IndexByte(line, '\r') >= 0 {
		return "", "", false
	}
	return line, s[i+1:], true
}
