package wire

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
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
	return &lineConn{r: bufio.NewReaderSize(t.r, 64<<10), rc: t.r, w: t.w}, nil
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

// WriteResult writes a response with a result that is already encoded
// JSON (one the connection's Read produced, or json.Marshal did), as it is:
// no re-encoding, so the client gets the upstream's exact bytes.
func (c *lineConn) WriteResult(id jsonrpc.ID, result json.RawMessage) error {
	buf := append(EncodeResponse(id, result), '\n')
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.w.Write(buf)
	return err
}

// WriteRequest writes a request whose params are already encoded JSON,
// as they are.
func (c *lineConn) WriteRequest(id, method string, params json.RawMessage) error {
	buf := append(EncodeRequest(id, method, params), '\n')
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.w.Write(buf)
	return err
}

func (c *lineConn) Close() error {
	c.closeOnce.Do(func() {
		c.closeErr = errors.Join(c.rc.Close(), c.w.Close())
	})
	return c.closeErr
}
