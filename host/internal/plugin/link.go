package plugin

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/transport"
	"github.com/mcpvisor/mcpvisor/host/internal/wire"
	"github.com/mcpvisor/mcpvisor/host/recovery"
	"github.com/mcpvisor/mcpvisor/shared"
)

// Link is one running plugin process and its open connection. It
// implements transport.Link; its Pid method marks it as process-backed for
// the supervisor.
type Link struct {
	server string
	plugin string
	client *goplugin.Client
	cmd    *exec.Cmd
	pid    int
	group  *transport.ProcessGroup
	conn   shared.Conn
	exited <-chan struct{} // closed when go-plugin has reaped the process
	out    *output
	logger hclog.Logger

	transport *mcpTransport

	closeOnce sync.Once
}

var _ transport.Link = (*Link)(nil)

// Transport returns the go-sdk transport over the plugin's connection. It
// may be connected once.
func (l *Link) Transport() mcp.Transport { return l.transport }

// Pid is the plugin process's id.
func (l *Link) Pid() int { return l.pid }

var _ transport.ProcessLink = (*Link)(nil)

// Done is closed when the plugin process has exited and been reaped.
func (l *Link) Done() <-chan struct{} { return l.exited }

// Err describes how the plugin process exited, with its last stderr lines.
// It wraps recovery.ErrProcessExited, and is nil while the process runs.
func (l *Link) Err() error {
	select {
	case <-l.exited:
	default:
		return nil
	}
	// go-plugin's Wait has returned before it closed exited, so
	// ProcessState is set and safe to read.
	return fmt.Errorf("%w (plugin %q, pid %d, %s)%s", recovery.ErrProcessExited, l.plugin, l.pid,
		exitHow(l.cmd), stderrSuffix(l.out.tail.last(3)))
}

// Close closes the connection and stops the plugin: go-plugin asks it to
// exit over gRPC and kills it after 2 s; then anything the plugin started in
// its process group is killed too and the group's keeper released. When
// ctx ends first, the group is killed at once.
func (l *Link) Close(ctx context.Context) error {
	l.closeOnce.Do(func() {
		l.conn.Close()
		killed := make(chan struct{})
		go func() {
			l.client.Kill()
			close(killed)
		}()
		select {
		case <-killed:
		case <-ctx.Done():
			l.killGroup()
			<-killed
		}
		l.killGroup()
		l.group.Release()
	})
	return nil
}

// killGroup SIGKILLs whatever is left in the plugin's process group.
func (l *Link) killGroup() {
	if err := l.group.Signal(syscall.SIGKILL); err != nil {
		l.logger.Debug("killing plugin process group failed", "pgid", l.group.Pgid(), "error", err)
	}
}

// mcpTransport adapts a plugin connection to the go-sdk: every frame is one
// JSON-RPC message.
type mcpTransport struct {
	conn shared.Conn
	used atomic.Bool

	// Frames over maxMessage (the server's max_message_size) that answer
	// a call fail that call; the plugin protocol bounds every frame at
	// shared.MaxFrameSize before that.
	server     string
	maxMessage int64
	logger     hclog.Logger
}

func (t *mcpTransport) Connect(context.Context) (mcp.Connection, error) {
	if t.used.Swap(true) {
		return nil, errors.New("plugin connection already in use; dial again")
	}
	return &mcpConn{conn: t.conn, server: t.server, maxMessage: t.maxMessage, logger: t.logger}, nil
}

// mcpConn is a go-sdk mcp.Connection over a shared.Conn.
type mcpConn struct {
	conn       shared.Conn
	server     string
	maxMessage int64
	logger     hclog.Logger
}

func (c *mcpConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	frame, err := c.conn.Recv(ctx)
	if err != nil {
		return nil, err
	}
	if c.maxMessage > 0 && int64(len(frame)) > c.maxMessage {
		c.logger.Warn("upstream response over max_message_size refused", "limit", c.maxMessage, "size", len(frame))
		if resp, ok := wire.OversizedFrame(frame, transport.MessageTooLarge(c.server, "", c.maxMessage, int64(len(frame)))); ok {
			return resp, nil
		}
		return nil, fmt.Errorf("the plugin sent a message of %d bytes, over max_message_size (%d), that answers no call", len(frame), c.maxMessage)
	}
	msg, err := jsonrpc.DecodeMessage(frame)
	if err != nil {
		return nil, fmt.Errorf("plugin sent a frame that is not a JSON-RPC message: %w", err)
	}
	return msg, nil
}

func (c *mcpConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	frame, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	return c.conn.Send(ctx, frame)
}

func (c *mcpConn) Close() error { return c.conn.Close() }

func (c *mcpConn) SessionID() string { return "" }
