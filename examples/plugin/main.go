// Command mcpvisor-transport-tcp is an example of a third-party mcpvisor
// transport plugin: it reaches an MCP server that listens on a plain TCP
// port and speaks newline-delimited JSON-RPC (MCP's stdio framing) on each
// connection.
//
// It is deliberately small: a config struct, Configure that validates it,
// Open that dials, and shared.Serve. See README.md for how to build,
// checksum and configure it.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/mcpvisor/mcpvisor/shared"
)

// tcpConfig is the plugin block's `config` object, as JSON.
type tcpConfig struct {
	// Address is the server's host:port.
	Address string `json:"address"`
	// KeepAlive is the TCP keep-alive period, such as "30s"; empty means
	// the operating system's default.
	KeepAlive string `json:"keepalive"`
}

// tcpTransport implements shared.Transport.
type tcpTransport struct {
	address   string
	keepAlive time.Duration
}

// Configure is called once, before Open, with the block's config. Its error
// text is shown to the user as "plugin rejected its config: …", so it says
// what to fix.
func (t *tcpTransport) Configure(_ context.Context, raw []byte) error {
	var c tcpConfig
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields() // a typo should be an error, not ignored
	if err := dec.Decode(&c); err != nil {
		return fmt.Errorf("config: %v (the tcp transport takes: address, keepalive)", err)
	}
	if c.Address == "" {
		return errors.New(`config needs address, such as config = { address = "127.0.0.1:9000" }`)
	}
	if _, _, err := net.SplitHostPort(c.Address); err != nil {
		return fmt.Errorf("address %q: %v", c.Address, err)
	}
	if c.KeepAlive != "" {
		d, err := time.ParseDuration(c.KeepAlive)
		if err != nil {
			return fmt.Errorf("keepalive %q: %v", c.KeepAlive, err)
		}
		t.keepAlive = d
	}
	t.address = c.Address
	return nil
}

// Open dials the server. ctx carries the host's connect_timeout. The
// returned connection frames one JSON-RPC message per line; when the server
// closes it, Recv returns io.EOF and mcpvisor reconnects by starting this
// plugin again.
func (t *tcpTransport) Open(ctx context.Context) (shared.Conn, error) {
	d := net.Dialer{KeepAlive: t.keepAlive}
	conn, err := d.DialContext(ctx, "tcp", t.address)
	if err != nil {
		return nil, err
	}
	return shared.NewLineConn(conn), nil
}

func main() {
	shared.Serve(&tcpTransport{})
}
