package gateway

/*
Design note: asking a downstream client for its roots.

mcpvisor asks a session-based client that declared roots for them when it
initializes and whenever it says they changed (docs/proxy.md, "Roots").
Over streamable HTTP a request that belongs to no request of the client
travels on the client's standalone GET stream, and right after initialize
the client has usually not opened it yet: the go-sdk server refuses the
write at once ("stream not connected"). Such a session's roots stay
pending, and the client's next request asks again on its own POST stream,
where the question can always be delivered; that request goes on once
the client has answered (or rootsTimeout passed), so the roots are known
before it reaches an upstream. A client whose roots are still pending is
asked again on each request until one ask is delivered.

An outstanding ask must never hold a session open: the go-sdk server's
Close waits for every outgoing request to end. Each session's asks run
with a context of its own, cancelled when the client deletes the session
(HTTP DELETE), when the host closes the session, and when it ends.
*/

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/identity"
	"github.com/mcpvisor/mcpvisor/host/internal/wire"
)

// codeRejectedByTransport is the JSON-RPC code of the go-sdk's error for
// a message its transport could not deliver (no stream to write it to);
// the session itself is fine.
const codeRejectedByTransport = -32005

// sessionAsks is what the gateway tracks for one session's host→client
// requests. Its fields are guarded by Gateway.askMu.
type sessionAsks struct {
	ctx    context.Context // the asks' context, cancelled when the session goes
	cancel context.CancelFunc
	// rootsPending is set when asking for the roots could not be delivered:
	// the client's next request asks again.
	rootsPending bool
}

// asksOf returns the asks state of ss, creating it (and the watcher that
// forgets it when the session ends) on first use.
func (g *Gateway) asksOf(ss *mcp.ServerSession) *sessionAsks {
	g.askMu.Lock()
	defer g.askMu.Unlock()
	if a := g.asks[ss]; a != nil {
		return a
	}
	if g.asks == nil {
		g.asks = map[*mcp.ServerSession]*sessionAsks{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &sessionAsks{ctx: ctx, cancel: cancel}
	g.asks[ss] = a
	go func() {
		ss.Wait()
		g.endAsks(ss)
	}()
	return a
}

// endAsks cancels the host's outstanding requests to ss and forgets it.
func (g *Gateway) endAsks(ss *mcp.ServerSession) {
	g.askMu.Lock()
	a := g.asks[ss]
	delete(g.asks, ss)
	g.askMu.Unlock()
	if a != nil {
		a.cancel()
	}
}

// endAsksByID is endAsks for the HTTP session with the given id.
func (g *Gateway) endAsksByID(id string) {
	if id == "" {
		return
	}
	g.askMu.Lock()
	var gone []*mcp.ServerSession
	for ss := range g.asks {
		if ss.ID() == id {
			gone = append(gone, ss)
		}
	}
	g.askMu.Unlock()
	for _, ss := range gone {
		g.endAsks(ss)
	}
}

// wantsRoots reports whether ss is a session-based client that declared
// the roots capability, so mcpvisor asks it for its roots.
func (g *Gateway) wantsRoots(ss *mcp.ServerSession) bool {
	if g.opts.OnRoots == nil || ss == nil {
		return false
	}
	ip := ss.InitializeParams()
	return ip != nil && ip.ProtocolVersion < wire.Stateless && ip.Capabilities != nil &&
		ip.Capabilities.RootsV2 != nil
}

// askRoots asks ss for its roots with ctx (a request's context sends the
// question on that request's stream) and hands them to Options.OnRoots.
// The ask ends when ctx does, after rootsTimeout, or when the session
// goes. A question the transport could not deliver leaves the roots
// pending for the client's next request.
func (g *Gateway) askRoots(ctx context.Context, ss *mcp.ServerSession) {
	a := g.asksOf(ss)
	ctx, cancel := context.WithTimeout(ctx, rootsTimeout)
	defer cancel()
	stop := context.AfterFunc(a.ctx, cancel)
	defer stop()
	res, err := ss.ListRoots(ctx, &mcp.ListRootsParams{})
	var rejected *jsonrpc.Error
	undelivered := err != nil && errors.As(err, &rejected) && rejected.Code == codeRejectedByTransport
	g.askMu.Lock()
	a.rootsPending = undelivered
	g.askMu.Unlock()
	if err != nil {
		if undelivered {
			g.logger.Debug("the client cannot be asked for its roots yet; asking on its next request", "session", ss.ID(), "error", err)
		} else {
			g.logger.Debug("asking a client for its roots failed", "session", ss.ID(), "error", err)
		}
		return
	}
	g.opts.OnRoots(res.Roots)
}

// pendingRoots asks a client whose roots could not be asked for before
// (see the note at the top) on the stream of its request, before the
// request goes on.
func (g *Gateway) pendingRoots(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ss, ok := req.GetSession().(*mcp.ServerSession)
		if !ok || method == "initialize" || method == "ping" || strings.HasPrefix(method, "notifications/") {
			return next(ctx, method, req)
		}
		g.askMu.Lock()
		a := g.asks[ss]
		pending := a != nil && a.rootsPending
		if pending {
			a.rootsPending = false // one ask at a time
		}
		g.askMu.Unlock()
		if pending && g.wantsRoots(ss) {
			g.askRoots(ctx, ss)
		}
		return next(ctx, method, req)
	}
}

// endingSessions cancels the host's outstanding requests to a session its
// client deletes, before the go-sdk handler closes it: the close waits for
// them, and the client for the close. Only a DELETE the handler will
// carry out does that: one it refuses (an unsupported MCP-Protocol-Version,
// another subject's token) changes nothing.
func (g *Gateway) endingSessions(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			id := r.Header.Get(sessionIDHeader)
			v := r.Header.Get("Mcp-Protocol-Version")
			if (v == "" || slices.Contains(mcp.SupportedProtocolVersions(), v)) &&
				g.sessionUses.ownedBy(id, identity.FromContext(r.Context()).Caller()) {
				g.endAsksByID(id)
			}
		}
		next.ServeHTTP(w, r)
	})
}
