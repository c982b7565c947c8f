package upstream

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/transport"
	"github.com/mcpvisor/mcpvisor/host/recovery"
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
	pc := &processConn{Connection: c, s: t.s, pending: map[string]chan *jsonrpc.Response{}, calls: map[any]sdkCall{}}
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

	// calls are the go-sdk's calls in flight, by request id, with the
	// context each was written with: its response is counted against the
	// host's max_inflight_bytes until that call has been handed on. Guarded
	// by mu.
	calls map[any]sdkCall

	// lastRead is when a message was last read from the process
	// (UnixNano): any message is an answer for liveness (session.answeredAt).
	lastRead atomic.Int64
}

// sdkCall is one of the go-sdk's calls in flight on a processConn.
type sdkCall struct {
	ctx    context.Context
	method string
	stop   func() bool // stops the cleanup that forgets a call whose context ended
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

// Write records the go-sdk's calls, so that Read knows whose response it
// reads (see calls).
func (c *processConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() && c.s.opts.ResultBudget != nil && transport.HoldsResults(ctx) {
		id := req.ID.Raw()
		c.mu.Lock()
		// A call abandoned without a response is forgotten with its
		// context; every call mcpvisor makes has a deadline.
		stop := context.AfterFunc(ctx, func() {
			c.mu.Lock()
			delete(c.calls, id)
			c.mu.Unlock()
		})
		c.calls[id] = sdkCall{ctx: ctx, method: req.Method, stop: stop}
		c.mu.Unlock()
	}
	return c.Connection.Write(ctx, msg)
}

// hold counts a response against the host's max_inflight_bytes until its
// call has been handed on (transport.ResultBudget.HoldResponse). A
// response that finds no room is replaced by the call's "busy" error: the
// bytes, already read, are dropped at once, and the session goes on.
func (c *processConn) hold(resp *jsonrpc.Response) *jsonrpc.Response {
	c.mu.Lock()
	call, ok := c.calls[resp.ID.Raw()]
	delete(c.calls, resp.ID.Raw())
	c.mu.Unlock()
	if !ok {
		return resp
	}
	call.stop()
	if c.s.opts.ResultBudget.HoldResponse(call.ctx, c.s.name, int64(len(resp.Result))) {
		return resp
	}
	return &jsonrpc.Response{ID: resp.ID, Error: c.busy(call.method)}
}

// busy is the error a call gets whose response found no room in the
// host's max_inflight_bytes.
func (c *processConn) busy(method string) *jsonrpc.Error {
	b := c.s.opts.ResultBudget
	c.s.logger.Warn("upstream response refused: max_inflight_bytes reached", "op", method, "limit", b.Limit())
	return recovery.WireError(transport.Busy(c.s.name, method, b.Limit(), transport.ErrBusy))
}

func (c *processConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		if err != nil {
			c.failPending(err)
			return msg, err
		}
		c.lastRead.Store(time.Now().UnixNano())
		if resp, ok := msg.(*jsonrpc.Response); ok {
			if c.deliver(resp) {
				continue
			}
			if resp.Error == nil && c.s.opts.ResultBudget != nil {
				msg = c.hold(resp)
			}
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
