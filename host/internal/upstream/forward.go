package upstream

/*
Design note: forwarding a tools/call as bytes.

Through the go-sdk, a proxied call is decoded and re-encoded on both hops,
and the SDK's JSON decoder allocates a large buffer for every message. For
tools/call on a process-backed upstream (stdio, plugin) speaking a
session-based protocol, Forward instead sends the downstream's params as
they came on the same connection the SDK client uses, with request ids of
its own ("mcpvisor-fwd-N", which the SDK's integer ids never collide with),
and takes the result back from the connection's Read before the SDK sees it
(processconn.go). The call still goes through do(): the breaker, waiting for
a session, classification, session-gone and process-death handling are the
same as for every other operation.

HTTP and SSE upstreams take the SDK path: the SDK's streamable client
connection learns its session's protocol version through an unexported hook
that any wrapper would hide, so its connection cannot be wrapped the way a
process's is.
*/

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/transport"
	"github.com/mcpvisor/mcpvisor/host/internal/wire"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// forwardIDPrefix starts the ids of the requests Forward sends.
const forwardIDPrefix = "mcpvisor-fwd-"

// errConnClosed is wrapped by errors for forwarded calls whose connection
// ended.
var errConnClosed = errors.New("connection closed")

// Forward sends a tools/call, resources/read or prompts/get (method) with
// the downstream's params as JSON (already naming the original tool or
// prompt; name is that name, or the URI) for the downstream client d (nil:
// none), and returns the upstream's result as JSON. On a process-backed
// upstream speaking a session-based protocol the bytes pass through
// untouched; otherwise the call takes the SDK path and the result is
// encoded again, without HTML escaping (wire.MarshalResult), its encoded
// size counted against max_inflight_bytes until it has been handed on.
// Recovery is the same as CallTool's, ReadResource's or GetPrompt's.
func (s *Supervisor) Forward(ctx context.Context, d Downstream, method, name string, params json.RawMessage) (json.RawMessage, error) {
	var out json.RawMessage
	var obs *Call
	if s.opts.Observer != nil {
		var args, meta []byte
		args, meta = paramsMembers(params)
		if method == "resources/read" {
			args = nil
		}
		obs = s.newCall(d, method, name, args)
		if meta != nil && bytes.Contains(meta, []byte("traceparent")) {
			obs.Traceparent, obs.Tracestate = metaTrace(meta)
		}
		ctx = s.started(ctx, obs)
		if len(obs.Propagate) > 0 {
			if p, err := withMeta(params, obs.Propagate); err == nil {
				params = p
			}
		}
	}
	replayable := true
	if method == "tools/call" {
		replayable = s.sessions.replayable(name)
	}
	err := s.exec.do(ctx, d, method, replayable, obs.wrap(s, func(ctx context.Context, sess *session) error {
		if sess.conn != nil {
			if ir := sess.cs.InitializeResult(); ir != nil && ir.ProtocolVersion < wire.Stateless {
				var err error
				out, err = sess.conn.call(ctx, method, params)
				return err
			}
		}
		res, err := s.sdkForward(ctx, sess, method, params)
		if err != nil {
			return err
		}
		if out, err = wire.MarshalResult(res); err != nil {
			return err
		}
		// The re-encoded copy is held too until the answer is written.
		if b := s.opts.ResultBudget; transport.HoldsResults(ctx) && !b.HoldResponse(ctx, s.name, int64(len(out))) {
			out = nil
			return recovery.WireError(transport.Busy(s.name, method, b.Limit(), transport.ErrBusy))
		}
		return nil
	}))
	if obs != nil {
		var result any
		if out != nil {
			result = out
		}
		s.end(ctx, obs, err, err == nil && method == "tools/call" && resultIsError(out), result)
	}
	return out, err
}

// sdkForward makes a forwarded call through the go-sdk client session:
// params are decoded into the SDK's types and the typed result returned.
func (s *Supervisor) sdkForward(ctx context.Context, sess *session, method string, params json.RawMessage) (any, error) {
	invalid := func(err error) error {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	switch method {
	case "tools/call":
		var p mcp.CallToolParamsRaw
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, invalid(err)
		}
		return sdkCallTool(ctx, sess, p.Meta, &p)
	case "resources/read":
		var p mcp.ReadResourceParams
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, invalid(err)
		}
		return sess.cs.ReadResource(ctx, forSession(sess, &p, func(p *mcp.ReadResourceParams) *mcp.Meta { return &p.Meta }))
	case "prompts/get":
		var p mcp.GetPromptParams
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, invalid(err)
		}
		return sess.cs.GetPrompt(ctx, forSession(sess, &p, func(p *mcp.GetPromptParams) *mcp.Meta { return &p.Meta }))
	}
	return nil, fmt.Errorf("forwarding %q: not a method mcpvisor forwards as bytes", method)
}

// paramsMembers returns the arguments and _meta members of tools/call
// params (valid JSON), nil where absent.
func paramsMembers(params []byte) (args, meta []byte) {
	wire.Members(params, func(key []byte, start, end int) bool {
		switch string(key) {
		case "arguments":
			args = params[start:end]
		case "_meta":
			meta = params[start:end]
		}
		return true
	})
	return args, meta
}

// metaTrace returns the W3C trace context members of a _meta object.
func metaTrace(meta []byte) (traceparent, tracestate string) {
	wire.Members(meta, func(key []byte, start, end int) bool {
		if meta[start] != '"' {
			return true
		}
		switch string(key) {
		case "traceparent":
			traceparent = wire.Unquote(meta[start:end])
		case "tracestate":
			tracestate = wire.Unquote(meta[start:end])
		}
		return true
	})
	return traceparent, tracestate
}

// withMeta returns params with the members of add set in its _meta. The
// params are re-encoded: this runs only when a tracer propagates context.
func withMeta(params json.RawMessage, add map[string]string) (json.RawMessage, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(params, &top); err != nil {
		return nil, err
	}
	meta := map[string]json.RawMessage{}
	if m, ok := top["_meta"]; ok && string(m) != "null" {
		if err := json.Unmarshal(m, &meta); err != nil {
			return nil, err
		}
	}
	for k, v := range add {
		meta[k] = wire.Quote(v)
	}
	m, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	top["_meta"] = m
	return json.Marshal(top)
}

// resultIsError reports whether a tools/call result (valid JSON) says
// isError: true. Most results never mention it, so a substring check
// spares them the walk.
func resultIsError(res []byte) bool {
	if !bytes.Contains(res, []byte(`"isError"`)) {
		return false
	}
	isErr := false
	wire.Members(res, func(key []byte, start, end int) bool {
		if string(key) == "isError" {
			isErr = string(res[start:end]) == "true"
			return false
		}
		return true
	})
	return isErr
}

// call sends one request with params as they are and waits for its result.
func (c *processConn) call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	c.mu.Lock()
	if c.readErr != nil {
		err := c.readErr
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %w", mcp.ErrConnectionClosed, err)
	}
	c.seq++
	key := forwardIDPrefix + strconv.FormatUint(c.seq, 10)
	ch := make(chan *jsonrpc.Response, 1)
	c.pending[key] = ch
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
		// Counted against the host's max_inflight_bytes until the caller
		// has handed the result on, like a response the go-sdk reads.
		if b := c.s.opts.ResultBudget; resp.Error == nil && transport.HoldsResults(ctx) && !b.HoldResponse(ctx, c.s.name, int64(len(resp.Result))) {
			return nil, c.busy(method)
		}
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

// responseResult returns a forwarded call's result, or its error: an
// upstream's JSON-RPC error as the *jsonrpc.Error the recovery path
// classifies.
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

// requestWriter is a connection that writes a request whose params are
// already encoded JSON without re-encoding them (wire's line connection).
type requestWriter interface {
	WriteRequest(ctx context.Context, id, method string, params json.RawMessage) error
}

func (c *processConn) writeRequest(ctx context.Context, id, method string, params json.RawMessage) error {
	if w, ok := c.Connection.(requestWriter); ok {
		return w.WriteRequest(ctx, id, method, params)
	}
	jid, _ := jsonrpc.MakeID(id)
	return c.Connection.Write(ctx, &jsonrpc.Request{ID: jid, Method: method, Params: params})
}

// deliver hands a response to its forwarded call; false if it is not one.
func (c *processConn) deliver(resp *jsonrpc.Response) bool {
	key, ok := resp.ID.Raw().(string)
	if !ok || !strings.HasPrefix(key, forwardIDPrefix) {
		return false
	}
	c.mu.Lock()
	ch, ok := c.pending[key]
	delete(c.pending, key)
	c.mu.Unlock()
	if ok {
		ch <- resp
	}
	return true
}

// failPending ends every forwarded call waiting on a connection that is
// gone.
func (c *processConn) failPending(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.readErr == nil {
		c.readErr = fmt.Errorf("%w: %w", errConnClosed, err)
	}
	for key, ch := range c.pending {
		delete(c.pending, key)
		ch <- &jsonrpc.Response{Error: fmt.Errorf("%w: %w", mcp.ErrConnectionClosed, err)}
	}
}
