package upstream

/*
Design note: the raw tools/call fast path.

Through the go-sdk, a proxied call is decoded and re-encoded on both hops,
and the SDK's JSON decoder allocates a large buffer for every message. For
tools/call — the hot path — on a process-backed upstream, mcpvisor instead
sends the downstream's raw params on the same connection the SDK client
uses, with request ids of its own ("mcpvisor-fast-N", which the SDK's
integer ids never collide with), and takes the raw result back from the
tapped Read before the SDK sees it. The call still goes through do(): the
breaker, waiting for a session, classification, session-gone and
process-death handling are the same as for every other operation.
*/

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const fastIDPrefix = "mcpvisor-fast-"

// errTapClosed is wrapped by errors for raw calls whose connection ended.
var errTapClosed = errors.New("connection closed")

// rawCall is a raw request waiting for its response.
type rawCall struct {
	ch    chan *jsonrpc.Response
	early func(json.RawMessage) // see WithEarlyResult
}

// WithEarlyResult returns a context under which a raw tools/call hands a
// successful result to deliver the moment the connection reads it, on the
// connection's reader (over HTTP: the caller's goroutine, before the rest
// of the response is read), before CallToolRaw returns the same bytes. A
// success is final on the recovery path (nothing retries it or changes
// it), so a caller that only forwards the result can answer its own
// client one goroutine handoff sooner. deliver must not block for long:
// the upstream's next message waits for it. It is not called for errors,
// which go through recovery first, nor on the SDK path.
func WithEarlyResult(ctx context.Context, deliver func(json.RawMessage)) context.Context {
	return WithCall(ctx, downstreamFrom(ctx), deliver)
}

// call sends one raw request and waits for its raw result.
func (c *tapConn) call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	c.mu.Lock()
	if c.readErr != nil {
		err := c.readErr
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %w", mcp.ErrConnectionClosed, err)
	}
	c.seq++
	key := fastIDPrefix + strconv.FormatUint(c.seq, 10)
	ch := make(chan *jsonrpc.Response, 1)
	early := earlyFrom(ctx)
	c.pending[key] = rawCall{ch: ch, early: early}
	c.mu.Unlock()
	release := func() {
		c.mu.Lock()
		delete(c.pending, key)
		c.mu.Unlock()
	}

	if err := c.writeRequest(ctx, key, method, params); err != nil {
		release()
		return nil, fmt.Errorf("%w: calling %q: %w", mcp.ErrConnectionClosed, method, err)
	}
	select {
	case resp := <-ch:
		return responseResult(resp)
	case <-ctx.Done():
		release()
		// Tell the upstream, as the SDK does for its own calls; off the
		// caller's path so a stuck peer cannot delay the return.
		go func() {
			p, _ := json.Marshal(&mcp.CancelledParams{RequestID: key, Reason: ctx.Err().Error()})
			nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeGrace)
			defer cancel()
			c.Connection.Write(nctx, &jsonrpc.Request{Method: "notifications/cancelled", Params: p})
		}()
		return nil, ctx.Err()
	}
}

// responseResult returns a raw call's result, or its error: an upstream's
// JSON-RPC error as the *jsonrpc.Error the recovery path classifies.
func responseResult(resp *jsonrpc.Response) (json.RawMessage, error) {
	if resp.Error != nil {
		var wire *jsonrpc.Error
		if errors.As(resp.Error, &wire) {
			return nil, wire
		}
		return nil, resp.Error
	}
	return resp.Result, nil
}

// rawRequestWriter is a connection that writes a request with params that
// are already encoded JSON without re-encoding them (transport's line
// connection).
type rawRequestWriter interface {
	WriteRawRequest(id, method string, params json.RawMessage) error
}

func (c *tapConn) writeRequest(ctx context.Context, id, method string, params json.RawMessage) error {
	if w, ok := c.Connection.(rawRequestWriter); ok {
		return w.WriteRawRequest(id, method, params)
	}
	jid, _ := jsonrpc.MakeID(id)
	return c.Connection.Write(ctx, &jsonrpc.Request{ID: jid, Method: method, Params: params})
}

// deliver hands a response to its raw call; false if it is not one.
func (c *tapConn) deliver(resp *jsonrpc.Response) bool {
	key, ok := resp.ID.Raw().(string)
	if !ok || !strings.HasPrefix(key, fastIDPrefix) {
		return false
	}
	c.mu.Lock()
	rc, ok := c.pending[key]
	delete(c.pending, key)
	c.mu.Unlock()
	if !ok {
		return true
	}
	if rc.early != nil && resp.Error == nil && len(resp.Result) > 0 {
		rc.early(resp.Result)
	}
	rc.ch <- resp
	return true
}

// failPending ends every raw call waiting on a connection that is gone.
func (c *tapConn) failPending(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.readErr == nil {
		c.readErr = fmt.Errorf("%w: %w", errTapClosed, err)
	}
	for key, rc := range c.pending {
		delete(c.pending, key)
		rc.ch <- &jsonrpc.Response{Error: fmt.Errorf("%w: %w", mcp.ErrConnectionClosed, err)}
	}
}

// CallToolRaw calls a tool with the downstream's raw params (already naming
// the original tool) and returns the upstream's raw result. On a process
// upstream speaking a session-based protocol the bytes pass through
// untouched, and on a streamable HTTP upstream the same params go out in a
// POST of mcpvisor's own on the SDK session (fasthttp.go); otherwise the
// call takes the SDK path and the result is encoded. Recovery is the same
// as CallTool's.
func (s *Supervisor) CallToolRaw(ctx context.Context, name string, params json.RawMessage) (json.RawMessage, error) {
	var out json.RawMessage
	err := s.doArmed(ctx, "tools/call", s.replayable(name), func(ctx context.Context, sess *session, arm func() context.Context) error {
		if ir := sess.cs.InitializeResult(); ir != nil && ir.ProtocolVersion < "2026-07-28" {
			var err error
			switch {
			case sess.tap != nil:
				out, err = sess.tap.call(arm(), "tools/call", params)
				return err
			case sess.httpRaw():
				out, err = s.httpCall(ctx, arm, sess, "tools/call", params)
				return err
			}
		}
		ctx = arm()
		var p mcp.CallToolParamsRaw
		if err := json.Unmarshal(params, &p); err != nil {
			return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
		}
		res, err := sdkCallTool(ctx, sess.cs, p.Meta, &p)
		if err != nil {
			return err
		}
		out, err = json.Marshal(res)
		return err
	})
	return out, err
}
