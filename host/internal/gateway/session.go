package gateway

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/limits"
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

/*
Design note: sessions at the cap.

The host bounds the HTTP sessions open at once (max_sessions). Refusing
every newcomer at the cap would let one client that opens sessions and
abandons them lock every other client out until the idle timeout closes
them, so a newcomer at the cap takes the place of the least recently used
idle session instead (AdmitSession). A session is idle when none of its
HTTP requests is being served: no POST in flight (a call, a list), no GET
stream open (a client listening for notifications and requests), no
DELETE. Its age is when its last request ended. Only when every session is
busy is the newcomer refused. The evicted session's client gets 404 on its
next request and, as the protocol says, initializes a new session.

The go-sdk's handler keeps its sessions to itself, so the gateway watches
the requests on their way in (sessionUses): by the Mcp-Session-Id header
of each request, and of the response that created the session.
*/

// sessionUse is what the gateway knows of one HTTP session's use.
type sessionUse struct {
	open int       // the session's requests being served
	last time.Time // when the last of them ended (created: when it began)
	seen uint64    // the last sweep that found the session still open
}

// sessionUses tracks the use of the HTTP sessions, by session id.
type sessionUses struct {
	mu      sync.Mutex // guards every field
	byID    map[string]*sessionUse
	closing int    // sessions being evicted, still counted by the server
	sweep   uint64 // the number of the last sweep
}

// opened records the session a request created.
func (u *sessionUses) opened(id string) {
	if id == "" {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.byID == nil {
		u.byID = map[string]*sessionUse{}
	}
	if _, ok := u.byID[id]; !ok {
		u.byID[id] = &sessionUse{last: time.Now()}
	}
}

// begin records a request of session id starting; it reports false for a
// session the gateway does not know (the handler answers it 404).
func (u *sessionUses) begin(id string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	a := u.byID[id]
	if a == nil {
		return false
	}
	a.open++
	return true
}

// end records a request of session id ending; deleted says the request
// ended the session.
func (u *sessionUses) end(id string, deleted bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	a := u.byID[id]
	if a == nil {
		return
	}
	a.open--
	a.last = time.Now()
	if deleted && a.open == 0 {
		delete(u.byID, id)
	}
}

// trackSessions wraps the session-based HTTP handler so that sessionUses
// sees every session's requests.
func (g *Gateway) trackSessions(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(sessionIDHeader)
		if id == "" {
			next.ServeHTTP(w, r)
			g.sessionUses.opened(w.Header().Get(sessionIDHeader))
			return
		}
		if g.sessionUses.begin(id) {
			defer g.sessionUses.end(id, r.Method == http.MethodDelete)
		}
		next.ServeHTTP(w, r)
	})
}

// sessionIDHeader carries the session id of the streamable HTTP transport.
const sessionIDHeader = "Mcp-Session-Id"

// AdmitSession makes room for one more downstream session when limit of
// them are open: it closes the HTTP session that has been idle the longest
// (see the design note above). It reports false, and closes nothing, when
// limit are open and none of them is idle.
func (g *Gateway) AdmitSession(limit int) bool {
	u := &g.sessionUses
	u.mu.Lock()
	open := g.Sessions() - u.closing
	if open < limit && len(u.byID) < 2*limit {
		u.mu.Unlock()
		return true
	}
	// Sweep: find the least recently used idle session, and forget the
	// sessions that closed on their own (idle timeout) meanwhile.
	u.sweep++
	var lru *mcp.ServerSession
	var lruAt time.Time
	for ss := range g.server.Sessions() {
		a := u.byID[ss.ID()]
		if a == nil {
			continue // stdio, stateless, or still initializing
		}
		a.seen = u.sweep
		if a.open == 0 && (lru == nil || a.last.Before(lruAt)) {
			lru, lruAt = ss, a.last
		}
	}
	for id, a := range u.byID {
		if a.seen != u.sweep && a.open == 0 {
			delete(u.byID, id)
		}
	}
	if open < limit {
		u.mu.Unlock()
		return true
	}
	if lru == nil {
		u.mu.Unlock()
		return false
	}
	delete(u.byID, lru.ID())
	u.closing++
	u.mu.Unlock()
	g.opts.LimitHits.Hit(limits.MaxSessions)
	g.logger.Info("idle downstream session closed to make room for a new one (max_sessions)",
		"max_sessions", limit, "idle_for", time.Since(lruAt).Round(time.Second))
	// Closed off the newcomer's request: Close waits for the session's
	// handlers, and one may still run for a request whose POST has gone
	// (its client disconnected mid-call).
	go func() {
		lru.Close()
		u.mu.Lock()
		u.closing--
		u.mu.Unlock()
	}()
	return true
}
