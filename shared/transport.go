package shared

import (
	"context"
	"errors"
)

// Transport is what a transport plugin implements: a way to open JSON-RPC
// connections to one MCP server.
//
// The host starts one plugin process per connection attempt, calls
// Configure once, then Open once, and kills the process when the connection
// is no longer wanted (or restarts it when it died). A plugin therefore
// needs no reconnect logic of its own: when its connection breaks, it ends
// the Conn (Recv returns an error) and the host's supervisor takes over.
type Transport interface {
	// Configure receives the plugin block's `config` object, encoded as
	// JSON exactly as written in the host's HCL (an empty object when the
	// block has none). It returns an error when the configuration is
	// unusable; the host shows the error's text to the user as "plugin
	// rejected its config: <text>", so make it say what to fix.
	Configure(ctx context.Context, config []byte) error

	// Open connects to the MCP server. ctx bounds only the opening (it
	// carries the host's connect_timeout); the returned Conn lives until it
	// is closed or breaks. An error here ("connection refused") is a
	// failed connection attempt, retried by the host with backoff.
	Open(ctx context.Context) (Conn, error)
}

// Conn is one open connection to an MCP server. Each frame is exactly one
// JSON-RPC message (request, response or notification) as UTF-8 JSON, with
// no framing: the plugin adds and strips whatever its wire needs
// (newlines, WebSocket messages, length prefixes).
//
// Send and Recv are called from different goroutines at the same time, and
// Close may be called at any moment, concurrently with both and more than
// once.
type Conn interface {
	// Send writes one frame to the server.
	Send(ctx context.Context, frame []byte) error

	// Recv returns the next frame from the server. It returns io.EOF when
	// the server closed the connection cleanly, and another error when the
	// connection broke. Close must make a blocked Recv return.
	Recv(ctx context.Context) ([]byte, error)

	// Close closes the connection.
	Close() error
}

// ErrConfigRejected is wrapped by the host-side Configure when the plugin's
// Configure returned an error. Test for it with errors.Is.
var ErrConfigRejected = errors.New("plugin rejected its config")

// ErrConnClosed is returned by a closed Conn's Send and Recv.
var ErrConnClosed = errors.New("transport connection closed")
