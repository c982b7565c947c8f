package gateway

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/limits"
	"github.com/mcpvisor/mcpvisor/host/internal/wire"
)

// Requests that declare wire.Stateless or a later version in the
// Mcp-Protocol-Version header are served statelessly; older clients get the
// session-based transport.
// HTTPHandler returns the handler for streamable HTTP (served at /mcp by
// the host, behind its ingress checks). It is the go-sdk's handler: it
// bounds request bodies, checks Content-Type, Accept and the protocol
// version header, rejects a non-loopback Host header on a loopback listener
// (DNS rebinding) and answers an unknown session id with 404. Clients
// speaking 2026-07-28 or later are served statelessly, older ones with
// sessions; a session idle for Options.SessionTimeout is closed, and the
// one idle the longest makes room for a new one at the cap (AdmitSession).
func (g *Gateway) HTTPHandler() http.Handler {
	g.httpOnce.Do(func() {
		getServer := func(*http.Request) *mcp.Server { return g.server }
		logger := newSlogLogger(g.logger.Named("http"))
		// Idle sessions are closed by the gateway's book (session.go),
		// which also sees the calls answered before the go-sdk handler.
		g.sessionUses.setTimeout(g.opts.SessionTimeout)
		stateful := g.endingSessions(mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
			Logger: logger,
		}))
		tracked := g.trackSessions(g.answerBytes(stateful))
		// A 2026-07-28 request is its POST: when the client goes away the
		// request is over, and the upstream call made for it is cancelled
		// (a notifications/cancelled would reach no session).
		stateless := mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
			Logger:                       logger,
			Stateless:                    true,
			PropagateRequestCancellation: true,
		})
		g.httpHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Header.Del(answerHeader) // only the gateway sets it
			if g.opts.WriteTimeout > 0 {
				w = g.newDeadlineWriter(w, r)
			}
			if id := r.Header.Get(sessionIDHeader); r.Method == http.MethodGet && id != "" {
				// The session's standalone stream, while it is open
				// (httpforward.go).
				g.standalone.open(id)
				defer g.standalone.close(id)
			}
			if r.Method == http.MethodPost {
				// The answers to this request are written by the time
				// ServeHTTP returns: their results are held until then.
				ctx, done := g.answers.open(r)
				defer done()
				r = r.WithContext(ctx)
			}
			if v := r.Header.Get("Mcp-Protocol-Version"); v >= wire.Stateless {
				stateless.ServeHTTP(w, r)
				return
			}
			tracked.ServeHTTP(w, r)
		})
	})
	return g.httpHandler
}

// answerHeader carries, on a POST the gateway's HTTP handler serves, the
// key of a context that ends once the answers to it have been written
// (answers). A client's own value is removed first.
const answerHeader = "Mcpvisor-Answer"

// answers maps the POSTs being served to the contexts that end when their
// answers have been written: the go-sdk runs a request's handler on a
// context of its session, which ends when the handler returns, before the
// answer is written; the request's headers are what reaches the handler of
// the HTTP request it came in.
type answers struct {
	mu   sync.Mutex
	seq  uint64
	byID map[string]context.Context
}

// open registers r, returning its context (marked with its key) and the
// function to call once r has been served.
func (a *answers) open(r *http.Request) (context.Context, func()) {
	ctx, cancel := context.WithCancel(r.Context())
	a.mu.Lock()
	if a.byID == nil {
		a.byID = map[string]context.Context{}
	}
	a.seq++
	key := strconv.FormatUint(a.seq, 10)
	a.byID[key] = ctx
	a.mu.Unlock()
	r.Header.Set(answerHeader, key)
	return ctx, func() {
		a.mu.Lock()
		delete(a.byID, key)
		a.mu.Unlock()
		cancel()
	}
}

// lookup returns the context of the POST whose headers h are, if any.
func (a *answers) lookup(h http.Header) (context.Context, bool) {
	key := h.Get(answerHeader)
	if key == "" {
		return nil, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	ctx, ok := a.byID[key]
	return ctx, ok
}

// deadlineWriter gives every write to a client a deadline: a client that
// does not read its answer within Options.WriteTimeout loses it, and the
// stream it was on (net/http closes the connection), and the bytes held
// for it are released (docs/security.md, "Bytes from upstream servers").
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	failed  sync.Once
	g       *Gateway
	r       *http.Request
}

func (g *Gateway) newDeadlineWriter(w http.ResponseWriter, r *http.Request) *deadlineWriter {
	return &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: g.opts.WriteTimeout, g: g, r: r}
}

func (w *deadlineWriter) arm() {
	// Unsupported only behind an embedder's writer that hides it.
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	w.arm()
	n, err := w.ResponseWriter.Write(p)
	if err != nil {
		w.fail(err)
	}
	return n, err
}

// FlushError is what http.ResponseController.Flush calls.
func (w *deadlineWriter) FlushError() error {
	w.arm()
	err := w.rc.Flush()
	if err != nil {
		w.fail(err)
	}
	return err
}

func (w *deadlineWriter) Flush() { _ = w.FlushError() }

func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *deadlineWriter) fail(err error) {
	w.failed.Do(func() {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			w.g.opts.LimitHits.Hit(limits.WriteTimeout)
			w.g.logger.Warn("client did not read its answer within write_timeout: the answer and its stream were dropped, and the connection closed",
				"write_timeout", w.timeout, "remote", w.r.RemoteAddr, "session", w.r.Header.Get("Mcp-Session-Id"))
			return
		}
		w.g.logger.Debug("writing to a client failed", "remote", w.r.RemoteAddr, "error", err)
	})
}
