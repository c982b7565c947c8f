// Package shared is the contract between mcpvisor and its transport plugins.
//
// A transport plugin is a separate program, started by the host with
// HashiCorp go-plugin, that knows how to reach an MCP server the host cannot
// reach by itself: over a Unix socket, a WebSocket, a serial line, a message
// bus. The plugin moves JSON-RPC messages; the host does everything else
// (initialize, listing, calls, supervision, retries).
//
// A plugin author implements Transport and calls Serve from main:
//
//	func main() { shared.Serve(&myTransport{}) }
//
// Everything the host and a plugin must agree on lives in this package:
// Handshake, PluginMap, the Transport and Conn interfaces, and the gRPC glue
// that carries them across the process boundary. The wire protocol is
// described in transport.proto for authors who write plugins in other
// languages; Go authors never need it.
package shared

import (
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// PluginName is the name under which a transport is served and dispensed.
const PluginName = "transport"

// MaxFrameSize is the largest JSON-RPC frame, in bytes, either side of the
// gRPC stream accepts. Tool results carrying images or files can be large;
// gRPC's own 4 MiB default would cut them off.
const MaxFrameSize = 64 << 20

// Handshake is the go-plugin handshake shared by the host and every
// transport plugin.
//
// These values must never change. The magic cookie tells a plugin binary
// that mcpvisor started it (and lets the host refuse a program that is not
// an mcpvisor transport); the protocol version is the version of the
// Transport contract below. Changing either breaks every plugin ever built.
// A future incompatible contract gets a new protocol version served next to
// version 1 (go-plugin's VersionedPlugins), never a changed cookie.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "MCPVISOR_TRANSPORT_PLUGIN",
	MagicCookieValue: "b7c1d0e4-mcpvisor-transport-v1",
}

// PluginMap is the set of plugins a transport binary serves and the host
// dispenses: one, named PluginName. The host uses it as is; plugins use
// Serve, which fills in their implementation.
var PluginMap = map[string]plugin.Plugin{
	PluginName: &TransportPlugin{},
}

// Serve runs impl as a transport plugin. Call it from the plugin's main; it
// returns only when the host is done with the plugin, and exits the process
// with status 1 when the binary was not started by mcpvisor (the magic
// cookie is missing).
func Serve(impl Transport) {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         map[string]plugin.Plugin{PluginName: &TransportPlugin{Impl: impl}},
		GRPCServer:      newGRPCServer,
		Logger:          NewLogger(""),
	})
}

// newGRPCServer is go-plugin's default gRPC server with a receive limit
// large enough for MaxFrameSize frames.
func newGRPCServer(opts []grpc.ServerOption) *grpc.Server {
	return plugin.DefaultGRPCServer(append(opts, grpc.MaxRecvMsgSize(MaxFrameSize+1024)))
}

// processStderr is the plugin process's real standard error, captured
// before Serve runs: Serve replaces os.Stderr with a pipe that it forwards
// over gRPC, and a line written there just before the process dies is lost.
var processStderr = os.Stderr

// NewLogger returns a logger for use inside a plugin, whenever it is
// created. It writes JSON lines to the process's real stderr, which the
// host parses and writes into its own log under the server's name, at each
// line's level; the last lines also go into the host's error message when
// the plugin dies. The host's log level decides what is shown, so the
// plugin logs everything down to trace.
func NewLogger(name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       name,
		Level:      hclog.Trace,
		Output:     processStderr,
		JSONFormat: true,
	})
}
