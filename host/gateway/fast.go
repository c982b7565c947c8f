package gateway

/*
Design note: the stdio fast path for tools/call.

The go-sdk server decodes every request into typed params, runs it through
its middleware and handler queue, and encodes the typed result again. For a
proxy that is pure overhead on the hottest path, so on a stdio downstream
the gateway reads tools/call requests off the connection before the SDK
server does, and when the backend offers a raw path (RawBackend) it sends
the params upstream as bytes and writes the upstream's result back as
bytes. Everything else — initialize, lists, notifications, calls with a
progress token, clients on 2026-07-28 (whose results the SDK server
shapes) — goes to the SDK server as before.

The path is built around goroutine handoffs, which cost more than the
proxying on a small machine: the goroutine that reads a fast call makes it
(a parked spare takes over reading), and a successful result is written
to the client by the goroutine that read it from the upstream (RawBackend's
early hook), so a call crosses no goroutine boundary on its way out or
back. The HTTP fast path (fasthttp.go) shares the routing (fastTarget).
*/

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/rawjson"
	"github.com/mcpvisor/mcpvisor/host/transport"
)

// RawBackend is a Backend that can also forward a tools/call without
// decoding it: params are the downstream's raw params with the original
// tool name, the result is the upstream's raw result. A backend may hand a
// successful result to early (when not nil) as soon as it has it, from
// another goroutine, before CallToolRaw returns that same result; early
// is called at most once and never for an error. down is the client the
// call is made for (what the upstream sends back during it goes there).
type RawBackend interface {
	Backend
	CallToolRaw(ctx context.Context, server, tool string, params json.RawMessage, down Downstream, early func(json.RawMessage)) (json.RawMessage, error)
}

// rawResultWriter is a connection that can write a response around a raw
// result without re-encoding it (transport's line connection).
type rawResultWriter interface {
	WriteRawResult(id jsonrpc.ID, result json.RawMessage) error
}

// fastTransport wraps a downstream stdio transport with the fast path.
type fastTransport struct {
	mcp.Transport
	g  *Gateway
	rb RawBackend
	// ss is the SDK session serving this connection, set once Connect
	// has returned; until then every request goes to the SDK.
	ss atomic.Pointer[mcp.ServerSession]
}

func (t *fastTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	fc := &fastConn{
		Connection: c,
		t:          t,
		incoming:   make(chan readResult),
		handoff:    make(chan struct{}),
		closed:     make(chan struct{}),
		inflight:   map[string]*fastCall{},
	}
	fc.wg.Add(1)
	go fc.worker()
	return fc, nil
}

// fastConn reads the downstream connection itself: one worker goroutine
// at a time is the reader; it takes each message off the wire and passes
// everything but fast calls on to the SDK server's Read. A reader that
// takes a fast call hands reading on and makes the call itself, so the
// request goes upstream without waiting for another goroutine to be
// scheduled.
type fastConn struct {
	mcp.Connection
	t *fastTransport

	incoming  chan readResult // to Read, for the SDK server
	handoff   chan struct{}   // makes a spare worker the reader
	spares    atomic.Int32
	closed    chan struct{}
	closeOnce sync.Once

	mu       sync.Mutex
	inflight map[string]*fastCall // fast calls by request id
	wg       sync.WaitGroup       // readers and fast calls
}

type readResult struct {
	msg jsonrpc.Message
	err error
}

type fastCall struct{ cancel context.CancelFunc }

type cancelParams struct {
	RequestID any `json:"requestId"`
}

// Read returns the next message that is not a fast call.
func (c *fastConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case r := <-c.incoming:
		return r.msg, r.err
	case <-c.closed:
		return nil, mcp.ErrConnectionClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// maxSpares bounds the goroutines kept waiting to become the reader.
const maxSpares = 64

// worker is a goroutine of the connection: it reads until it takes a fast
// call, hands reading on (to a spare worker, or a new one), makes the call,
// and then waits as a spare until it is needed as the reader again. Spares
// spare each call a goroutine start and the growth of a fresh stack.
func (c *fastConn) worker() {
	defer c.wg.Done()
	for {
		call := c.read()
		if call == nil {
			return
		}
		select {
		case c.handoff <- struct{}{}:
		default:
			c.wg.Add(1)
			go c.worker()
		}
		call()
		if c.spares.Add(1) > maxSpares {
			c.spares.Add(-1)
			return
		}
		select {
		case <-c.handoff:
			c.spares.Add(-1)
		case <-c.closed:
			c.spares.Add(-1)
			return
		}
	}
}

// read reads messages, passing all but fast calls on to the SDK server,
// until it takes a fast call, which it returns, or the connection ends
// (nil).
func (c *fastConn) read() (call func()) {
	ctx := context.Background()
	for {
		msg, err := c.Connection.Read(ctx)
		if err == nil {
			if req, ok := msg.(*jsonrpc.Request); ok {
				switch {
				case !req.IsCall() && req.Method == "notifications/cancelled":
					c.cancel(req.Params)
				case req.Method == "tools/call":
					if call := c.take(req); call != nil {
						return call
					}
				}
			}
		}
		select {
		case c.incoming <- readResult{msg, err}:
		case <-c.closed:
			return nil
		}
		if err != nil {
			return nil
		}
	}
}

// take prepares req for the fast path and returns the call to run, or nil
// to leave req to the SDK server.
func (c *fastConn) take(req *jsonrpc.Request) (call func()) {
	ss := c.t.ss.Load()
	if ss == nil {
		return nil
	}
	if ip := ss.InitializeParams(); ip == nil || ip.ProtocolVersion >= statelessProtocolVersion {
		return nil
	}
	tc, ok := c.t.g.fastTarget(req.Params)
	if !ok {
		return nil
	}

	c.t.g.fastCalls.Add(1)
	key := idKey(req.ID)
	ctx, cancel := context.WithCancel(context.Background())
	fc := &fastCall{cancel: cancel}
	c.mu.Lock()
	c.inflight[key] = fc
	c.mu.Unlock()
	return func() {
		defer func() {
			c.mu.Lock()
			// The client may already have reused the id (it has the
			// result once it was delivered early).
			if c.inflight[key] == fc {
				delete(c.inflight, key)
			}
			c.mu.Unlock()
			cancel()
		}()
		c.run(ctx, ss, req.ID, tc)
	}
}

// run makes one fast call and answers it.
func (c *fastConn) run(ctx context.Context, ss *mcp.ServerSession, id jsonrpc.ID, tc fastCallTarget) {
	// The result is written by whichever goroutine has it first: the
	// upstream's reader (early) or this one. delivered makes sure the
	// client never gets two responses to one request.
	var delivered atomic.Bool
	early := func(res json.RawMessage) {
		if delivered.CompareAndSwap(false, true) {
			c.writeResult(id, res)
		}
	}
	res, err := c.t.rb.CallToolRaw(ctx, tc.server, tc.tool, tc.params, ss, early)
	if !delivered.CompareAndSwap(false, true) {
		return
	}
	if err == nil {
		c.writeResult(id, res)
		return
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return // the client canceled: no response, as the SDK does
	}
	resp := &jsonrpc.Response{ID: id, Error: wireError(err)}
	if werr := c.Connection.Write(context.Background(), resp); werr != nil {
		c.t.g.logger.Debug("writing a tools/call response failed", "error", werr)
	}
}

// fastCallTarget is a tools/call the fast path forwards: the route, and
// the params to send upstream (naming the original tool).
type fastCallTarget struct {
	server, tool string
	params       json.RawMessage
}

// fastTarget decides whether a tools/call with params can take the fast
// path: its tool is known and it carries no progress token (progress is
// forwarded by the SDK path). Params are valid JSON (the connection decoded
// them); one walk of their top level finds the name, and everything else
// passes on as it came.
func (g *Gateway) fastTarget(params json.RawMessage) (fastCallTarget, bool) {
	nameAt, metaAt := [2]int{-1, -1}, [2]int{-1, -1}
	if !rawjson.Members(params, func(key []byte, start, end int) bool {
		switch string(key) {
		case "name":
			nameAt = [2]int{start, end}
		case "_meta":
			metaAt = [2]int{start, end}
		}
		return true
	}) {
		return fastCallTarget{}, false
	}
	if nameAt[0] < 0 || params[nameAt[0]] != '"' {
		return fastCallTarget{}, false
	}
	name := rawjson.Unquote(params[nameAt[0]:nameAt[1]])
	if metaAt[0] >= 0 {
		meta := params[metaAt[0]:metaAt[1]]
		progress := false
		if string(meta) != "null" && !rawjson.Members(meta, func(key []byte, _, _ int) bool {
			progress = progress || string(key) == "progressToken"
			return !progress
		}) {
			return fastCallTarget{}, false
		}
		if progress {
			return fastCallTarget{}, false
		}
	}
	e, ok := g.registry.LookupTool(name)
	if !ok {
		return fastCallTarget{}, false
	}
	if e.Original != name {
		// Splice the original name in place of the exposed one.
		q := rawjson.Quote(e.Original)
		p := make(json.RawMessage, 0, len(params)-(nameAt[1]-nameAt[0])+len(q))
		p = append(p, params[:nameAt[0]]...)
		p = append(p, q...)
		params = append(p, params[nameAt[1]:]...)
	}
	return fastCallTarget{server: e.Server, tool: e.Original, params: params}, true
}

// wireError is the JSON-RPC error a fast call answers err with: an
// upstream's own JSON-RPC error unchanged, anything else as the SDK server
// writes a handler's error.
func wireError(err error) *jsonrpc.Error {
	var wire *jsonrpc.Error
	if errors.As(err, &wire) {
		return wire
	}
	return &jsonrpc.Error{Message: err.Error()}
}

// writeResult answers request id with a raw result.
func (c *fastConn) writeResult(id jsonrpc.ID, res json.RawMessage) {
	var err error
	if w, ok := c.Connection.(rawResultWriter); ok {
		err = w.WriteRawResult(id, res)
	} else {
		err = c.Connection.Write(context.Background(), &jsonrpc.Response{ID: id, Result: res})
	}
	if err != nil {
		c.t.g.logger.Debug("writing a tools/call response failed", "error", err)
	}
}

// cancelledKey returns the idKey of the request a notifications/cancelled
// names, or false.
func cancelledKey(raw json.RawMessage) (string, bool) {
	var p cancelParams
	if json.Unmarshal(raw, &p) != nil || p.RequestID == nil {
		return "", false
	}
	id, err := jsonrpc.MakeID(p.RequestID)
	if err != nil {
		return "", false
	}
	return idKey(id), true
}

// cancel ends the fast call a notifications/cancelled names, if any.
func (c *fastConn) cancel(raw json.RawMessage) {
	key, ok := cancelledKey(raw)
	if !ok {
		return
	}
	c.mu.Lock()
	fc := c.inflight[key]
	c.mu.Unlock()
	if fc != nil {
		fc.cancel()
	}
}

// Close ends the reader, cancels the fast calls still running and waits
// for them.
func (c *fastConn) Close() error {
	err := c.Connection.Close()
	c.closeOnce.Do(func() { close(c.closed) })
	c.mu.Lock()
	for _, fc := range c.inflight {
		fc.cancel()
	}
	c.mu.Unlock()
	c.wg.Wait()
	return err
}

func idKey(id jsonrpc.ID) string {
	return string(transport.AppendID(nil, id))
}

// FastCalls is how many tools/call requests took the raw fast path.
func (g *Gateway) FastCalls() uint64 { return g.fastCalls.Load() }
