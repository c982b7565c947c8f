package wire

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxLineLength bounds one JSON-RPC message from a peer unless the
// transport sets its own bound (the SDK's default, 16 MiB).
const maxLineLength = mcp.DefaultMaxLineLength

// lineTransport speaks newline-delimited JSON-RPC over a server process's
// pipes. It replaces the SDK's IOTransport on mcpvisor's own pipes because
// that one decodes every line with a decoder that allocates tens of
// kilobytes and hands each line to Read through a goroutine of its own; on
// the per-call path both cost more than the proxying. The pipes come from
// os.Pipe, so closing them unblocks a pending Read.
type lineTransport struct {
	r     io.ReadCloser
	w     io.WriteCloser
	stray func(line []byte) // nil: a stray line is an error
	// answerInvalid: an undecodable line is answered with a parse error
	// and skipped (a client's pipes; see NewClientLineTransport).
	answerInvalid bool
	// maxLine bounds one line; zero means maxLineLength.
	maxLine int64
	// tooLarge: see lineConn.
	tooLarge func(limit int64) error
}

func (t *lineTransport) Connect(context.Context) (mcp.Connection, error) {
	maxLine := t.maxLine
	if maxLine <= 0 {
		maxLine = maxLineLength
	}
	return &lineConn{r: bufio.NewReaderSize(t.r, 64<<10), rc: t.r, w: t.w, wsem: make(chan struct{}, 1), stray: t.stray, answerInvalid: t.answerInvalid, maxLine: maxLine, tooLarge: t.tooLarge}, nil
}

// ErrWriteTimeout is wrapped by the error of a write that could not finish
// by its context's deadline: the peer stopped reading (a stopped or stuck
// process whose input pipe is full). It also wraps
// context.DeadlineExceeded.
var ErrWriteTimeout = errors.New("the peer did not read its input in time")

// writeDeadliner is a writer whose writes can be bounded in time: the
// write end of an os.Pipe.
type writeDeadliner interface {
	SetWriteDeadline(time.Time) error
}

type lineConn struct {
	r     *bufio.Reader
	rc    io.Closer
	queue []jsonrpc.Message // the rest of a batch
	stray func(line []byte)
	// answerInvalid: see lineTransport.
	answerInvalid bool
	// maxLine bounds one line.
	maxLine int64
	// tooLarge, when set, makes the error a call gets for a response line
	// over maxLine (oversized.go); nil: such a line ends the connection.
	tooLarge func(limit int64) error

	// wsem serialises writes; unlike a mutex, waiting for it is bounded by
	// the writer's context.
	wsem chan struct{}
	w    io.WriteCloser
	// werr is set when a write was cut short: the stream then holds half a
	// message and no later write can be understood.
	werr error
	// stalled is set once a write has timed out (Stalled).
	stalled atomic.Bool

	closeOnce sync.Once
	closeErr  error
}

func (c *lineConn) SessionID() string { return "" }

func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for len(c.queue) == 0 {
		line, err := c.readLine()
		var tl *errLineTooLong
		if errors.As(err, &tl) && c.tooLarge != nil {
			if resp, ok := oversizedResponse(tl, c.tooLarge); ok {
				return resp, nil
			}
		}
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
				if c.skip(line) || c.answerParseError(ctx, err) {
					continue
				}
				return nil, fmt.Errorf("unmarshaling jsonrpc batch: %w", err)
			}
			for _, raw := range batch {
				msg, err := DecodeMessage(raw)
				if err != nil {
					if c.answerParseError(ctx, err) {
						continue
					}
					return nil, err
				}
				c.queue = append(c.queue, msg)
			}
			continue
		}
		msg, err := DecodeMessage(line)
		if err != nil && (c.skip(line) || c.answerParseError(ctx, err)) {
			continue
		}
		return msg, err
	}
	msg := c.queue[0]
	c.queue = c.queue[1:]
	return msg, nil
}

// skip hands a line that is not a JSON-RPC message to the stray handler and
// reports whether the connection goes on.
func (c *lineConn) skip(line []byte) bool {
	if c.stray == nil {
		return false
	}
	c.stray(line)
	return true
}

// parseErrorWriteTimeout bounds writing the answer to an undecodable line.
const parseErrorWriteTimeout = 10 * time.Second

// answerParseError answers an undecodable line from a client with a
// JSON-RPC parse error and reports whether the connection goes on (false
// when it does not answer invalid lines, or the answer could not be
// written).
func (c *lineConn) answerParseError(ctx context.Context, cause error) bool {
	if !c.answerInvalid {
		return false
	}
	msg, _ := json.Marshal("Parse error: mcpvisor could not decode this line as a JSON-RPC message (" + cause.Error() + "); it was skipped. Send one well-formed message per line, nested at most 1,000 deep.")
	ctx, cancel := context.WithTimeout(ctx, parseErrorWriteTimeout)
	defer cancel()
	return c.write(ctx, []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":`+string(msg)+"}}\n")) == nil
}

// readLine returns the next line without its newline, up to maxLine bytes.
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
		if int64(len(buf)) > c.maxLine {
			switch {
			case errors.Is(err, bufio.ErrBufferFull):
				return nil, c.skipLine(buf)
			case err == nil || errors.Is(err, io.EOF):
				return nil, &errLineTooLong{limit: c.maxLine, head: buf[:min(len(buf), oversizedKeep)], tail: buf[max(0, len(buf)-oversizedKeep):]}
			default:
				return nil, err
			}
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
	return c.write(ctx, append(data, '\n'))
}

// WriteResult writes a response with a result that is already encoded
// JSON (one the connection's Read produced, or json.Marshal did), as it is:
// no re-encoding, so the client gets the upstream's exact bytes.
func (c *lineConn) WriteResult(ctx context.Context, id jsonrpc.ID, result json.RawMessage) error {
	return c.write(ctx, append(EncodeResponse(id, result), '\n'))
}

// WriteRequest writes a request whose params are already encoded JSON,
// as they are.
func (c *lineConn) WriteRequest(ctx context.Context, id, method string, params json.RawMessage) error {
	return c.write(ctx, append(EncodeRequest(id, method, params), '\n'))
}

// write writes one framed message, bounded by ctx: waiting for the other
// writers and the write itself end at ctx's deadline (for a writer that
// supports deadlines). A write cut short leaves half a message in the
// stream: every later write fails, and the owner replaces the peer
// (Stalled says so) instead of feeding it the rest.
func (c *lineConn) write(ctx context.Context, buf []byte) error {
	select {
	case c.wsem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrWriteTimeout, ctx.Err())
	}
	defer func() { <-c.wsem }()
	if c.werr != nil {
		return c.werr
	}
	dw, bounded := c.w.(writeDeadliner)
	if dl, ok := ctx.Deadline(); ok && bounded {
		if dw.SetWriteDeadline(dl) == nil {
			defer dw.SetWriteDeadline(time.Time{})
		}
	}
	n, err := c.w.Write(buf)
	if err == nil {
		return nil
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.stalled.Store(true)
		err = fmt.Errorf("%w: %w", ErrWriteTimeout, context.DeadlineExceeded)
	}
	if n > 0 {
		c.werr = fmt.Errorf("a message was cut short after %d of %d bytes; the connection cannot be written to again: %w", n, len(buf), err)
	}
	return err
}

// Stalled reports whether a write to the peer has ever timed out: the peer
// stopped reading its input.
func (c *lineConn) Stalled() bool { return c.stalled.Load() }

func (c *lineConn) Close() error {
	c.closeOnce.Do(func() {
		c.closeErr = errors.Join(c.rc.Close(), c.w.Close())
	})
	return c.closeErr
}
