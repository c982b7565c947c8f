// Command testpeer is the MCP server the transport plugins are tested
// against: a real process listening on a Unix socket, a TCP port or a
// WebSocket endpoint, serving a few tools on every accepted connection.
//
// Flags (one of):
//
//	-unix PATH   newline-delimited JSON-RPC on a Unix socket at PATH
//	-tcp ADDR    newline-delimited JSON-RPC on a TCP listener at ADDR
//	-ws ADDR     one JSON-RPC message per WebSocket text message, at
//	             ws://ADDR/ws (requests without the header "X-Test-Token:
//	             secret" are refused with 401 when -ws-token is set)
//
// Once listening it prints "listening <address>" on stdout, where address
// is the socket path, host:port, or ws:// URL.
//
//	-plugin      no listener: the test peer is itself an mcpvisor transport
//	             plugin, started by the host, and serves its tools in-process
//	             on every Open. It reads its standard input from the moment
//	             it starts, and adds the tool stdin {}, which reports what
//	             that read got as JSON text: {"bytes": N, "eof": true|false,
//	             "error": "…"}. A plugin started with the host's stdin would
//	             take the bytes of the host's MCP client.
//
// Tools: echo {text} returns text; add {a, b} returns the sum as text;
// pid {} returns the process id; sleep {ms} sleeps then says "slept".
//
// The server version is the variable version, which tests set with
// -ldflags "-X main.version=…" to build a binary with other content.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/net/websocket"

	"github.com/mcpvisor/mcpvisor/shared"
)

// version is the server version the peer reports.
var version = "1"

func main() {
	unixPath := flag.String("unix", "", "Unix socket path")
	tcpAddr := flag.String("tcp", "", "TCP listen address")
	wsAddr := flag.String("ws", "", "WebSocket listen address")
	wsToken := flag.String("ws-token", "", "required X-Test-Token header value for -ws")
	asPlugin := flag.Bool("plugin", false, "be a transport plugin serving the tools in-process")
	flag.Parse()
	log.SetPrefix("testpeer: ")
	log.SetFlags(0)

	switch {
	case *asPlugin:
		shared.Serve(&inProcess{stdin: readStdin()})
	case *unixPath != "":
		os.Remove(*unixPath)
		ln, err := net.Listen("unix", *unixPath)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("listening %s\n", *unixPath)
		serveStream(ln)
	case *tcpAddr != "":
		ln, err := net.Listen("tcp", *tcpAddr)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("listening %s\n", ln.Addr())
		serveStream(ln)
	case *wsAddr != "":
		ln, err := net.Listen("tcp", *wsAddr)
		if err != nil {
			log.Fatal(err)
		}
		ws := websocket.Server{Handler: serveWS, Handshake: func(*websocket.Config, *http.Request) error { return nil }}
		mux := http.NewServeMux()
		mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
			if *wsToken != "" && r.Header.Get("X-Test-Token") != *wsToken {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			ws.ServeHTTP(w, r)
		})
		fmt.Printf("listening ws://%s/ws\n", ln.Addr())
		log.Fatal(http.Serve(ln, mux))
	default:
		log.Fatal("one of -unix, -tcp, -ws is required")
	}
}

func newServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "testpeer", Version: version}, nil)
	type echoIn struct {
		Text string `json:"text"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Returns text.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			return text(in.Text), nil, nil
		})
	type addIn struct {
		A float64 `json:"a"`
		B float64 `json:"b"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "Adds a and b."},
		func(_ context.Context, _ *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, any, error) {
			return text(strconv.FormatFloat(in.A+in.B, 'f', -1, 64)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "pid", Description: "Returns the process id."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return text(strconv.Itoa(os.Getpid())), nil, nil
		})
	type sleepIn struct {
		Ms int `json:"ms"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "sleep", Description: "Sleeps ms milliseconds."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in sleepIn) (*mcp.CallToolResult, any, error) {
			select {
			case <-time.After(time.Duration(in.Ms) * time.Millisecond):
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
			return text("slept"), nil, nil
		})
	return s
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// serveStream serves newline-delimited JSON-RPC on every accepted
// connection, one MCP session each.
func serveStream(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go func() {
			ss, err := newServer().Connect(context.Background(), &mcp.IOTransport{Reader: c, Writer: c}, nil)
			if err != nil {
				log.Printf("connect: %v", err)
				c.Close()
				return
			}
			ss.Wait()
		}()
	}
}

// serveWS serves one MCP session over a WebSocket connection.
func serveWS(ws *websocket.Conn) {
	ss, err := newServer().Connect(context.Background(), wsTransport{ws}, nil)
	if err != nil {
		log.Printf("connect: %v", err)
		return
	}
	ss.Wait()
}

// wsTransport is an mcp.Transport over one WebSocket connection.
type wsTransport struct{ ws *websocket.Conn }

func (t wsTransport) Connect(context.Context) (mcp.Connection, error) {
	return &wsConn{ws: t.ws}, nil
}

type wsConn struct {
	ws   *websocket.Conn
	once sync.Once
}

func (c *wsConn) Read(context.Context) (jsonrpc.Message, error) {
	var b []byte
	if err := websocket.Message.Receive(c.ws, &b); err != nil {
		return nil, err
	}
	return jsonrpc.DecodeMessage(b)
}

func (c *wsConn) Write(_ context.Context, m jsonrpc.Message) error {
	b, err := jsonrpc.EncodeMessage(m)
	if err != nil {
		return err
	}
	return websocket.Message.Send(c.ws, string(b))
}

func (c *wsConn) Close() error {
	var err error
	c.once.Do(func() { err = c.ws.Close() })
	return err
}

func (c *wsConn) SessionID() string { return "" }

// stdinReport is what the plugin's read of its standard input got.
type stdinReport struct {
	mu    sync.Mutex
	bytes int64
	eof   bool
	err   error
}

// readStdin reads the process's standard input until it ends, from now on.
func readStdin() *stdinReport {
	r := &stdinReport{}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := os.Stdin.Read(buf)
			r.mu.Lock()
			r.bytes += int64(n)
			switch {
			case errors.Is(err, io.EOF):
				r.eof = true
			case err != nil:
				r.err = err
			}
			r.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return r
}

func (r *stdinReport) MarshalJSON() ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := struct {
		Bytes int64  `json:"bytes"`
		EOF   bool   `json:"eof"`
		Error string `json:"error,omitempty"`
	}{Bytes: r.bytes, EOF: r.eof}
	if r.err != nil {
		v.Error = r.err.Error()
	}
	return json.Marshal(v)
}

// inProcess is the transport of -plugin: every Open is a new session with
// an in-process server.
type inProcess struct {
	stdin *stdinReport
}

func (p *inProcess) Configure(_ context.Context, raw []byte) error {
	var c struct{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return fmt.Errorf("config: %v (the test peer takes none)", err)
	}
	return nil
}

func (p *inProcess) Open(context.Context) (shared.Conn, error) {
	s := newServer()
	mcp.AddTool(s, &mcp.Tool{Name: "stdin", Description: "Reports what the plugin read from its standard input."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			b, err := json.Marshal(p.stdin)
			if err != nil {
				return nil, nil, err
			}
			return text(string(b)), nil, nil
		})
	host, peer := net.Pipe()
	go func() {
		ss, err := s.Connect(context.Background(), &mcp.IOTransport{Reader: peer, Writer: peer}, nil)
		if err != nil {
			log.Printf("connect: %v", err)
			peer.Close()
			return
		}
		ss.Wait()
	}()
	return shared.NewLineConn(host), nil
}
