package upstream

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The go-sdk client retires a call's response as soon as it reads it, but
// hands notifications to a separate handler goroutine. A progress or log
// notification the upstream sent just before its result could therefore be
// forwarded after the downstream already got the result — or dropped,
// since the call is no longer in flight. processTransport closes that gap
// for process-backed links: it forwards progress and log notifications from
// inside Read, so the response behind them is not even read until they
// have reached the downstream. Its connection also carries the calls
// Forward makes (forward.go).
//
// HTTP links are not wrapped: the SDK's streamable client connection relies
// on unexported methods a wrapper would hide. They relay these
// notifications from their event streams instead
// (transport.NotificationRelay).
type processTransport struct {
	mcp.Transport
	s      *Supervisor
	holder *connHolder
}

// connHolder hands the wrapped connection back to the supervisor.
type connHolder struct{ conn *processConn }

func (t processTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	pc := &processConn{Connection: c, s: t.s, pending: map[string]chan *jsonrpc.Response{}}
	if t.holder != nil {
		t.holder.conn = pc
	}
	return pc, nil
}

// processConn is the connection of a process-backed session.
type processConn struct {
	mcp.Connection
	s *Supervisor

	// Forwarded calls (forward.go), by their request id.
	mu      sync.Mutex
	seq     uint64
	pending map[string]chan *jsonrpc.Response
	readErr error // set once Read has failed; no forwarded call can complete after
}

const (
	methodProgress = "notifications/progress"
	methodLog      = "notifications/message"
)

// orderedNotifications are the notifications about a call that must reach
// its downstream before the call's result.
var orderedNotifications = []string{methodProgress, methodLog}

// forwardNotification forwards a progress or log notification and reports
// whether it did: false for other methods and for params it cannot decode.
func (s *Supervisor) forwardNotification(req *jsonrpc.Request) bool {
	switch req.Method {
	case methodProgress:
		var p mcp.ProgressNotificationParams
		if json.Unmarshal(req.Params, &p) != nil {
			return false
		}
		s.forwardProgress(&p)
	case methodLog:
		var p mcp.LoggingMessageParams
		if json.Unmarshal(req.Params, &p) != nil {
			return false
		}
		s.forwardLog(&p)
	default:
		return false
	}
	return true
}

func (c *processConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		if err != nil {
			c.failPending(err)
			return msg, err
		}
		if resp, ok := msg.(*jsonrpc.Response); ok && c.deliver(resp) {
			continue
		}
		req, ok := msg.(*jsonrpc.Request)
		if ok && req.IsCall() && c.s.atPendingCap(req.Method) {
			// Declined here, before the SDK starts a goroutine for it: a
			// server asking in a loop would cost one per request
			// (docs/security.md, "Requests from servers to clients").
			if err := c.Connection.Write(ctx, &jsonrpc.Response{ID: req.ID, Error: c.s.tooManyPending(req.Method)}); err != nil {
				c.s.logger.Debug("declining a request to a client failed", "method", req.Method, "error", err)
			}
			continue
		}
		if !ok || req.IsCall() || !c.s.forwardNotification(req) {
			return msg, nil
		}
	}
}

// stalled reports whether a write to the process ever timed out: it
// stopped reading its input (wire's line connection knows).
func (c *processConn) stalled() bool {
	s, ok := c.Connection.(interface{ Stalled() bool })
	return ok && s.Stalled()
}
