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
	"strings"

	"github.com/mcpvisor/mcpvisor/host/internal/h1text"
)

// maxFastResponseHead bounds the response heads readResponse parses
// itself; a longer one is net/http's.
const maxFastResponseHead = 8 << 10

// readResponse reads one response from br. The plain responses upstreams
// send — HTTP/1.1, a status with a body framed by one Content-Length or by
// chunked encoding, simple header lines — are parsed here, without
// textproto's general machinery; anything else, and anything this parser
// is unsure of, is left untouched in br for http.ReadResponse. The two
// agree on every response this one takes (FuzzReadResponse). A non-nil hb
// is reused for the header (a connection's responses come one at a time,
// and nothing keeps one's header once the next is read); nil: a new one.
func readResponse(br *bufio.Reader, hb *h1text.Header) (*http.Response, error) {
	if resp := readSimpleResponse(br, hb); resp != nil {
		return resp, nil
	}
	return http.ReadResponse(br, nil)
}

func readSimpleResponse(br *bufio.Reader, hb *h1text.Header) *http.Response {
	if _, err := br.Peek(1); err != nil {
		return nil // net/http reports it
	}
	buf, _ := br.Peek(min(br.Buffered(), maxFastResponseHead))
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 {
		return nil
	}
	text := string(buf[:end+2]) // each line with its CRLF; fields are substrings
	line, rest, _ := strings.Cut(text, "\r\n")
	// "HTTP/1.1 200 OK": the reason phrase is optional.
	if len(line) < 12 || line[:9] != "HTTP/1.1 " || (len(line) > 12 && line[12] != ' ') {
		return nil
	}
	status := line[9:]
	code := 0
	for _, c := range []byte(line[9:12]) {
		if c < '0' || c > '9' {
			return nil
		}
		code = code*10 + int(c-'0')
	}
	if code < 200 || code == http.StatusNoContent || code == http.StatusNotModified || code > 599 {
		return nil // informational and bodiless answers: net/http's
	}
	if !h1text.ValidValue(line[min(len(line), 13):]) {
		return nil
	}
	if hb == nil || hb.H == nil {
		fresh := h1text.NewHeader(strings.Count(rest, "\n"))
		if hb == nil {
			hb = &fresh
		} else {
			*hb = fresh
		}
	} else {
		hb.Reset()
	}
	h := hb.H
	length, chunked, closing := int64(-1), false, false
	for len(rest) > 0 {
		line, rest, _ = strings.Cut(rest, "\r\n")
		name, value, ok := strings.Cut(line, ":")
		if !ok || !h1text.IsToken(name) || !h1text.ASCIIValue(value) {
			return nil
		}
		value = h1text.TrimOWS(value)
		switch hb.Add(name, value) {
		case "Content-Length":
			if length >= 0 || len(value) == 0 || len(value) > 18 || !h1text.AllDigits(value) {
				return nil
			}
			length, _ = strconv.ParseInt(value, 10, 64)
		case "Transfer-Encoding":
			if chunked || value != "chunked" {
				return nil
			}
			chunked = true
		case "Connection":
			if !strings.EqualFold(value, "keep-alive") {
				if !strings.EqualFold(value, "close") {
					return nil
				}
				closing = true
			}
		case "Trailer":
			return nil
		}
	}
	if chunked == (length >= 0) {
		return nil // neither (read to close) or both: net/http's
	}
	br.Discard(end + 4)
	resp := &http.Response{
		Status:        status,
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
