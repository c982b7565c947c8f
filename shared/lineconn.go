package shared

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// NewLineConn returns a Conn that speaks newline-delimited JSON-RPC over
// rwc, the framing of MCP's stdio transport: one message per line. It suits
// any byte stream — a Unix or TCP socket, a pipe, a serial line. Closing the
// Conn closes rwc, which must make a blocked Read return (net.Conn and
// os.File do).
func NewLineConn(rwc io.ReadWriteCloser) Conn {
	return &lineConn{rwc: rwc, r: bufio.NewReaderSize(rwc, 64<<10), closed: make(chan struct{})}
}

type lineConn struct {
	rwc io.ReadWriteCloser

	rmu sync.Mutex
	r   *bufio.Reader

	wmu sync.Mutex

	closeOnce sync.Once
	closed    chan struct{}
}

func (c *lineConn) Send(ctx context.Context, frame []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if bytes.IndexByte(frame, '\n') >= 0 {
		// A message spread over lines would arrive as several broken
		// ones; JSON allows removing the layout.
		var buf bytes.Buffer
		if err := json.Compact(&buf, frame); err != nil {
			return fmt.Errorf("frame is not JSON: %w", err)
		}
		frame = buf.Bytes()
	}
	line := make([]byte, 0, len(frame)+1)
	line = append(append(line, frame...), '\n')
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.rwc.Write(line); err != nil {
		if c.isClosed() {
			return ErrConnClosed
		}
		return err
	}
	return nil
}

func (c *lineConn) Recv(ctx context.Context) ([]byte, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		line, err := c.readLine()
		if err != nil {
			if c.isClosed() {
				return nil, ErrConnClosed
			}
			if errors.Is(err, io.EOF) && len(bytes.TrimSpace(line)) > 0 {
				return bytes.TrimSpace(line), nil // a last message without its newline
			}
			return nil, err
		}
		if line = bytes.TrimSpace(line); len(line) > 0 {
			return line, nil
		}
	}
}

// readLine reads one line of at most MaxFrameSize bytes.
func (c *lineConn) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := c.r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > MaxFrameSize {
			return nil, fmt.Errorf("message longer than %d bytes", MaxFrameSize)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

func (c *lineConn) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

func (c *lineConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		close(c.closed)
		err = c.rwc.Close()
	})
	return err
}
