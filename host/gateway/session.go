package gateway

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type sessionKey struct{}

// Downstream is the client a request came from, as a Backend sees it:
// what an upstream sends back during the request goes to it. Usually it is
// the request's *mcp.ServerSession; a fast HTTP call's is a wrapper that
// puts what belongs on the call's stream there. It has the method set of
// upstream.Downstream, so the host hands it on as it is without either
// package importing the other.
type Downstream interface {
	NotifyProgress(ctx context.Context, params *mcp.ProgressNotificationParams) error
	Log(ctx context.Context, params *mcp.LoggingMessageParams) error
	CreateMessage(ctx context.Context, params *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error)
	Elicit(ctx context.Context, params *mcp.ElicitParams) (*mcp.ElicitResult, error)
	ListRoots(ctx context.Context, params *mcp.ListRootsParams) (*mcp.ListRootsResult, error)
}

// withSession marks ctx as running on behalf of the downstream session ss.
func withSession(ctx context.Context, ss *mcp.ServerSession) context.Context {
	if ss == nil {
		return ctx
	}
	return withDownstream(ctx, ss)
}

func withDownstream(ctx context.Context, d Downstream) context.Context {
	return context.WithValue(ctx, sessionKey{}, d)
}

// Session returns the client whose request ctx belongs to, or nil. A
// Backend uses it to route what an upstream sends back during the request
// — progress, log messages, sampling and elicitation requests — to the
// client that caused it.
func Session(ctx context.Context) Downstream {
	d, _ := ctx.Value(sessionKey{}).(Downstream)
	return d
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
