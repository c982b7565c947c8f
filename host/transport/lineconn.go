package transport

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/rawjson"
)

// maxLineLength bounds one JSON-RPC message from a server (the SDK's
// default, 16 MiB); a longer line ends the connection.
const maxLineLength = mcp.DefaultMaxLineLength

// lineTransport speaks newline-delimited JSON-RPC over a server process's
// pipes. It replaces the SDK's IOTransport on mcpvisor's own pipes because
// that one decodes every line with a decoder that allocates tens of
// kilobytes and hands each line to Read through a goroutine of its own; on
// the per-call path both cost more than the proxying. The pipes come from
// os.Pipe, so closing them unblocks a pending Read.
type lineTransport struct {
	r io.ReadCloser
	w io.WriteCloser
}

func (t *lineTransport) Connect(context.Context) (mcp.Connection, error) {
	r, w := rawIO(t.r).(io.ReadCloser), rawIO(t.w).(io.WriteCloser) // rawfile_unix.go
	return &lineConn{r: bufio.NewReaderSize(r, 64<<10), rc: r, w: w}, nil
}

type lineConn struct {
	r     *bufio.Reader
	rc    io.Closer
	queue []jsonrpc.Message // the rest of a batch

	wmu sync.Mutex
	w   io.WriteCloser

	closeOnce sync.Once
	closeErr  error
}

func (c *lineConn) SessionID() string { return "" }

func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for len(c.queue) == 0 {
		line, err := c.readLine()
		if err != nil {
			return nil, err
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if line[0] == '[' {
			var batch []json.RawMessage
			if err := json.Unmarshal(line, &batch); err != nil {
				return nil, fmt.Errorf("unmarshaling jsonrpc batch: %w", err)
			}
			for _, raw := range batch {
				msg, err := DecodeMessage(raw)
				if err != nil {
					return nil, err
				}
				c.queue = append(c.queue, msg)
			}
			continue
		}
		return DecodeMessage(line)
	}
	msg := c.queue[0]
	c.queue = c.queue[1:]
	return msg, nil
}

// readLine returns the next line without its newline, up to maxLineLength.
func (c *lineConn) readLine() ([]byte, error) {
	line, err := c.r.ReadSlice('\n')
	if err == nil {
		return line, nil
	}
	if !errors.Is(err, bufio.ErrBufferFull) {
		if len(line) > 0 && errors.Is(err, io.EOF) {
			return line, nil
		}
		return nil, err
	}
	buf := append([]byte(nil), line...)
	for {
		line, err = c.r.ReadSlice('\n')
		buf = append(buf, line...)
		if len(buf) > maxLineLength {
			return nil, fmt.Errorf("message longer than %d bytes", maxLineLength)
		}
		switch {
		case err == nil:
			return buf, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(buf) > 0:
			return buf, nil
		default:
			return nil, err
		}
	}
}

func (c *lineConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	data = append(data, '\n')
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err = c.w.Write(data)
	return err
}

// WriteRawResult writes a response with a result that is already encoded
// JSON (one the connection's Read produced, or json.Marshal did), as it is:
// no re-encoding, so the client gets the upstream's exact bytes.
func (c *lineConn) WriteRawResult(id jsonrpc.ID, result json.RawMessage) error {
	buf := append(RawResponse(id, result), '\n')
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.w.Write(buf)
	return err
}

// RawResponse encodes a response around a result that is already encoded
// JSON (valid, as a decoded message's result is).
func RawResponse(id jsonrpc.ID, result json.RawMessage) []byte {
	buf := make([]byte, 0, len(result)+64)
	buf = append(buf, `{"jsonrpc":"2.0","id":`...)
	buf = AppendID(buf, id)
	buf = append(buf, `,"result":`...)
	buf = append(buf, result...)
	return append(buf, '}')
}

// AppendID appends id as JSON, as json.Marshal(id.Raw()) encodes it.
func AppendID(buf []byte, id jsonrpc.ID) []byte {
	switch v := id.Raw().(type) {
	case int64:
		return strconv.AppendInt(buf, v, 10)
	case string:
		return append(buf, rawjson.Quote(v)...)
	}
	b, _ := json.Marshal(id.Raw())
	return append(buf, b...)
}

// WriteRawRequest writes a request whose params are already encoded JSON,
// as they are.
func (c *lineConn) WriteRawRequest(id, method string, params json.RawMessage) error {
	buf := append(RawRequest(id, method, params), '\n')
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.w.Write(buf)
	return err
}

// RawRequest encodes a request with a string id around params that are
// already encoded JSON (valid, as a decoded message's params are).
func RawRequest(id, method string, params json.RawMessage) []byte {
	buf := make([]byte, 0, len(params)+len(id)+len(method)+48)
	buf = append(buf, `{"jsonrpc":"2.0","id":`...)
	buf = append(buf, rawjson.Quote(id)...)
	buf = append(buf, `,"method":`...)
	buf = append(buf, rawjson.Quote(method)...)
	if len(params) > 0 {
		buf = append(buf, `,"params":`...)
		buf = append(buf, params...)
	}
	return append(buf, '}')
}

func (c *lineConn) Close() error {
	c.closeOnce.Do(func() {
		c.closeErr = errors.Join(c.rc.Close(), c.w.Close())
	})
	return c.closeErr
}

// DecodeMessage decodes one message exactly as jsonrpc.DecodeMessage does
// (keys matched case-sensitively, the last of duplicate keys winning,
// trailing data after the object ignored), but keeps params and result raw
// and allocates a fraction as much: the SDK decodes them into typed values
// where it needs them, and the raw tools/call path never does. data may be
// reused by the caller once it returns.
func DecodeMessage(data []byte) (jsonrpc.Message, error) {
	return decodeMessage(data, true)
}

// DecodeOwnedMessage is DecodeMessage for data the caller hands over: the
// message's params or result may point into it, so it must not change
// afterwards. It saves DecodeMessage's copy.
func DecodeOwnedMessage(data []byte) (jsonrpc.Message, error) {
	return decodeMessage(data, false)
}

func decodeMessage(data []byte, clone bool) (jsonrpc.Message, error) {
	if !rawjson.Valid(data) {
		// Trailing data, or not JSON at all: the general path decides.
		return decodeMessageSlow(data)
	}
	if clone {
		data = bytes.Clone(data) // params and result point into it
	}
	var version, id, method, params, result, werr []byte
	isObject := rawjson.Members(data, func(key []byte, start, end int) bool {
		v := data[start:end]
		switch string(key) {
		case "jsonrpc":
			version = v
		case "id":
			id = v
		case "method":
			method = v
		case "params":
			params = v
		case "result":
			result = v
		case "error":
			werr = v
		}
		return true
	})
	if !isObject {
		return decodeMessageSlow(data)
	}
	return buildMessage(version, id, method, params, result, werr)
}

// decodeMessageSlow is DecodeMessage for input that is not one valid JSON
// value: json.Decoder reads the first value and ignores the rest, as the
// SDK's decoder does.
func decodeMessageSlow(data []byte) (jsonrpc.Message, error) {
	var m map[string]json.RawMessage
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&m); err != nil {
		return nil, fmt.Errorf("unmarshaling jsonrpc message: %w", err)
	}
	return buildMessage(m["jsonrpc"], m["id"], m["method"], m["params"], m["result"], m["error"])
}

// buildMessage makes a message of its members' raw values (nil: absent).
func buildMessage(version, rawID, method, params, result, werr []byte) (jsonrpc.Message, error) {
	if string(version) != `"2.0"` {
		var v string
		if version != nil {
			if err := json.Unmarshal(version, &v); err != nil {
				return nil, fmt.Errorf("unmarshaling jsonrpc message: %w", err)
			}
		}
		if v != "2.0" {
			return nil, fmt.Errorf("invalid message version tag %q; expected %q", v, "2.0")
		}
	}
	var idv any
	if n, ok := smallInt(rawID); ok {
		idv = float64(n) // as json.Unmarshal makes it
	} else if len(rawID) > 0 && rawID[0] == '"' {
		idv = rawjson.Unquote(rawID)
	} else if rawID != nil {
		if err := json.Unmarshal(rawID, &idv); err != nil {
			return nil, fmt.Errorf("unmarshaling jsonrpc message: %w", err)
		}
	}
	id, err := jsonrpc.MakeID(idv)
	if err != nil {
		return nil, err
	}
	if method != nil {
		var name string
		if method[0] == '"' {
			name = rawjson.Unquote(method)
		} else if err := json.Unmarshal(method, &name); err != nil {
			return nil, fmt.Errorf("unmarshaling jsonrpc message: %w", err)
		}
		return &jsonrpc.Request{Method: name, ID: id, Params: params}, nil
	}
	if !id.IsValid() {
		return nil, errors.New("invalid request: a response without an id")
	}
	resp := &jsonrpc.Response{ID: id, Result: result}
	if werr != nil && string(werr) != "null" {
		e, err := decodeError(werr)
		if err != nil {
			return nil, fmt.Errorf("unmarshaling jsonrpc message: %w", err)
		}
		resp.Error = e
	}
	return resp, nil
}

// smallInt parses an integer literal of at most 15 digits (exact as a
// float64); anything else is left to encoding/json.
func smallInt(b []byte) (int64, bool) {
	digits := b
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 15 || (digits[0] == '0' && len(digits) > 1) {
		return 0, false
	}
	var n int64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if len(digits) < len(b) {
		n = -n
	}
	return n, true
}

// decodeError decodes an error object with case-sensitive keys.
func decodeError(raw json.RawMessage) (*jsonrpc.Error, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	var e jsonrpc.Error
	if v, ok := m["code"]; ok {
		if err := json.Unmarshal(v, &e.Code); err != nil {
			return nil, err
		}
	}
	if v, ok := m["message"]; ok {
		if err := json.Unmarshal(v, &e.Message); err != nil {
			return nil, err
		}
	}
	if v, ok := m["data"]; ok && string(v) != "null" {
		e.Data = v
	}
	return &e, nil
}
