package transport

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strconv"
)

// maxFastResponseHead bounds the response heads readResponse parses
// itself; a longer one is net/http's.
const maxFastResponseHead = 8 << 10

// readResponse reads one response from br. The plain responses upstreams
// send — HTTP/1.1, a status with a body framed by one Content-Length or by
// chunked encoding, simple header lines — are parsed here, without
// textproto's general machinery; anything else, and anything this parser
// is unsure of, is left untouched in br for http.ReadResponse. The two
// agree on every response this one takes (FuzzReadResponse).
func readResponse(br *bufio.Reader) (*http.Response, error) {
	if resp := readSimpleResponse(br); resp != nil {
		return resp, nil
	}
	return http.ReadResponse(br, nil)
}

func readSimpleResponse(br *bufio.Reader) *http.Response {
	if _, err := br.Peek(1); err != nil {
		return nil // net/http reports it
	}
	buf, _ := br.Peek(min(br.Buffered(), maxFastResponseHead))
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 {
		return nil
	}
	head := buf[:end+2] // each line with its CRLF
	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	status := line[min(len(line), 9):]
	// "HTTP/1.1 200 OK": the reason phrase is optional.
	if len(line) < 12 || string(line[:9]) != "HTTP/1.1 " || (len(line) > 12 && line[12] != ' ') {
		return nil
	}
	code := 0
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return nil
		}
		code = code*10 + int(c-'0')
	}
	if code < 200 || code == http.StatusNoContent || code == http.StatusNotModified || code > 599 {
		return nil // informational and bodiless answers: net/http's
	}
	if !validReason(line[min(len(line), 13):]) {
		return nil
	}
	h := make(http.Header, 8)
	length, chunked, closing := int64(-1), false, false
	for len(rest) > 0 {
		line, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || len(name) == 0 || !isToken(name) || !validFieldValue(value) {
			return nil
		}
		value = bytes.Trim(value, " \t")
		key := textproto.CanonicalMIMEHeaderKey(string(name))
		switch key {
		case "Content-Length":
			if length >= 0 || len(value) == 0 || len(value) > 18 || !allDigits(value) {
				return nil
			}
			length, _ = strconv.ParseInt(string(value), 10, 64)
		case "Transfer-Encoding":
			if chunked || string(value) != "chunked" {
				return nil
			}
			chunked = true
		case "Connection":
			if !bytes.EqualFold(value, []byte("keep-alive")) {
				if !bytes.EqualFold(value, []byte("close")) {
					return nil
				}
				closing = true
			}
		case "Trailer":
			return nil
		}
		h[key] = append(h[key], string(value))
	}
	if chunked == (length >= 0) {
		return nil // neither (read to close) or both: net/http's
	}
	br.Discard(end + 4)
	resp := &http.Response{
		Status:        string(status),
		StatusCode:    code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		ContentLength: length,
		Close:         closing,
	}
	if closing {
		delete(h, "Connection") // as net/http does
	}
	if chunked {
		delete(h, "Transfer-Encoding")
		resp.TransferEncoding = []string{"chunked"}
		resp.Body = &chunkedBody{br: br, r: httputil.NewChunkedReader(br)}
	} else if length == 0 {
		resp.Body = http.NoBody
	} else {
		resp.Body = &lengthBody{r: io.LimitedReader{R: br, N: length}}
	}
	return resp
}

// validReason: visible characters, spaces and tabs.
func validReason(b []byte) bool {
	for _, c := range b {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// validFieldValue refuses control characters (but tab) and non-ASCII
// bytes, which net/http would handle in its own ways.
func validFieldValue(b []byte) bool {
	for _, c := range b {
		if (c < ' ' && c != '\t') || c >= 0x7f {
			return false
		}
	}
	return true
}

func isToken(b []byte) bool {
	for _, c := range b {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0:
		default:
			return false
		}
	}
	return true
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// lengthBody is a body of a known length.
type lengthBody struct{ r io.LimitedReader }

func (b *lengthBody) Read(p []byte) (int, error) {
	if b.r.N <= 0 {
		return 0, io.EOF
	}
	n, err := b.r.Read(p)
	if err == io.EOF && b.r.N > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *lengthBody) Close() error { return nil }

// chunkedBody is a chunked body; at its end it also reads the (empty or
// ignored) trailer, so the connection is ready for the next response.
type chunkedBody struct {
	br  *bufio.Reader
	r   io.Reader
	err error
}

func (b *chunkedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.r.Read(p)
	if err == io.EOF {
		err = b.readTrailer()
	}
	if err != nil {
		b.err = err
	}
	return n, err
}

// readTrailer reads what follows the last chunk as net/http does: an
// empty trailer, or header lines (ignored) ending in a blank line that
// must already be in sight.
func (b *chunkedBody) readTrailer() error {
	buf, err := b.br.Peek(2)
	switch {
	case string(buf) == "\r\n":
		b.br.Discard(2)
		return io.EOF
	case len(buf) < 2:
		return io.ErrUnexpectedEOF
	case err != nil:
		return err
	}
	for n := 4; ; n++ {
		buf, err := b.br.Peek(n)
		if bytes.HasSuffix(buf, []byte("\r\n\r\n")) {
			break
		}
		if err != nil {
			return errors.New("trailer too long or cut off")
		}
	}
	if _, err := textproto.NewReader(b.br).ReadMIMEHeader(); err != nil {
		if errors.Is(err, io.EOF) {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	return io.EOF
}

func (b *chunkedBody) Close() error { return nil }
