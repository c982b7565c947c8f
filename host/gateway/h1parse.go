package gateway

import (
	"bytes"
	"errors"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
)

// errHandoff reports a request head outside the strict subset the front
// frames itself (see the design note in h1.go): the connection goes to
// net/http, which decides what it is.
var errHandoff = errors.New("request left to net/http")

// frontRequest is one request head the front parsed.
type frontRequest struct {
	method, target string
	header         http.Header
	// hosts counts the Host header lines.
	hosts int
	// contentLength is the body's length (0 without a Content-Length).
	contentLength int64
	// close is set by "Connection: close".
	close bool
}

// maxContentLengthDigits keeps Content-Length within int64.
const maxContentLengthDigits = 18

// parseHead parses an HTTP/1.1 request head — the request line and header
// lines, each ending in CRLF, and the empty line — or returns errHandoff
// for anything outside the subset the front frames: another protocol
// version, bare LF or stray CR, obs-fold, a header name that is not a
// token, control characters in a value, Transfer-Encoding, Expect,
// Upgrade, or a Content-Length that is not one plain decimal number. Inside
// the subset the body is exactly Content-Length bytes (none without it),
// which is how net/http frames the same bytes; FuzzParseHead checks that.
func parseHead(head []byte) (*frontRequest, error) {
	line, rest, ok := cutLine(head)
	if !ok {
		return nil, errHandoff
	}
	method, line, ok := bytes.Cut(line, []byte{' '})
	if !ok || len(method) == 0 || !isToken(method) {
		return nil, errHandoff
	}
	target, proto, ok := bytes.Cut(line, []byte{' '})
	if !ok || len(target) == 0 || !isVisible(target) || string(proto) != "HTTP/1.1" {
		return nil, errHandoff
	}
	req := &frontRequest{method: string(method), target: string(target), header: make(http.Header, 8)}
	seenLength := false
	for {
		if line, rest, ok = cutLine(rest); !ok {
			return nil, errHandoff
		}
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte{':'})
		if !ok || len(name) == 0 || !isToken(name) || !validValue(value) {
			return nil, errHandoff
		}
		value = trimOWS(value)
		key := textproto.CanonicalMIMEHeaderKey(string(name))
		switch key {
		case "Transfer-Encoding", "Expect", "Upgrade":
			return nil, errHandoff
		case "Content-Length":
			if seenLength || len(value) == 0 || len(value) > maxContentLengthDigits || !allDigits(value) {
				return nil, errHandoff
			}
			seenLength = true
			req.contentLength, _ = strconv.ParseInt(string(value), 10, 64)
		case "Host":
			req.hosts++
		case "Connection":
			if hasToken(value, "close") {
				req.close = true
			}
			if hasToken(value, "upgrade") {
				return nil, errHandoff
			}
		}
		req.header[key] = append(req.header[key], string(value))
	}
	if len(rest) != 0 {
		return nil, errHandoff // the caller passes exactly one head
	}
	return req, nil
}

// cutLine returns the line before the first CRLF of b and what follows.
// A line holding CR or LF anywhere else is refused.
func cutLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 1 || b[i-1] != '\r' {
		return nil, nil, false
	}
	line = b[:i-1]
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, nil, false
	}
	return line, b[i+1:], true
}

// isToken reports whether b is an RFC 9110 token.
func isToken(b []byte) bool {
	for _, c := range b {
		if !isTchar(c) {
			return false
		}
	}
	return true
}

func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// isVisible reports whether b is printable ASCII without spaces.
func isVisible(b []byte) bool {
	for _, c := range b {
		if c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// validValue refuses control characters other than horizontal tab, as
// net/http does; a value may not start with folded whitespace either, but
// cutLine already refused line breaks.
func validValue(b []byte) bool {
	for _, c := range b {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func trimOWS(b []byte) []byte {
	return bytes.Trim(b, " \t")
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// hasToken reports whether the comma-separated list v holds token,
// case-insensitively.
func hasToken(v []byte, token string) bool {
	for part := range bytes.SplitSeq(v, []byte{','}) {
		if bytes.EqualFold(trimOWS(part), []byte(token)) {
			return true
		}
	}
	return false
}
