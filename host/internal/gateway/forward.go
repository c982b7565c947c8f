package gateway

/*
Design note: forwarding calls on stdio (docs/proxy.md, "Results pass
through as bytes").

The go-sdk server decodes every request into typed params, runs it through
its middleware and handler queue, and encodes the typed result again. For a
proxy that is pure overhead on the hottest path, so on a stdio downstream
the gateway reads tools/call, resources/read and prompts/get requests off
the connection before the SDK server does and hands their params to the
Backend's Forward as bytes; the upstream's result goes back to the client
as bytes too, and its bytes stay counted against max_inflight_bytes until
they have been written. Everything else — initialize, lists,
notifications, calls with a progress token, clients on 2026-07-28 (whose
results the SDK server shapes) — goes to the SDK server as before. Both
paths run the same registry lookup and reach the same supervisor; only the
envelope handling differs.
*/

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/identity"
	"github.com/mcpvisor/mcpvisor/host/internal/policy"
	"github.com/mcpvisor/mcpvisor/host/internal/wire"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// resultWriter is a connection that can write a response around a result
// that is already JSON without re-encoding it (wire's line connection).
type resultWriter interface {
	WriteResult(ctx context.Context, id jsonrpc.ID, result json.RawMessage) error
}

// forwardingTransport wraps a downstream stdio transport so that tools/call
// requests skip the SDK server.
type forwardingTransport struct {
	mcp.Transport
	g *Gateway
	// ss is the SDK session serving this connection, set once Connect
	// has returned; until then every request goes to the SDK.
	ss atomic.Pointer[mcp.ServerSession]
}

func (t *forwardingTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &forwardingConn{Connection: c, t: t, calls: map[string]context.CancelFunc{}}, nil
}

// forwardingConn reads the downstream connection for the SDK server and
// takes the tools/call requests it can forward out of the stream, running
// each on a goroutine of its own.
type forwardingConn struct {
	mcp.Connection
	t *forwardingTransport

	mu     sync.Mutex
	calls  map[string]context.CancelFunc // forwarded calls in flight, by request id
	closed bool                          // no call starts after Close
	wg     sync.WaitGroup
}

type cancelParams struct {
	RequestID any `json:"requestId"`
}

// Read returns the next message that is not a forwarded call.
func (c *forwardingConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		if err != nil {
			return msg, err
		}
		req, ok := msg.(*jsonrpc.Request)
		if !ok {
			return msg, nil
		}
		switch {
		case !req.IsCall() && req.Method == "notifications/cancelled":
			c.cancel(req.Params) // the SDK session sees it too
		case req.Method == "tools/call" || req.Method == "resources/read" || req.Method == "prompts/get":
			if c.forward(req) {
				continue
			}
		}
		return msg, nil
	}
}

// forward starts req on the forwarding path and reports true, or reports
// false to leave req to the SDK server.
func (c *forwardingConn) forward(req *jsonrpc.Request) bool {
	ss := c.t.ss.Load()
	if ss == nil {
		return false
	}
	if ip := ss.InitializeParams(); ip == nil || ip.ProtocolVersion >= wire.Stateless {
		return false
	}
	target, ok := c.t.g.forwardTargetOf(req.Method, req.Params)
	if !ok {
		return false
	}
	key := idKey(req.ID)
	ctx, cancel := context.WithCancel(context.Background())
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		cancel()
		return true // the connection is gone: nobody to answer
	}
	c.calls[key] = cancel
	c.wg.Add(1)
	c.mu.Unlock()
	c.t.g.forwarded.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() {
			c.mu.Lock()
			delete(c.calls, key)
			c.mu.Unlock()
			cancel()
		}()
		c.run(ctx, ss, req.ID, req.Method, target)
	}()
	return true
}

// run makes one forwarded call and answers it.
func (c *forwardingConn) run(ctx context.Context, ss *mcp.ServerSession, id jsonrpc.ID, method string, target callTarget) {
	var res json.RawMessage
	var err error
	if e := c.t.g.policyEngine(); e != nil {
		// The caller of a stdio connection is the local user (policy.go).
		if perr := c.t.g.admit(ctx, e, e.Local(), ss, method, kindOf(method), target.exposed); perr != nil {
			err = perr
		}
		ctx = identity.NewContext(ctx, e.Local()) // for the audit line
	}
	if err == nil {
		res, err = c.t.g.backend.Forward(ctx, ss, target.server, method, target.tool, target.params)
	}
	if err == nil {
		if w, ok := c.Connection.(resultWriter); ok {
			err = w.WriteResult(context.Background(), id, res)
		} else {
			err = c.Connection.Write(context.Background(), &jsonrpc.Response{ID: id, Result: res})
		}
		if err != nil {
			c.t.g.logger.Debug("writing a response failed", "method", method, "error", err)
		}
		return
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return // the client canceled: no response, as the SDK does
	}
	// The backend's errors are JSON-RPC errors already (the host's
	// wireError); recovery.WireError is the one translation there is.
	resp := &jsonrpc.Response{ID: id, Error: recovery.WireError(err)}
	if werr := c.Connection.Write(context.Background(), resp); werr != nil {
		c.t.g.logger.Debug("writing a response failed", "method", method, "error", werr)
	}
}

// kindOf is what a forwarded method names, for policies.
func kindOf(method string) policy.Kind {
	switch method {
	case "resources/read":
		return policy.Resource
	case "prompts/get":
		return policy.Prompt
	}
	return policy.Tool
}

// callTarget is a tools/call the gateway forwards: the route, and the
// params to send upstream (naming the original tool).
type callTarget struct {
	server, tool string
	exposed      string // the name the client called, which policies match
	params       json.RawMessage
}

// forwardTargetOf decides whether a call of method with params can be forwarded:
// its tool is known and it carries no progress token (progress is
// forwarded by the SDK path). Params are valid JSON (the connection decoded
// them); one walk of their top level finds the name, and everything else
// passes on as it came.
//
// What the SDK server would refuse or read differently is left to it:
// params nested deeper than the SDK allows, and params whose "name" or
// "_meta" appears twice or in another case ("NAME"). The SDK decodes keys
// case-sensitively and re-encodes the params it forwards, so the upstream
// sees one name; forwarded as bytes, an upstream that matches keys
// case-insensitively (Go's encoding/json) could run a tool other than the
// one the registry allowed.
//
// Methods: tools/call, prompts/get (named by "name", renamed to the
// original) or resources/read (named by "uri", never renamed).
func (g *Gateway) forwardTargetOf(method string, params json.RawMessage) (callTarget, bool) {
	nameKey := "name"
	if method == "resources/read" {
		nameKey = "uri"
	}
	if wire.NestedDeeper(params, wire.MaxNesting) {
		return callTarget{}, false
	}
	nameAt, metaAt := [2]int{-1, -1}, [2]int{-1, -1}
	ambiguous := false
	if !wire.Members(params, func(key []byte, start, end int) bool {
		switch string(key) {
		case nameKey:
			ambiguous = ambiguous || nameAt[0] >= 0
			nameAt = [2]int{start, end}
		case "_meta":
			ambiguous = ambiguous || metaAt[0] >= 0
			metaAt = [2]int{start, end}
		default:
			ambiguous = ambiguous || bytes.EqualFold(key, []byte(nameKey)) || bytes.EqualFold(key, []byte("_meta"))
		}
		return !ambiguous
	}) || ambiguous {
		return callTarget{}, false
	}
	if nameAt[0] < 0 || params[nameAt[0]] != '"' {
		return callTarget{}, false
	}
	name := wire.Unquote(params[nameAt[0]:nameAt[1]])
	if metaAt[0] >= 0 {
		meta := params[metaAt[0]:metaAt[1]]
		progress := false
		if string(meta) != "null" && !wire.Members(meta, func(key []byte, _, _ int) bool {
			progress = progress || string(key) == "progressToken"
			return !progress
		}) {
			return callTarget{}, false
		}
		if progress {
			return callTarget{}, false
		}
	}
	var server, original string
	switch method {
	case "tools/call":
		e, ok := g.registry.LookupTool(name)
		if !ok {
			return callTarget{}, false
		}
		server, original = e.Server, e.Original
	case "prompts/get":
		e, ok := g.lookupPrompt(name)
		if !ok {
			return callTarget{}, false
		}
		server, original = e.Server, e.Original
	case "resources/read":
		s, ok := g.lookupResource(name)
		if !ok {
			return callTarget{}, false
		}
		server, original = s, name
	default:
		return callTarget{}, false
	}
	if original != name {
		// Splice the original name in place of the exposed one.
		q := wire.Quote(original)
		p := make(json.RawMessage, 0, len(params)-(nameAt[1]-nameAt[0])+len(q))
		p = append(p, params[:nameAt[0]]...)
		p = append(p, q...)
		params = append(p, params[nameAt[1]:]...)
	}
	return callTarget{server: server, tool: original, exposed: name, params: params}, true
}

// cancel ends the forwarded call a notifications/cancelled names, if any.
func (c *forwardingConn) cancel(raw json.RawMessage) {
	var p cancelParams
	if json.Unmarshal(raw, &p) != nil || p.RequestID == nil {
		return
	}
	id, err := jsonrpc.MakeID(p.RequestID)
	if err != nil {
		return
	}
	c.mu.Lock()
	cancel := c.calls[idKey(id)]
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// Close closes the connection, cancels the forwarded calls still running
// and waits for them.
func (c *forwardingConn) Close() error {
	err := c.Connection.Close()
	c.mu.Lock()
	c.closed = true
	for _, cancel := range c.calls {
		cancel()
	}
	c.mu.Unlock()
	c.wg.Wait()
	return err
}

func idKey(id jsonrpc.ID) string {
	return string(wire.AppendID(nil, id))
}

// Forwarded is how many calls skipped the SDK server: tools/call on stdio,
// and the calls of HTTP sessions answered as bytes (httpforward.go).
func (g *Gateway) Forwarded() uint64 { return g.forwarded.Load() }
