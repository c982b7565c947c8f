package gateway

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/identity"
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

The host bounds the HTTP sessions open at once (max_sessions) and the
sessions of one subject (max_sessions_per_subject). Refusing every
newcomer at the cap would let one client that opens sessions and abandons
them lock every other client out until the idle timeout closes them, so a
newcomer at the cap takes the place of an idle session instead
(AdmitSession): one of the subject with the most sessions, the least
recently used of those. A session is idle when none of its HTTP requests
is being served: no POST in flight (a call, a list), no GET stream open (a
client listening for notifications and requests), no DELETE. Its age is
when its last request ended. Only when every session is busy is the
newcomer refused. A subject at its own cap makes room with its own idle
sessions only, never another's; with none idle it is refused, and every
other subject still gets sessions. The evicted session's client gets 404
on its next request and, as the protocol says, initializes a new session.

The go-sdk's handler keeps its sessions to itself, so the gateway keeps
its own book (sessionUses): an entry is made when the session's
initialize reaches the gateway's receiving middleware (which knows the
*mcp.ServerSession and its subject), and removed only when that session's
connection has really ended (ServerSession.Wait returns) — never because
of what a request asked: a DELETE the handler refuses (a bad
MCP-Protocol-Version, another subject's token) leaves the session and its
entry as they were. Each HTTP request with a session id counts as in
flight on its entry while it is served. A session the go-sdk lists with
an id but the book does not know (one whose initialize is still on its
way) can still be evicted, after every idle session it knows.
*/

// sessionUse is what the gateway knows of one HTTP session.
type sessionUse struct {
	ss      *mcp.ServerSession
	owner   string      // the subject that opened it (identity.Subject.Caller)
	open    int         // the session's requests being served
	last    time.Time   // when the last of them ended (created: when it began)
	created time.Time   // when its initialize arrived
	closing bool        // being evicted: no longer counted for its owner
	posts   int         // the session's POSTs being served
	idle    *time.Timer // closes the session once idle for the timeout
}

// sessionUses tracks the HTTP sessions and their use.
type sessionUses struct {
	mu      sync.Mutex             // guards every field
	byID    map[string]*sessionUse // by session id
	byOwner map[string]int         // sessions per owner, those being evicted left out
	closing int                    // sessions being evicted, still counted by the server
	// timeout closes a session that has had no POST in flight for this
	// long (Options.SessionTimeout; zero: never). The gateway keeps this
	// timer, not the go-sdk's handler: a call answered as bytes
	// (httpforward.go) never reaches the handler, whose own timer would
	// close a busy session. As the go-sdk's, it runs from the session's
	// creation and pauses while a POST is served.
	timeout time.Duration
}

// opened records the HTTP session ss, opened by owner, whose initialize
// is being served; it is forgotten when the session's connection ends.
// It reports whether ss was new to the book.
func (u *sessionUses) opened(ss *mcp.ServerSession, owner string) bool {
	id := ss.ID()
	if id == "" {
		return false // stdio, in-memory, or a stateless request
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.byID == nil {
		u.byID, u.byOwner = map[string]*sessionUse{}, map[string]int{}
	}
	if _, ok := u.byID[id]; ok {
		return false
	}
	now := time.Now()
	a := &sessionUse{ss: ss, owner: owner, last: now, created: now}
	if u.timeout > 0 {
		a.idle = time.AfterFunc(u.timeout, func() { u.expire(id, a) })
	}
	u.byID[id] = a
	u.byOwner[owner]++
	return true
}

// openedAt returns when the session id was opened, and whether the book
// knows it.
func (u *sessionUses) openedAt(id string) (time.Time, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if a := u.byID[id]; a != nil {
		return a.created, true
	}
	return time.Time{}, false
}

func (u *sessionUses) setTimeout(d time.Duration) {
	u.mu.Lock()
	u.timeout = d
	u.mu.Unlock()
}

// expire closes the session a (of id) that has been idle for the timeout,
// unless a POST of its is being served.
func (u *sessionUses) expire(id string, a *sessionUse) {
	u.mu.Lock()
	idle := u.byID[id] == a && a.posts == 0
	u.mu.Unlock()
	if idle {
		a.ss.Close()
	}
}

// closed forgets the session id once its connection ended.
func (u *sessionUses) closed(id string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	a := u.byID[id]
	if a == nil {
		return
	}
	delete(u.byID, id)
	if a.idle != nil {
		a.idle.Stop()
	}
	if !a.closing {
		u.uncount(a.owner)
	}
}

// uncount takes one session off owner's count. u.mu must be held.
func (u *sessionUses) uncount(owner string) {
	if u.byOwner[owner]--; u.byOwner[owner] <= 0 {
		delete(u.byOwner, owner)
	}
}

// ownedBy reports whether the session id is in the book and was opened by
// caller.
func (u *sessionUses) ownedBy(id, caller string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	a := u.byID[id]
	return a != nil && a.owner == caller
}

// session returns the session id, if the book knows it, is not being
// evicted and was opened by caller.
func (u *sessionUses) session(id, caller string) (*mcp.ServerSession, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	a := u.byID[id]
	if a == nil || a.closing || a.owner != caller {
		return nil, false
	}
	return a.ss, true
}

// begin records a request of session id starting (a POST: post); it
// reports false for a session the gateway does not know (the handler
// answers it 404).
func (u *sessionUses) begin(id string, post bool) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	a := u.byID[id]
	if a == nil {
		return false
	}
	a.open++
	if post {
		if a.posts++; a.posts == 1 && a.idle != nil {
			a.idle.Stop()
		}
	}
	return true
}

// end records a request of session id ending. What the request asked
// (a DELETE) does not matter: the entry goes when the session closes.
func (u *sessionUses) end(id string, post bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	a := u.byID[id]
	if a == nil {
		return
	}
	a.open--
	a.last = time.Now()
	if post {
		if a.posts--; a.posts == 0 && a.idle != nil {
			a.idle.Reset(u.timeout)
		}
	}
}

// sessionBook is the receiving middleware that enters each HTTP session
// into sessionUses when its initialize arrives, with the subject that
// opened it, and forgets it when its connection ends.
func (g *Gateway) sessionBook(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "initialize" {
			if ss, ok := req.GetSession().(*mcp.ServerSession); ok && g.sessionUses.opened(ss, callerOf(ctx, req)) {
				// The initialize that creates the session (its POST has no
				// session id yet) is the session's request in flight until
				// that POST ends: trackSessions ends it by the response's
				// session id.
				if extra := req.GetExtra(); extra != nil && extra.Header != nil && extra.Header.Get(sessionIDHeader) == "" {
					g.sessionUses.begin(ss.ID(), true)
				}
				go func() {
					ss.Wait()
					g.sessionUses.closed(ss.ID())
				}()
			}
		}
		return next(ctx, method, req)
	}
}

// callerOf names the caller of an HTTP request for the per-subject bounds:
// the subject the ingress established, "anonymous" without one.
func callerOf(ctx context.Context, req mcp.Request) string {
	if extra := req.GetExtra(); extra != nil && extra.TokenInfo != nil {
		if s, ok := extra.TokenInfo.Extra[identity.TokenInfoKey].(*identity.Subject); ok && s != nil {
			return s.Caller()
		}
	}
	return identity.FromContext(ctx).Caller()
}

// trackSessions wraps the session-based HTTP handler so that sessionUses
// sees every session's requests.
func (g *Gateway) trackSessions(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(sessionIDHeader)
		if id == "" {
			next.ServeHTTP(w, r)
			// The initialize that created a session counted as its request
			// in flight (sessionBook).
			if created := w.Header().Get(sessionIDHeader); created != "" {
				g.sessionUses.end(created, true)
			}
			return
		}
		post := r.Method == http.MethodPost
		if g.sessionUses.begin(id, post) {
			defer g.sessionUses.end(id, post)
		}
		next.ServeHTTP(w, r)
	})
}

// sessionIDHeader carries the session id of the streamable HTTP transport.
const sessionIDHeader = "Mcp-Session-Id"

// Errors of AdmitSession.
var (
	// ErrSessionsBusy: max_sessions are open and every one is busy.
	ErrSessionsBusy = errors.New("every session is busy")
	// ErrSubjectSessions: the subject has max_sessions_per_subject
	// sessions open and every one of them is busy.
	ErrSubjectSessions = errors.New("the subject's sessions are all busy")
)

// AdmitSession makes room for one more downstream session of owner (an
// identity.Subject.Caller) when limit sessions are open, or perSubject of
// owner's (0: no per-subject bound). See the design note above: at its
// own cap a subject's least recently used idle session makes room, else
// ErrSubjectSessions; at the host's cap an idle session of the subject
// with the most sessions does, else ErrSessionsBusy. Nothing is closed
// when it returns an error.
func (g *Gateway) AdmitSession(limit, perSubject int, owner string) error {
	u := &g.sessionUses
	u.mu.Lock()
	if perSubject > 0 && u.byOwner[owner] >= perSubject {
		victim := u.idlest(func(a *sessionUse) bool { return a.owner == owner })
		if victim == nil {
			u.mu.Unlock()
			return ErrSubjectSessions
		}
		g.evict(victim, "max_sessions_per_subject", perSubject)
		return nil
	}
	open := g.Sessions() - u.closing
	if open < limit {
		u.mu.Unlock()
		return nil
	}
	most := 0
	for _, n := range u.byOwner {
		most = max(most, n)
	}
	// The subject with the most sessions gives one up first; among
	// subjects with as many, the idlest session goes.
	for n := most; n > 0; n-- {
		if victim := u.idlest(func(a *sessionUse) bool { return u.byOwner[a.owner] == n }); victim != nil {
			g.evict(victim, "max_sessions", limit)
			return nil
		}
	}
	// A session the book does not know (its initialize is on its way).
	for ss := range g.server.Sessions() {
		if id := ss.ID(); id != "" && u.byID[id] == nil {
			g.evict(&sessionUse{ss: ss, owner: "", last: time.Now()}, "max_sessions", limit)
			return nil
		}
	}
	u.mu.Unlock()
	return ErrSessionsBusy
}

// idlest is the least recently used idle session of the book that pick
// accepts, nil when none. u.mu must be held.
func (u *sessionUses) idlest(pick func(*sessionUse) bool) *sessionUse {
	var lru *sessionUse
	for _, a := range u.byID {
		if a.open == 0 && !a.closing && pick(a) && (lru == nil || a.last.Before(lru.last)) {
			lru = a
		}
	}
	return lru
}

// evict closes the session of a to make room under the bound named limit
// (of value n). g.sessionUses.mu must be held; evict unlocks it.
func (g *Gateway) evict(a *sessionUse, limit string, n int) {
	u := &g.sessionUses
	if u.byID[a.ss.ID()] == a {
		a.closing = true
		u.uncount(a.owner)
	}
	u.closing++
	u.mu.Unlock()
	g.opts.LimitHits.Hit(limits.MaxSessions)
	g.logger.Info("idle downstream session closed to make room for a new one", "limit", limit, limit, n,
		"idle_for", time.Since(a.last).Round(time.Second))
	// Closed off the newcomer's request: Close waits for the session's
	// handlers, and one may still run for a request whose POST has gone
	// (its client disconnected mid-call).
	go func() {
		a.ss.Close()
		u.mu.Lock()
		u.closing--
		u.mu.Unlock()
	}()
}
