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
)

// RawBackend is a Backend that can also forward a tools/call without
// decoding it: params are the downstream's raw params with the original
// tool name, the result is the upstream's raw result. A backend may hand a
// successful result to early (when not nil) as soon as it has it, from
// another goroutine, before CallToolRaw returns that same result; early
// is called at most once and never for an error.
type RawBackend interface {
	Backend
	CallToolRaw(ctx context.Context, server, tool string, params json.RawMessage, early func(json.RawMessage)) (json.RawMessage, error)
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
	fc *fastConn
}

func (t *fastTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	t.fc = &fastConn{Connection: c, t: t, inflight: map[string]*fastCall{}}
	return t.fc, nil
}

type fastConn struct {
	mcp.Connection
	t *fastTransport

	mu       sync.Mutex
	inflight map[string]*fastCall // fast calls by request id
	wg       sync.WaitGroup
}

type fastCall struct{ cancel context.CancelFunc }

type cancelParams struct {
	RequestID any `json:"requestId"`
}

func (c *fastConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		if err != nil {
			return msg, err
		}
		req, ok := msg.(*jsonrpc.Request)
		if !ok {
			return msg, nil
		}
		if !req.IsCall() {
			if req.Method == "notifications/cancelled" {
				c.cancel(req.Params)
			}
			return msg, nil
		}
		if req.Method != "tools/call" || !c.take(ctx, req) {
			return msg, nil
		}
	}
}

// take starts req on the fast path, or returns false to leave it to the SDK.
func (c *fastConn) take(ctx context.Context, req *jsonrpc.Request) bool {
	ss := c.t.ss.Load()
	if ss == nil {
		return false
	}
	if ip := ss.InitializeParams(); ip == nil || ip.ProtocolVersion >= statelessProtocolVersion {
		return false
	}
	// One walk of the top level: the name to route by, and whether a
	// progress token needs the SDK path. Params are valid JSON (the
	// connection decoded them), and whatever else they hold passes on as
	// it came.
	params := req.Params
	nameAt, metaAt := [2]int{-1, -1}, [2]int{-1, -1}
	if !rawjson.Members(params, func(key string, start, end int) bool {
		switch key {
		case "name":
			nameAt = [2]int{start, end}
		case "_meta":
			metaAt = [2]int{start, end}
		}
		return true
	}) {
		return false
	}
	if nameAt[0] < 0 || params[nameAt[0]] != '"' {
		return false
	}
	name := rawjson.Unquote(params[nameAt[0]:nameAt[1]])
	if metaAt[0] >= 0 {
		meta := params[metaAt[0]:metaAt[1]]
		progress := false
		if string(meta) != "null" && !rawjson.Members(meta, func(key string, _, _ int) bool {
			progress = progress || key == "progressToken"
			return !progress
		}) {
			return false
		}
		if progress {
			return false
		}
	}
	e, ok := c.t.g.registry.LookupTool(name)
	if !ok {
		return false
	}
	if e.Original != name {
		// Splice the original name in place of the exposed one.
		q := rawjson.Quote(e.Original)
		p := make(json.RawMessage, 0, len(params)-(nameAt[1]-nameAt[0])+len(q))
		p = append(p, params[:nameAt[0]]...)
		p = append(p, q...)
		params = append(p, params[nameAt[1]:]...)
	}

	c.t.g.fastCalls.Add(1)
	key := idKey(req.ID)
	cctx, cancel := context.WithCancel(withSession(context.WithoutCancel(ctx), ss))
	fc := &fastCall{cancel: cancel}
	c.mu.Lock()
	c.inflight[key] = fc
	c.mu.Unlock()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
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
		// The result is written by whichever goroutine has it first: the
		// upstream's reader (early) or this one. delivered makes sure the
		// client never gets two responses to one request.
		var delivered atomic.Bool
		early := func(res json.RawMessage) {
			if delivered.CompareAndSwap(false, true) {
				c.writeResult(req.ID, res)
			}
		}
		res, err := c.t.rb.CallToolRaw(cctx, e.Server, e.Original, params, early)
		if !delivered.CompareAndSwap(false, true) {
			return
		}
		if err == nil {
			c.writeResult(req.ID, res)
			return
		}
		resp := &jsonrpc.Response{ID: req.ID}
		switch {
		case errors.Is(err, context.Canceled) && cctx.Err() != nil:
			return // the client canceled: no response, as the SDK does
		default:
			var wire *jsonrpc.Error
			if errors.As(err, &wire) {
				resp.Error = wire
			} else {
				// What the SDK server writes for a handler's error.
				resp.Error = &jsonrpc.Error{Message: err.Error()}
			}
		}
		if werr := c.Connection.Write(context.Background(), resp); werr != nil {
			c.t.g.logger.Debug("writing a tools/call response failed", "error", werr)
		}
	}()
	return true
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

// cancel ends the fast call a notifications/cancelled names, if any.
func (c *fastConn) cancel(raw json.RawMessage) {
	var p cancelParams
	if json.Unmarshal(raw, &p) != nil || p.RequestID == nil {
		return
	}
	id, err := jsonrpc.MakeID(p.RequestID)
	if err != nil {
		return
	}
	c.mu.Lock()
	fc := c.inflight[idKey(id)]
	c.mu.Unlock()
	if fc != nil {
		fc.cancel()
	}
}

// Close cancels the fast calls still running and waits for them.
func (c *fastConn) Close() error {
	err := c.Connection.Close()
	c.mu.Lock()
	for _, fc := range c.inflight {
		fc.cancel()
	}
	c.mu.Unlock()
	c.wg.Wait()
	return err
}

func idKey(id jsonrpc.ID) string {
	b, _ := json.Marshal(id.Raw())
	return string(b)
}

// FastCalls is how many tools/call requests took the raw fast path.
func (g *Gateway) FastCalls() uint64 { return g.fastCalls.Load() }
