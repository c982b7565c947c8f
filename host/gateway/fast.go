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
)

// RawBackend is a Backend that can also forward a tools/call without
// decoding it: params are the downstream's raw params with the original
// tool name, the result is the upstream's raw result.
type RawBackend interface {
	Backend
	CallToolRaw(ctx context.Context, server, tool string, params json.RawMessage) (json.RawMessage, error)
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
	t.fc = &fastConn{Connection: c, t: t, inflight: map[string]context.CancelFunc{}}
	return t.fc, nil
}

type fastConn struct {
	mcp.Connection
	t *fastTransport

	mu       sync.Mutex
	inflight map[string]context.CancelFunc // fast calls by request id
	wg       sync.WaitGroup
}

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
	// One decode of the top level: the name to route by, whether a
	// progress token needs the SDK path, and the fields to pass on.
	var m map[string]json.RawMessage
	if json.Unmarshal(req.Params, &m) != nil {
		return false
	}
	var name string
	if json.Unmarshal(m["name"], &name) != nil {
		return false
	}
	if meta, ok := m["_meta"]; ok {
		var mm map[string]json.RawMessage
		if json.Unmarshal(meta, &mm) != nil {
			return false
		}
		if _, ok := mm["progressToken"]; ok {
			return false
		}
	}
	e, ok := c.t.g.registry.LookupTool(name)
	if !ok {
		return false
	}
	params := req.Params
	if e.Original != name {
		m["name"], _ = json.Marshal(e.Original)
		b, err := json.Marshal(m)
		if err != nil {
			return false
		}
		params = b
	}

	c.t.g.fastCalls.Add(1)
	key := idKey(req.ID)
	cctx, cancel := context.WithCancel(withSession(context.WithoutCancel(ctx), ss))
	c.mu.Lock()
	c.inflight[key] = cancel
	c.mu.Unlock()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() {
			c.mu.Lock()
			delete(c.inflight, key)
			c.mu.Unlock()
			cancel()
		}()
		res, err := c.t.rb.CallToolRaw(cctx, e.Server, e.Original, params)
		resp := &jsonrpc.Response{ID: req.ID}
		switch {
		case err == nil:
			resp.Result = res
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
	cancel := c.inflight[idKey(id)]
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// Close cancels the fast calls still running and waits for them.
func (c *fastConn) Close() error {
	err := c.Connection.Close()
	c.mu.Lock()
	for _, cancel := range c.inflight {
		cancel()
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
