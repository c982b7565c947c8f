package upstream

/*
Design note: protocol-version bridging.

Each upstream session speaks the version mcpvisor negotiated with that
server, whatever version the downstream client that caused a request
speaks. A 2026-07-28 client (SEP-2575) sends its version, identity and
capabilities in every request's _meta; forwarded as they are to a session
on an older version, they make the go-sdk client announce 2026-07-28 in
the request's Mcp-Protocol-Version header, and a server that does not
speak it refuses the request (HTTP 400) — every request, for every
client. So on the way up those keys are dropped for older sessions; the
session's own version and client identity are mcpvisor's. Results need no
translation on the way down: the SDK server encodes them for the
downstream's version.

A 2026-07-28 session has no logging/setLevel: the log level travels in each
request's _meta. mcpvisor asks such an upstream for every level on every
request (as it sets "debug" on older sessions) and filters per downstream
client itself, by the level that client set or sent.
*/

import (
	"maps"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/wire"
)

// perRequestMetaKeys are the _meta keys of SEP-2575 (2026-07-28) that
// describe the client rather than the request.
var perRequestMetaKeys = []string{
	mcp.MetaKeyProtocolVersion,
	mcp.MetaKeyClientInfo,
	mcp.MetaKeyClientCapabilities,
	mcp.MetaKeyLogLevel,
}

// bridgeMeta returns a request's _meta as the session's version expects
// it: without the per-request client keys on a session older than
// 2026-07-28. meta itself is never modified.
func (sess *session) bridgeMeta(meta mcp.Meta) mcp.Meta {
	if sess.version() >= wire.Stateless {
		if !sess.logs() {
			return meta
		}
		out := maps.Clone(meta)
		if out == nil {
			out = mcp.Meta{}
		}
		out[mcp.MetaKeyLogLevel] = "debug"
		return out
	}
	if len(meta) == 0 {
		return meta
	}
	var out mcp.Meta
	for _, k := range perRequestMetaKeys {
		if _, ok := meta[k]; ok {
			if out == nil {
				out = maps.Clone(meta)
			}
			delete(out, k)
		}
	}
	if out == nil {
		return meta
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// version is the protocol version the session negotiated.
func (sess *session) version() string {
	if ir := sess.cs.InitializeResult(); ir != nil {
		return ir.ProtocolVersion
	}
	return ""
}

// logs reports whether the upstream offers log messages.
func (sess *session) logs() bool {
	ir := sess.cs.InitializeResult()
	return ir != nil && ir.Capabilities != nil && ir.Capabilities.Logging != nil
}
