package gateway

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/upstream"
)

// downstream is the client of a request served on ss, as the Backend sees
// it; nil when there is none.
func downstream(ss *mcp.ServerSession) upstream.Downstream {
	if ss == nil {
		return nil
	}
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

// CloseSessions ends every downstream session: their streams close and
// their clients see the connection end. The host does this on Close, so no
// session outlives the servers it reaches.
func (g *Gateway) CloseSessions() {
	for ss := range g.server.Sessions() {
		g.endAsks(ss) // the close waits for them
		ss.Close()
	}
}
