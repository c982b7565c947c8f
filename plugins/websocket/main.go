// Command mcpvisor-transport-websocket is mcpvisor's transport plugin for
// MCP servers reached over WebSocket (ws:// or wss://): each WebSocket text
// message carries one JSON-RPC message, in both directions.
//
// Configuration, in a server block:
//
//	plugin "websocket" {
//	  command = "./bin/mcpvisor-transport-websocket"
//	  config  = {
//	    url          = "wss://mcp.example.com/ws"
//	    headers      = { Authorization = "Bearer ${env("WS_TOKEN")}" }
//	    subprotocols = ["mcp"]                  # optional
//	    origin       = "https://mcp.example.com" # optional; default from url
//	  }
//	}
//
// The client is golang.org/x/net/websocket: it is already in mcpvisor's
// module graph, needs no other dependency, and covers what MCP needs
// (text messages, ping/pong, close, TLS, custom headers).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"

	"golang.org/x/net/websocket"

	"github.com/mcpvisor/mcpvisor/shared"
)

// wsConfig is the plugin block's config object.
type wsConfig struct {
	// URL is the server's ws:// or wss:// endpoint.
	URL string `json:"url"`
	// Headers are sent with the opening handshake (Authorization, …).
	Headers map[string]string `json:"headers"`
	// Subprotocols are offered in Sec-WebSocket-Protocol.
	Subprotocols []string `json:"subprotocols"`
	// Origin is the Origin header; it defaults to the URL's http(s) origin.
	Origin string `json:"origin"`
}

// wsTransport dials the configured endpoint once per Open.
type wsTransport struct {
	cfg *websocket.Config
}

func (t *wsTransport) Configure(_ context.Context, raw []byte) error {
	var c wsConfig
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return fmt.Errorf("config: %v (the websocket transport takes: url, headers, subprotocols, origin)", err)
	}
	if c.URL == "" {
		return errors.New(`config needs url, the server's WebSocket endpoint, such as config = { url = "ws://127.0.0.1:8080/ws" }`)
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		return fmt.Errorf("url %q: %v", c.URL, err)
	}
	if u.Scheme != "ws" && u.Scheme != "wss" {
		return fmt.Errorf("url %q: the scheme must be ws or wss, not %q", c.URL, u.Scheme)
	}
	origin := c.Origin
	if origin == "" {
		scheme := "http"
		if u.Scheme == "wss" {
			scheme = "https"
		}
		origin = scheme + "://" + u.Host
	}
	cfg, err := websocket.NewConfig(c.URL, origin)
	if err != nil {
		return fmt.Errorf("url %q / origin %q: %v", c.URL, origin, err)
	}
	cfg.Protocol = c.Subprotocols
	cfg.Header = http.Header{}
	for k, v := range c.Headers {
		cfg.Header.Set(k, v)
	}
	t.cfg = cfg
	return nil
}

func (t *wsTransport) Open(ctx context.Context) (shared.Conn, error) {
	if t.cfg == nil {
		return nil, errors.New("not configured")
	}
	ws, err := t.cfg.DialContext(ctx)
	if err != nil {
		return nil, describeDialError(err)
	}
	ws.MaxPayloadBytes = shared.MaxFrameSize
	return &wsConn{ws: ws}, nil
}

// describeDialError unwraps x/net/websocket's DialError, whose text
// ("websocket.Dial ws://…: …") would repeat the URL with any credentials in
// it.
func describeDialError(err error) error {
	var de *websocket.DialError
	if errors.As(err, &de) && de.Err != nil {
		return fmt.Errorf("websocket handshake with %s failed: %w", redactURL(de.Config.Location), de.Err)
	}
	return err
}

func redactURL(u *url.URL) string {
	if u == nil {
		return "?"
	}
	c := *u
	c.User = nil
	c.RawQuery = ""
	return c.String()
}

// wsConn is one WebSocket connection: one text message per frame.
type wsConn struct {
	ws        *websocket.Conn
	closeOnce sync.Once
}

func (c *wsConn) Send(ctx context.Context, frame []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// Message.Send of a string sends a text frame and takes the
	// connection's write lock, so concurrent Sends are safe.
	return websocket.Message.Send(c.ws, string(frame))
}

func (c *wsConn) Recv(ctx context.Context) ([]byte, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var msg []byte
		if err := websocket.Message.Receive(c.ws, &msg); err != nil {
			return nil, err // io.EOF on a clean close
		}
		if len(bytes.TrimSpace(msg)) > 0 {
			return msg, nil
		}
	}
}

func (c *wsConn) Close() error {
	var err error
	c.closeOnce.Do(func() { err = c.ws.Close() })
	return err
}

func main() {
	shared.Serve(&wsTransport{})
}
