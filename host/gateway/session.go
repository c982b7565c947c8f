package gateway

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type sessionKey struct{}

// withSession marks ctx as running on behalf of the downstream session ss.
func withSession(ctx context.Context, ss *mcp.ServerSession) context.Context {
	if ss == nil {
		return ctx
	}
	return context.WithValue(ctx, sessionKey{}, ss)
}

// Session returns the downstream session whose request ctx belongs to, or
// nil. A Backend uses it to route what an upstream sends back during the
// request — progress, log messages, sampling and elicitation requests — to
// the client that caused it.
func Session(ctx context.Context) *mcp.ServerSession {
	ss, _ := ctx.Value(sessionKey{}).(*mcp.ServerSession)
	return ss
}

// BroadcastLog sends an upstream log message that belongs to no request to
// every connected session; each session drops it unless its client asked
// for that level with logging/setLevel.
func (g *Gateway) BroadcastLog(ctx context.Context, msg *mcp.LoggingMessageParams) {
	for ss := range g.server.Sessions() {
		if err := ss.Log(ctx, msg); err != nil {
			g.logger.Debug("forwarding a log message failed", "error", err)
		}
	}
}
