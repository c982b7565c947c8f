// Package wire is mcpvisor's one JSON-RPC codec, used by the downstream
// (gateway) and the upstream (supervisor, transports) alike: it decodes a
// message's envelope without decoding its params or result, encodes a
// response or request around params and results that are already JSON, and
// frames messages as newline-delimited JSON over pipes.
//
// A proxy only needs a few members of each message — its id, its method, a
// call's tool name — so everything else travels as the bytes it came in.
// Only Valid validates: it is json.Valid in one pass (with the SDK's nesting
// limit). Callers check it first, once per message; on invalid input the
// walking functions return nonsense, never panic.
package wire
