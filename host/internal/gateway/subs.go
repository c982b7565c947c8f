package gateway

/*
Design note: resource subscriptions.

The gateway shares one upstream subscription per URI among every downstream
session subscribed to it (subs), and remembers per session the URIs it holds
(sessionSubs). The upstream subscription is undone when the last subscriber
leaves: by resources/unsubscribe, by ending its subscriptions/listen stream
(2026-07-28), or by its session ending without a word. The go-sdk server
forgets the subscriptions of a session that ends without calling the
unsubscribe handler, so each session that subscribes gets a watcher that
waits for it to end and drops what it held (dropSession); without it, an
upstream subscription would outlive every client that wanted it and keep
an idle_timeout server awake for good.

A resource template matches any number of URIs, and each subscription costs
an upstream subscribe and entries here, so both are bounded before any
upstream call (docs/security.md): per session (MaxSessionSubscriptions) and
over the host (MaxSubscriptions, distinct URIs).

subMu is held across the upstream calls, as it always was: a subscribe that
raced an unsubscribe of the same URI could otherwise reach the upstream
after it, and lose the new subscriber's updates. Each upstream unsubscribe
is bounded by unsubscribeTimeout.
*/

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/limits"
)

// The default bounds on resource subscriptions (docs/security.md).
const (
	// DefaultMaxSessionSubscriptions bounds the URIs one downstream
	// session may be subscribed to at once.
	DefaultMaxSessionSubscriptions = 256
	// DefaultMaxSubscriptions bounds the distinct URIs subscribed to
	// upstream at once, over every downstream session.
	DefaultMaxSubscriptions = 10000
)

// unsubscribeTimeout bounds the upstream unsubscribe made on behalf of a
// downstream whose own request context has already ended.
const unsubscribeTimeout = 10 * time.Second

// subscribe forwards the first downstream subscription to a URI to the
// resource's server; later subscribers share it. Without that sharing, one
// client unsubscribing would silence the updates another still wants. A
// subscription past the session's or the host's bound is refused before
// any upstream call.
func (g *Gateway) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	uri := req.Params.URI
	// Decided here, not in the receiving middleware: a 2026-07-28
	// client subscribes inside its subscriptions/listen request, which the
	// go-sdk turns into calls of this handler that no middleware sees.
	if err := g.decideSubscription(ctx, req); err != nil {
		return err
	}
	server, ok := g.lookupResource(uri)
	if !ok {
		return invalidParams("unknown resource %q", uri)
	}
	ss := req.Session
	g.subMu.Lock()
	defer g.subMu.Unlock()
	mine := g.sessionSubs[ss]
	if mine[uri] {
		return nil // already subscribed; the upstream holds it
	}
	if max := g.maxSessionSubscriptions(); len(mine) >= max {
		g.opts.LimitHits.Hit(limits.MaxSubscriptions)
		return subscriptionRefused("subscribing to %q refused: this session is already subscribed to %d resources, the most one session may hold; unsubscribe from resources it no longer needs, then retry", uri, max)
	}
	subs := g.subs[uri]
	if len(subs) == 0 {
		if max := g.maxSubscriptions(); len(g.subs) >= max {
			g.opts.LimitHits.Hit(limits.MaxSubscriptions)
			g.logger.Warn("resource subscription refused: the host's subscriptions are at their bound", "uri", uri, "max", max)
			return subscriptionRefused("subscribing to %q refused: mcpvisor already holds subscriptions to %d distinct resources, the most it allows at once; unsubscribe from resources no longer needed, or retry once other clients have", uri, max)
		}
		if err := g.backend.Subscribe(ctx, server, req.Params); err != nil {
			return err
		}
		subs = map[*mcp.ServerSession]bool{}
		g.subs[uri] = subs
	}
	subs[ss] = true
	if mine == nil {
		mine = map[string]bool{}
		g.sessionSubs[ss] = mine
		go func() {
			ss.Wait()
			g.dropSession(ss)
		}()
	}
	mine[uri] = true
	return nil
}

// unsubscribe forwards to the resource's server when the last downstream
// subscriber of the URI leaves. A session that does not hold the URI
// changes nothing. When no server offers the URI any more there is nothing
// upstream to undo, so it succeeds and the go-sdk server drops the
// downstream subscription.
func (g *Gateway) unsubscribe(ctx context.Context, req *mcp.UnsubscribeRequest) error {
	g.subMu.Lock()
	defer g.subMu.Unlock()
	if !g.forget(req.Session, req.Params.URI) {
		return nil
	}
	// A 2026-07-28 client unsubscribes by ending its listen stream, so ctx
	// is already canceled here; the upstream must still hear about it.
	return g.unsubscribeUpstream(ctx, req.Params)
}

// dropSession forgets every subscription of a session that has ended and
// undoes upstream those it was the last subscriber of.
func (g *Gateway) dropSession(ss *mcp.ServerSession) {
	g.subMu.Lock()
	defer g.subMu.Unlock()
	for uri := range g.sessionSubs[ss] {
		if !g.forget(ss, uri) {
			continue
		}
		if err := g.unsubscribeUpstream(context.Background(), &mcp.UnsubscribeParams{URI: uri}); err != nil {
			g.logger.Info("undoing the upstream subscription of a client that went away failed", "uri", uri, "error", err)
		}
	}
	delete(g.sessionSubs, ss)
}

// forget removes ss from the subscribers of uri and reports whether it was
// the last one, so the upstream subscription is to be undone. g.subMu must
// be held.
func (g *Gateway) forget(ss *mcp.ServerSession, uri string) bool {
	mine := g.sessionSubs[ss]
	if !mine[uri] {
		return false
	}
	delete(mine, uri)
	if len(mine) == 0 {
		delete(g.sessionSubs, ss)
	}
	subs := g.subs[uri]
	delete(subs, ss)
	if len(subs) > 0 {
		return false
	}
	delete(g.subs, uri)
	return true
}

// unsubscribeUpstream undoes the upstream subscription to p.URI, with a
// context of its own bounded by unsubscribeTimeout. g.subMu must be held.
func (g *Gateway) unsubscribeUpstream(ctx context.Context, p *mcp.UnsubscribeParams) error {
	server, ok := g.lookupResource(p.URI)
	if !ok {
		g.logger.Debug("unsubscribe from a resource no server offers", "uri", p.URI)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unsubscribeTimeout)
	defer cancel()
	return g.backend.Unsubscribe(ctx, server, p)
}

func (g *Gateway) maxSessionSubscriptions() int {
	if g.opts.MaxSessionSubscriptions > 0 {
		return g.opts.MaxSessionSubscriptions
	}
	return DefaultMaxSessionSubscriptions
}

func (g *Gateway) maxSubscriptions() int {
	if g.opts.MaxSubscriptions > 0 {
		return g.opts.MaxSubscriptions
	}
	return DefaultMaxSubscriptions
}

// subscriptionRefused is the error of a subscription past a bound.
func subscriptionRefused(format string, args ...any) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: fmt.Sprintf(format, args...)}
}
