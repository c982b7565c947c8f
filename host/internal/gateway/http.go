package gateway

import (
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

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
		stateful := g.endingSessions(mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
			Logger:         logger,
			SessionTimeout: g.opts.SessionTimeout,
		}))
		tracked := g.trackSessions(stateful)
		// A 2026-07-28 request is its POST: when the client goes away the
		// request is over, and the upstream call made for it is cancelled
		// (a notifications/cancelled would reach no session).
		stateless := mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
			Logger:                       logger,
			Stateless:                    true,
			PropagateRequestCancellation: true,
		})
		g.httpHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if v := r.Header.Get("Mcp-Protocol-Version"); v >= wire.Stateless {
				stateless.ServeHTTP(w, r)
				return
			}
			tracked.ServeHTTP(w, r)
		})
	})
	return g.httpHandler
}
