// Command echo is an example MCP server whose tools exercise every shape of
// tool result and every way a call can go wrong, for use as an upstream in
// mcpvisor's default config and its integration and chaos tests.
//
// Tools (arguments are JSON object properties; * marks required ones):
//
//	echo          {text*: string}   text content equal to text (read-only)
//	add           {a*, b*: number}  structuredContent {"sum": a+b} and the same
//	                                JSON as text; has an output schema (read-only)
//	fail          {message*: string} a result with isError: true and message as text
//	jsonrpc_error {}                a JSON-RPC error: code -32042, message
//	                                "custom failure", data {"detail":"requested by jsonrpc_error"}
//	image         {}                image (1x1 PNG), audio (WAV), resource_link
//	                                and embedded resource content, with _meta on
//	                                the result and on every content block
//	sleep         {ms*: integer}    sleeps ms milliseconds, or until the call is
//	                                canceled, then says "slept <ms>ms"
//	pid           {}                the process id as text (read-only)
//	crash         {}                exits the process with code 3 mid-call
//	roots         {}                asks the client for roots/list; their URIs, one per line
//	progress      {steps*: integer, interval_ms: integer}
//	                                sends steps progress notifications with the
//	                                request's progress token, then "done <steps> steps"
//	extra<S>      {value: string}   only with -tools-suffix S
//
// Flags:
//
//	(none)                   serve over stdio
//	-http ADDR               serve streamable HTTP at /mcp on ADDR (e.g. 127.0.0.1:0)
//	-sse ADDR                serve the legacy SSE transport at /sse on ADDR
//	-session-ttl DUR         with -http, forget sessions idle for DUR (then HTTP 404)
//	-forget-sessions-signal  with -http or -sse, drop all sessions on SIGUSR1
//	-stateless               with -http, serve without sessions
//	-tools-suffix S          add the tool extra<S>
//
// Stderr carries one line per event a test may wait for: "echo server
// starting pid=N" at startup, "listening on http://HOST:PORT/mcp" once an HTTP
// listener is up, and "forgot N sessions" after SIGUSR1.
package main

import "github.com/mcpvisor/mcpvisor/examples/servers/internal/serve"

func main() {
	serve.Main("echo", newServer)
}
