// Package serve runs an example MCP server over the transport its command-line
// flags choose: stdio (the default), streamable HTTP, or the legacy SSE
// transport.
//
// The example servers in examples/servers are upstreams for mcpvisor's
// integration and chaos tests, so besides choosing a transport the flags give
// a test deterministic handles on the failures mcpvisor must absorb: sessions
// that expire (-session-ttl), sessions that all vanish at once on SIGUSR1
// (-forget-sessions-signal), and a tool set that changes across restarts
// (-tools-suffix).
//
// Everything a test waits for is written to stderr as one line:
//
//	<name> server starting pid=<pid>
//	listening on http://127.0.0.1:<port>/mcp     (or /sse with -sse)
//	listening on unix:<path>                     (with -unix)
//	forgot <n> sessions                          (after SIGUSR1)
package serve

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Paths at which the HTTP transports are served.
const (
	// StreamablePath is where -http serves the streamable HTTP transport.
	StreamablePath = "/mcp"
	// SSEPath is where -sse serves the legacy SSE transport; its message
	// endpoint is the same path with a sessionid query parameter.
	SSEPath = "/sse"
)

// shutdownGrace bounds how long a graceful HTTP shutdown waits for in-flight
// requests before connections are closed outright, so SIGTERM from a
// supervisor never leaves the process hanging on an open SSE stream.
const shutdownGrace = 2 * time.Second

// Flags holds the command-line options shared by the example servers.
type Flags struct {
	// HTTP is the address for streamable HTTP at /mcp; empty means not HTTP.
	HTTP string
	// SSE is the address for the legacy SSE transport at /sse; empty means
	// not SSE.
	SSE string
	// Unix is the path of a Unix socket on which every connection is a
	// client speaking newline-delimited JSON-RPC (stdio's framing), as
	// mcpvisor's unix transport plugin does; empty means not a socket.
	Unix string
	// SessionTTL closes streamable HTTP sessions idle this long; zero means
	// never. Later requests with the old session id get HTTP 404.
	SessionTTL time.Duration
	// ForgetSessionsSignal makes SIGUSR1 drop every HTTP session at once.
	ForgetSessionsSignal bool
	// Stateless serves streamable HTTP without sessions.
	Stateless bool
	// JSONResponse answers streamable HTTP POSTs with one JSON body
	// instead of an SSE stream.
	JSONResponse bool
	// ToolsSuffix, if set, adds a tool named "extra"+ToolsSuffix, so a test
	// can change the tool set across restarts.
	ToolsSuffix string
	// Big adds the tool "big" and the resources big://text/{size}, whose results
	// are as large as asked and written without HTML escaping (AddBig).
	Big bool
	// ExpireAfterCalls, if set, expires each session by message after
	// that many tools/call requests: every later request on it gets the
	// JSON-RPC error "Session expired" (ExpiredCode), as servers that
	// track sessions themselves answer (over stdio the session is the
	// process).
	ExpireAfterCalls int
}

// Register defines the flags on fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.HTTP, "http", "", "serve streamable HTTP at "+StreamablePath+" on `addr` (e.g. 127.0.0.1:0) instead of stdio")
	fs.StringVar(&f.SSE, "sse", "", "serve the legacy SSE transport at "+SSEPath+" on `addr` instead of stdio")
	fs.StringVar(&f.Unix, "unix", "", "serve newline-delimited JSON-RPC on each connection to a Unix socket at `path` instead of stdio")
	fs.DurationVar(&f.SessionTTL, "session-ttl", 0, "with -http, forget sessions idle for `duration` (later requests get 404)")
	fs.BoolVar(&f.ForgetSessionsSignal, "forget-sessions-signal", false, "with -http or -sse, drop all sessions on SIGUSR1")
	fs.BoolVar(&f.Stateless, "stateless", false, "with -http, serve without sessions")
	fs.BoolVar(&f.JSONResponse, "json-response", false, "with -http, answer requests with application/json instead of an SSE stream")
	fs.BoolVar(&f.Big, "big", false, "add the tool big and the resources big://text/{size}, whose results are size bytes of char (\"<\" by default), not HTML-escaped")
	fs.StringVar(&f.ToolsSuffix, "tools-suffix", "", "add a tool named extra`S` (letters, digits, _ . -)")
	fs.IntVar(&f.ExpireAfterCalls, "expire-after-calls", 0, "expire each session after `K` tools/call requests: later requests on it get the JSON-RPC error \"Session expired\"")
}

// Validate reports flag combinations that make no sense.
func (f *Flags) Validate() error {
	switch {
	case f.HTTP != "" && f.SSE != "", f.Unix != "" && (f.HTTP != "" || f.SSE != ""):
		return errors.New("-http, -sse and -unix are mutually exclusive")
	case f.ExpireAfterCalls < 0:
		return errors.New("-expire-after-calls must not be negative")
	case f.SessionTTL < 0:
		return errors.New("-session-ttl must not be negative")
	case f.SessionTTL > 0 && f.HTTP == "":
		return errors.New("-session-ttl requires -http")
	case f.Stateless && f.HTTP == "":
		return errors.New("-stateless requires -http")
	case f.JSONResponse && f.HTTP == "":
		return errors.New("-json-response requires -http")
	case f.SessionTTL > 0 && f.Stateless:
		return errors.New("-session-ttl has no effect with -stateless")
	case f.ForgetSessionsSignal && f.HTTP == "" && f.SSE == "":
		return errors.New("-forget-sessions-signal requires -http or -sse")
	}
	for _, r := range f.ToolsSuffix {
		if !validToolNameRune(r) {
			return fmt.Errorf("-tools-suffix %q: only letters, digits, '_', '.' and '-' are allowed", f.ToolsSuffix)
		}
	}
	return nil
}

func validToolNameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
		r == '_' || r == '-' || r == '.'
}

// Main is the whole main function of an example server: it parses the flags,
// logs the startup line, builds the server with newServer and serves it until
// the transport ends or SIGINT/SIGTERM arrives. It exits 2 on bad usage and 1
// on a runtime error.
func Main(name string, newServer func(*Flags) *mcp.Server) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var f Flags
	f.Register(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s [flags]\n\nServes the %s example MCP server over stdio unless -http or -sse is given.\n\n", name, name)
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "%s: unexpected arguments: %s\n", name, strings.Join(fs.Args(), " "))
		os.Exit(2)
	}
	if err := f.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(2)
	}

	fmt.Fprintf(os.Stderr, "%s server starting pid=%d\n", name, os.Getpid())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, newServer(&f), &f, os.Stderr); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		stop()
		os.Exit(1)
	}
}

// Run serves server over the transport that f selects until ctx is done or,
// for stdio, the client closes the stream. Status lines go to log.
func Run(ctx context.Context, server *mcp.Server, f *Flags, log io.Writer) error {
	if f.ExpireAfterCalls > 0 {
		server.AddReceivingMiddleware(ExpireSessions(f.ExpireAfterCalls))
	}
	switch {
	case f.HTTP != "":
		newHandler := func() sessionHandler {
			return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{
				Stateless:      f.Stateless,
				SessionTimeout: f.SessionTTL,
				JSONResponse:   f.JSONResponse,
			})
		}
		return serveHTTP(ctx, server, f, log, f.HTTP, StreamablePath, newHandler)
	case f.SSE != "":
		newHandler := func() sessionHandler {
			return mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return server }, nil)
		}
		return serveHTTP(ctx, server, f, log, f.SSE, SSEPath, newHandler)
	case f.Unix != "":
		return serveUnix(ctx, server, f.Unix, log)
	default:
		return server.Run(ctx, &mcp.StdioTransport{})
	}
}

// serveUnix serves each connection to a Unix socket at path as one client
// until ctx is done; then the socket is removed and the sessions closed.
func serveUnix(ctx context.Context, server *mcp.Server, path string, log io.Writer) error {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "listening on unix:%s\n", path)
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := ln.Accept()
		if err != nil {
			closeSessions(server.Sessions())
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Go(func() {
			defer conn.Close()
			ss, err := server.Connect(ctx, &mcp.IOTransport{Reader: conn, Writer: conn}, nil)
			if err != nil {
				return
			}
			ss.Wait()
		})
	}
}

// sessionHandler is an HTTP handler that owns MCP sessions; forgetting all of
// them means replacing it with a fresh one.
type sessionHandler = http.Handler

// swappableHandler serves through whichever session handler is current.
//
// Why a swap rather than closing sessions alone: a fresh handler has an empty
// session table, so every old session id is answered with 404 "session not
// found" at once, exactly like a server that restarted behind a load
// balancer. Closing the old sessions afterwards only releases their
// resources.
type swappableHandler struct {
	current atomic.Pointer[sessionHandler]
}

func (s *swappableHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.current.Load()).ServeHTTP(w, r)
}

func (s *swappableHandler) set(h sessionHandler) { s.current.Store(&h) }

func serveHTTP(ctx context.Context, server *mcp.Server, f *Flags, log io.Writer, addr, path string, newHandler func() sessionHandler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	var handler swappableHandler
	handler.set(newHandler())
	mux := http.NewServeMux()
	mux.Handle(path, &handler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	var wg sync.WaitGroup
	defer wg.Wait()
	sigCtx, stopSignals := context.WithCancel(ctx)
	defer stopSignals()
	if f.ForgetSessionsSignal {
		forget := notifyForgetSessions()
		wg.Go(func() {
			defer stopForgetSessions(forget)
			for {
				select {
				case <-sigCtx.Done():
					return
				case <-forget:
					if f.Stateless {
						fmt.Fprintln(log, "forgot 0 sessions (stateless)")
						continue
					}
					n := forgetSessions(server, &handler, newHandler)
					fmt.Fprintf(log, "forgot %d sessions\n", n)
				}
			}
		})
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	fmt.Fprintf(log, "listening on %s\n", URL(ln.Addr(), path))

	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	// Close sessions first: their open SSE streams would otherwise hold
	// Shutdown until the grace period ends.
	closeSessions(server.Sessions())
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		srv.Close()
	}
	<-serveErr
	return nil
}

// forgetSessions replaces the session handler and closes the sessions that
// existed before, returning how many it closed. Sessions are listed before
// the swap so that one created by the new handler in the meantime is never
// closed; a session opened on the old handler during the swap is unreachable
// anyway and is released when the process exits.
func forgetSessions(server *mcp.Server, handler *swappableHandler, newHandler func() sessionHandler) int {
	var old []*mcp.ServerSession
	for ss := range server.Sessions() {
		old = append(old, ss)
	}
	handler.set(newHandler())
	closeSessions(slices.Values(old))
	return len(old)
}

func closeSessions(sessions iter.Seq[*mcp.ServerSession]) {
	for ss := range sessions {
		ss.Close()
	}
}

// URL returns the http URL at which a listener on addr serves path. An
// unspecified listen address (":0", "0.0.0.0:0") is reported as loopback, the
// address a local client can reach on a dual-stack host.
func URL(addr net.Addr, path string) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String() + path
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + path
}
