package gateway

/*
Design note: results pass through as bytes (docs/proxy.md, "Results pass
through as bytes").

The go-sdk server answers a request with the Result its handler returns,
encoded by its JSON-RPC layer (which does not escape HTML). Its typed
results — CallToolResult, ReadResourceResult, GetPromptResult — hold a
decoded copy of the upstream's answer, and their content types encode
themselves with json.Marshal, which writes every '<' as \u003c: a result
of '<' would leave mcpvisor six times larger than it came. So for
tools/call, resources/read and prompts/get on a session-based protocol
(2025-11-25 and older), the innermost middleware of the gateway answers
itself, with a Result whose encoding is the upstream's bytes (rawResult):
the SDK's JSON-RPC encoder copies them into its message as they are.
Everything before it (policies, the session book, roots) and after it (the
SDK's stream writing, its session, its cancellation) is unchanged.

Clients on 2026-07-28 keep the typed path: the SDK shapes their results
(resultType, the multi-round-trip input requests, serverInfo in _meta)
through unexported methods of its own result types.
*/

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/wire"
)

// rawResult is a result that is already JSON: the upstream's bytes.
type rawResult struct {
	mcp.ResultBase
	raw json.RawMessage
}

// MarshalJSON returns the upstream's bytes; encoding/json checks and
// copies them (without HTML escaping: the go-sdk's encoder has it off).
func (r *rawResult) MarshalJSON() ([]byte, error) { return r.raw, nil }

// passThrough answers tools/call, resources/read and prompts/get as bytes
// where it can (see the note at the top), and leaves everything else to
// the next handler.
func (g *Gateway) passThrough(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "tools/call", "resources/read", "prompts/get":
		default:
			return next(ctx, method, req)
		}
		ss, ok := req.GetSession().(*mcp.ServerSession)
		if !ok || g.registry == nil || needsInputBridge(ss) {
			return unescapedResult(next(ctx, method, req))
		}
		var server, name string
		var params any
		switch r := req.(type) {
		// A call with a progress token takes the typed path, which
		// registers the token, so that the upstream's progress reaches
		// this client.
		case *mcp.CallToolRequest:
			if r.Params == nil || r.Params.GetProgressToken() != nil {
				break
			}
			e, ok := g.registry.LookupTool(r.Params.Name)
			if !ok {
				if e, ok = g.registry.LookupDormant(r.Params.Name); !ok {
					e, ok = g.registry.LookupUnlisted(r.Params.Name)
				}
			}
			if !ok {
				break
			}
			p := *r.Params
			p.Name = e.Original
			server, name, params = e.Server, e.Original, &p
		case *mcp.ReadResourceRequest:
			if r.Params == nil || r.Params.GetProgressToken() != nil {
				break
			}
			if s, ok := g.lookupResource(r.Params.URI); ok {
				server, name, params = s, r.Params.URI, r.Params
			}
		case *mcp.GetPromptRequest:
			if r.Params == nil || r.Params.GetProgressToken() != nil {
				break
			}
			if e, ok := g.lookupPrompt(r.Params.Name); ok {
				p := *r.Params
				p.Name = e.Original
				server, name, params = e.Server, e.Original, &p
			}
		}
		if params == nil {
			return unescapedResult(next(ctx, method, req))
		}
		// The params are the client's, decoded by the SDK: small, and
		// encoded again here to name the original tool or prompt.
		raw, err := marshalNoEscape(params)
		if err != nil {
			return unescapedResult(next(ctx, method, req))
		}
		extra := req.GetExtra()
		ctx = g.requestContext(ctx, extra)
		res, err := g.backend.Forward(ctx, downstream(ss), server, method, name, raw)
		if err != nil {
			return nil, err
		}
		return &rawResult{raw: res}, nil
	}
}

// unescaped is a typed result (one the go-sdk's handlers made, for a
// 2026-07-28 client or a call with a progress token) that encodes without
// HTML escaping: the go-sdk's content types escape '<', '>' and '&'
// (wire.MarshalResult). Its _meta is the result's own, so the go-sdk can
// still annotate it (serverInfo); the result type the go-sdk sets is set
// on the result before it reaches the middleware.
type unescaped struct {
	mcp.ResultBase
	res mcp.Result
}

func (u *unescaped) GetMeta() map[string]any  { return u.res.GetMeta() }
func (u *unescaped) SetMeta(m map[string]any) { u.res.SetMeta(m) }

func (u *unescaped) MarshalJSON() ([]byte, error) { return wire.MarshalResult(u.res) }

func unescapedResult(res mcp.Result, err error) (mcp.Result, error) {
	if err != nil || res == nil {
		return res, err
	}
	if _, ok := res.(json.Marshaler); !ok {
		return res, nil
	}
	if v := reflect.ValueOf(res); v.Kind() == reflect.Pointer && v.IsNil() {
		return res, nil
	}
	return &unescaped{res: res}, nil
}

// marshalNoEscape encodes v as json.Marshal does, without HTML escaping.
func marshalNoEscape(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
