package wire

// A response line over the connection's limit is not read into memory
// whole: its first bytes are kept, the rest is skipped up to the newline,
// keeping its last bytes. When those show the line is a response (it has a
// top-level "result" or "error" key) and which request it answers (its
// "id", in the first bytes as the go-sdk and Python SDKs write it, or in
// the last as the TypeScript SDK does), the connection hands that request
// an error instead of the result, and goes on: one oversized result fails
// its own call, not the session. Anything else over the limit — a request
// or notification from the server, a line whose id cannot be found — ends
// the connection as before.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// oversizedKeep is how much of an oversized line's start and end is kept to
// find its id.
const oversizedKeep = 4 << 10

// errLineTooLong is readLine's error for a line over the limit, read to
// its end.
type errLineTooLong struct {
	limit      int64
	head, tail []byte
}

func (e *errLineTooLong) Error() string {
	return fmt.Sprintf("message longer than %d bytes", e.limit)
}

// skipLine reads the rest of a line over the limit, whose first bytes are
// head, keeping only its last oversizedKeep bytes.
func (c *lineConn) skipLine(head []byte) error {
	e := &errLineTooLong{limit: c.maxLine, head: bytes.Clone(head[:min(len(head), oversizedKeep)])}
	tail := bytes.Clone(head[max(0, len(head)-oversizedKeep):])
	for {
		chunk, err := c.r.ReadSlice('\n')
		tail = append(tail, chunk...)
		if len(tail) > 2*oversizedKeep {
			tail = append(tail[:0], tail[len(tail)-oversizedKeep:]...)
		}
		switch {
		case err == nil, errors.Is(err, io.EOF):
			e.tail = tail
			return e
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return err
		}
	}
}

// oversizedResponse returns the response a line over the limit was, with
// its result replaced by the error tooLarge makes, or false when the line
// is not a response whose id could be found.
func oversizedResponse(e *errLineTooLong, tooLarge func(limit int64) error) (*jsonrpc.Response, bool) {
	id, ok := OversizedResponseID(e.head, e.tail)
	if !ok {
		return nil, false
	}
	return refusedResponse(id, tooLarge(e.limit))
}

// OversizedFrame returns the response a message over the limit was, with
// its result replaced by err, or false when the message is not a response
// (a request or notification), or not JSON-RPC at all. Only its first and
// last few kB are looked at.
func OversizedFrame(frame []byte, err error) (*jsonrpc.Response, bool) {
	id, ok := OversizedResponseID(frame[:min(len(frame), oversizedKeep)], frame[max(0, len(frame)-oversizedKeep):])
	if !ok {
		return nil, false
	}
	return refusedResponse(id, err)
}

// refusedResponse is a response to id failing with err.
func refusedResponse(id json.RawMessage, err error) (*jsonrpc.Response, bool) {
	msg, derr := DecodeMessage([]byte(`{"jsonrpc":"2.0","id":` + string(id) + `,"result":{}}`))
	if derr != nil {
		return nil, false
	}
	resp, ok := msg.(*jsonrpc.Response)
	if !ok {
		return nil, false
	}
	resp.Result = nil
	resp.Error = err
	return resp, true
}

// OversizedResponseID returns the id of a JSON-RPC response too large to
// read whole from its first and last bytes (a few kB of each), or false
// when they do not show it is a response or which id it has.
func OversizedResponseID(head, tail []byte) (json.RawMessage, bool) {
	isResponse, id := scanHead(head)
	if !isResponse {
		return nil, false
	}
	if id == nil {
		id = scanTail(tail)
	}
	return id, id != nil
}

// scanHead reads the top-level keys at the start of a message: whether one
// is "result" or "error" (and none "method"), and the id if it comes before
// the value that did not fit.
func scanHead(head []byte) (isResponse bool, id json.RawMessage) {
	dec := json.NewDecoder(bytes.NewReader(head))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false, nil
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		key, _ := tok.(string)
		switch key {
		case "method":
			return false, nil
		case "result", "error":
			isResponse = true
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			break // the value that did not fit
		}
		if key == "id" {
			id = v
		}
	}
	return isResponse, id
}

// scanTail finds the top-level id at the end of a message that ends
// `…,"id":7}`: the last "id" key outside a string, followed by a number or
// string and the closing brace.
func scanTail(tail []byte) json.RawMessage {
	t := bytes.TrimRight(tail, " \t\r\n")
	if !bytes.HasSuffix(t, []byte("}")) {
		return nil
	}
	t = bytes.TrimRight(t[:len(t)-1], " \t\r\n")
	// The value: a number, or a string without escapes.
	var start int
	if bytes.HasSuffix(t, []byte(`"`)) {
		i := bytes.LastIndexByte(t[:len(t)-1], '"')
		if i < 0 || bytes.IndexByte(t[i:], '\\') >= 0 {
			return nil
		}
		start = i
	} else {
		start = bytes.LastIndexAny(t, ":, \t\r\n") + 1
	}
	value := t[start:]
	rest := bytes.TrimRight(t[:start], " \t\r\n")
	if !bytes.HasSuffix(rest, []byte(":")) {
		return nil
	}
	rest = bytes.TrimRight(rest[:len(rest)-1], " \t\r\n")
	if !bytes.HasSuffix(rest, []byte(`"id"`)) {
		return nil
	}
	// The key must start a member, not end a string: `,"id"` or `{"id"`.
	before := bytes.TrimRight(rest[:len(rest)-4], " \t\r\n")
	if !bytes.HasSuffix(before, []byte(",")) && !bytes.HasSuffix(before, []byte("{")) {
		return nil
	}
	var v any
	if json.Unmarshal(value, &v) != nil {
		return nil
	}
	switch v.(type) {
	case float64, string:
		return bytes.Clone(value)
	}
	return nil
}
