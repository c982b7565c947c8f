// Command mcpvisor-transport-unix is mcpvisor's transport plugin for MCP
// servers that listen on a Unix domain socket and speak newline-delimited
// JSON-RPC on each accepted connection (MCP's stdio framing over a socket).
//
// Configuration, in a server block:
//
//	plugin "unix" {
//	  command = "./bin/mcpvisor-transport-unix"
//	  config  = { socket = "/run/mcp/tools.sock" }
//	}
//
// socket is required. The plugin is started by mcpvisor; run by hand it
// only says that it is a plugin.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/mcpvisor/mcpvisor/shared"
)

// unixConfig is the plugin block's config object.
type unixConfig struct {
	// Socket is the path of the server's Unix socket.
	Socket string `json:"socket"`
}

// unixTransport dials the configured socket once per Open.
type unixTransport struct {
	socket string
}

func (t *unixTransport) Configure(_ context.Context, raw []byte) error {
	var c unixConfig
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return fmt.Errorf("config: %v (the unix transport takes: socket)", err)
	}
	if c.Socket == "" {
		return errors.New(`config needs socket, the path of the MCP server's Unix socket, such as config = { socket = "/run/mcp/tools.sock" }`)
	}
	t.socket = c.Socket
	return nil
}

func (t *unixTransport) Open(ctx context.Context) (shared.Conn, error) {
	if t.socket == "" {
		return nil, errors.New("not configured")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", t.socket)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("socket %s does not exist (is the server running?)", t.socket)
		}
		return nil, err
	}
	return shared.NewLineConn(conn), nil
}

func main() {
	shared.Serve(&unixTransport{})
}
