package upstream

/*
Design note: the session (docs/design.md §4).

A session is one live connection, one generation of the server: connect
dials the link and runs the MCP handshake, monitor watches it die, serve
keeps it (listing the catalog again when the upstream says a list
changed) until it fails, and closeSession tears it down. The ready
session is published in sessions.cur (an atomic pointer), so the call
path reads it without a lock; a session's own fields are set before it is
published and never change after, except its atomic flags and counts
(proven, diedInCall, struck, hold).

Lock story: sessions has no lock. Its fields are atomic pointers that only
the run loop writes (connect publishes a session and its catalog, run
withdraws them when the session ends, park and awaitLogin withdraw the
catalog, retire withdraws a session it recycles and puts back one that
was not idle after all: idle.go); calls and Status read them lock-free. The generation a session
gets is numbered by the lifecycle (newGeneration).
*/

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/registry"
	"github.com/mcpvisor/mcpvisor/host/internal/transport"
	"github.com/mcpvisor/mcpvisor/host/internal/wire"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// sessions is what the run loop publishes of its sessions for everyone
// else: the ready session and the last listed catalog (see the design note
// above for its lock story).
type sessions struct {
	cur atomic.Pointer[session] // the ready session, nil when none
	// catalog is the last listed catalog; nil while none is published.
	catalog atomic.Pointer[registry.Catalog]
	// readOnly holds the names of tools that declared readOnlyHint, from
	// the catalog; read lock-free on the call path.
	readOnly atomic.Pointer[map[string]bool]
	// listed is set once a catalog was published: a server that never
	// listed its tools can be reached only by calls to names it might
	// have, which may start it (budget.remoteProbeDue).
	listed atomic.Bool
}

// neverListed reports whether the server never got ready (no catalog
// was ever published).
func (ss *sessions) neverListed() bool { return !ss.listed.Load() }

// ready returns the published session, nil when none.
func (ss *sessions) ready() *session { return ss.cur.Load() }

// live returns the published session if it is still alive, else nil.
func (ss *sessions) live() *session {
	if sess := ss.cur.Load(); sess != nil && !sess.isDead() {
		return sess
	}
	return nil
}

// newer returns the published session if it is alive and newer than gen,
// else nil.
func (ss *sessions) newer(gen uint64) *session {
	if sess := ss.live(); sess != nil && sess.gen > gen {
		return sess
	}
	return nil
}

// publish makes sess the ready session (nil: none).
func (ss *sessions) publish(sess *session) { ss.cur.Store(sess) }

// setCatalog publishes cat (nil withdraws it) and the read-only tools in it.
func (ss *sessions) setCatalog(cat *registry.Catalog) {
	ro := map[string]bool{}
	if cat != nil {
		for _, t := range cat.Tools {
			if t.Annotations != nil && t.Annotations.ReadOnlyHint {
				ro[t.Name] = true
			}
		}
	}
	ss.readOnly.Store(&ro)
	ss.catalog.Store(cat)
	if cat != nil {
		ss.listed.Store(true)
	}
}

// replayable reports whether tool declared readOnlyHint, which makes it
// safe to replay after the process died mid-call.
func (ss *sessions) replayable(tool string) bool {
	ro := ss.readOnly.Load()
	return ro != nil && (*ro)[tool]
}

// session is one live connection: a generation of the server.
type session struct {
	gen  uint64
	cs   *mcp.ClientSession
	link transport.Link
	// conn is the connection of a process-backed session (nil for HTTP);
	// it carries the calls Forward passes through as bytes (forward.go).
	conn *processConn
	// dead is closed by the session's monitor when the link or the session
	// ends; err then says why.
	dead chan struct{}
	err  error
	// proven is set by the first call that succeeds on the session, the
	// one that tells the supervisor (later ones need not wake it).
	proven atomic.Bool
	// diedInCall is set when the process died with a call in flight:
	// possibly that call's doing (a request that crashes the server), so
	// the death is not charged to the retry budget that parks the server
	// for every client; the breaker still counts it.
	diedInCall atomic.Bool
	// struck is set once the session's own failure has counted against
	// the breaker (strikeSession).
	struck atomic.Bool
	// hold counts the operations running on the session, for retiring it
	// at idle_timeout or max_lifetime (idle.go).
	hold sessionHold
	// Liveness (exec.go: executor.unanswered): lastAnswer is when the
	// server last answered an operation on the session (UnixNano; a
	// process-backed session also counts every message read, processConn's
	// lastRead); unanswered counts the calls in a row whose own timeout
	// passed with no answer since they were sent, lastUnanswered when the
	// last of them was counted.
	lastAnswer     atomic.Int64
	unanswered     atomic.Int32
	lastUnanswered atomic.Int64
	// checking is set while a call its caller gave up on is followed by
	// a ping (executor.abandoned).
	checking atomic.Bool
	// expired is set when the server expired the session (a 404 for it,
	// or an allow-listed message): not a failure of the server, so its
	// end spends no retry budget (run, lifecycle.go).
	expired atomic.Bool
}

// answeredAt is when the server last answered on the session (UnixNano;
// 0: never).
func (s *session) answeredAt() int64 {
	t := s.lastAnswer.Load()
	if s.conn != nil {
		t = max(t, s.conn.lastRead.Load())
	}
	return t
}

// suspected reports whether a call on the session reached its timeout
// with no answer from the server since (health.go): the server shows as
// suspect, not ready.
func (s *session) suspected() bool {
	last := s.lastUnanswered.Load()
	return last != 0 && s.answeredAt() < last
}

// connect makes one attempt: dial, initialize, list. It is bounded by
// connect_timeout and cut short by stop. cold is set for a start after an
// idle stop or at max_lifetime (idle.go): the server shows as starting,
// as at its first attempt, not as reconnecting.
func (s *Supervisor) connect(cold bool) (*session, error) {
	if cold || s.life.generation() == 0 {
		s.setState(StateStarting, time.Time{})
	} else {
		s.setState(StateReconnecting, time.Time{})
	}

	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ConnectTimeout)
	defer cancel()
	go func() {
		select {
		case <-s.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()

	link, err := s.opts.Dialer.Dial(ctx)
	if err != nil {
		return nil, err
	}
	version := s.cfg.ProtocolVersion
	if version == "" {
		version = wire.DefaultUpstream
	}
	opts := &mcp.ClientSessionOptions{ProtocolVersion: version}
	cs, conn, err := s.connectSession(ctx, link, opts)
	if err != nil {
		// Read why before closing: closing makes a live process exit too.
		linkErr, timedOut := link.Err(), errors.Is(ctx.Err(), context.DeadlineExceeded)
		cctx, ccancel := context.WithTimeout(context.Background(), closeGrace)
		link.Close(cctx)
		ccancel()
		switch {
		case timedOut:
			// First: the SDK closes the connection when Connect gives up,
			// and a server that exits on EOF may already be gone by now.
			err := fmt.Errorf("initialize: no answer within connect_timeout (%s)", s.cfg.ConnectTimeout)
			if st, ok := link.(interface{ Stray() string }); ok && st.Stray() != "" {
				err = fmt.Errorf("%w; the server wrote %q to stdout, which is for MCP messages only (a server must log to stderr)", err, recovery.Redact(st.Stray()))
			}
			return nil, err
		case linkErr != nil:
			return nil, fmt.Errorf("initialize: %w", linkErr)
		}
		// A process that died during startup shows as EOF first; its exit
		// status and stderr, known once it is reaped, say more.
		if linkErr := link.Err(); linkErr != nil {
			return nil, fmt.Errorf("initialize: %w", linkErr)
		}
		// So does an HTTP server's status for the first request, with its
		// URL and what to check (the go-sdk says only "Not Found").
		if ce, ok := link.(interface{ ConnectError() error }); ok && ce.ConnectError() != nil {
			return nil, fmt.Errorf("initialize: %w (%w)", ce.ConnectError(), err)
		}
		return nil, fmt.Errorf("initialize: %w", err)
	}

	gen := s.life.newGeneration()
	sess := &session{gen: gen, cs: cs, link: link, conn: conn, dead: make(chan struct{})}
	go s.monitor(sess)

	cat, err := s.list(ctx, cs)
	if err != nil {
		s.closeSession(sess)
		return nil, fmt.Errorf("listing tools, resources and prompts: %w", err)
	}
	if ir := cs.InitializeResult(); ir != nil && ir.Capabilities != nil && ir.Capabilities.Logging != nil && ir.ProtocolVersion < wire.Stateless {
		// Ask for everything; each downstream session filters by the level
		// its client set, as the go-sdk server does for its own logs. (A
		// 2026-07-28 session is asked per request: bridge.go.)
		if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
			s.logger.Debug("logging/setLevel on the upstream failed", "error", err)
		}
	}
	s.sessions.publish(sess)
	s.budget.breaker.Reset()
	// The server runs again: what failed before is past (status shows no
	// last error for a ready server).
	s.life.clearError()
	s.publishCatalog(cat)
	s.setState(StateReady, time.Time{})
	s.logger.Info("server ready", "generation", gen, "tools", len(cat.Tools),
		"resources", len(cat.Resources)+len(cat.Templates), "prompts", len(cat.Prompts))
	return sess, nil
}

// connectSession runs the initialize handshake, giving up at once if the
// link dies underneath it (a process that exits during startup).
func (s *Supervisor) connectSession(ctx context.Context, link transport.Link, opts *mcp.ClientSessionOptions) (*mcp.ClientSession, *processConn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-link.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	t := link.Transport()
	var holder connHolder
	if _, ok := link.(transport.ProcessLink); ok {
		t = processTransport{Transport: t, s: s, holder: &holder}
	} else if r, ok := link.(transport.NotificationRelay); ok {
		s.relayed.Store(true)
		r.RelayNotifications(orderedNotifications, func(req *jsonrpc.Request) {
			if !s.forwardNotification(req) {
				s.logger.Debug("relayed notification not forwarded: params do not decode", "method", req.Method)
			}
		})
	}
	cs, err := s.client.Connect(ctx, t, opts)
	return cs, holder.conn, err
}

// monitor closes sess.dead when the link dies or the session ends. For a
// process link, it also closes the session so in-flight calls fail at once
// instead of waiting on pipes that a grandchild may hold open.
func (s *Supervisor) monitor(sess *session) {
	waitDone := make(chan error, 1)
	go func() { waitDone <- sess.cs.Wait() }()
	select {
	case <-sess.link.Done():
		sess.err = sess.link.Err()
		close(sess.dead)
		sess.cs.Close()
		<-waitDone
	case err := <-waitDone:
		// Give the link a moment to report the process exit, which says
		// more than "connection closed".
		select {
		case <-sess.link.Done():
			err = sess.link.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if err == nil {
			err = errors.New("session closed by the server")
		}
		sess.err = err
		close(sess.dead)
	}
}

// serve waits while the session is ready. It returns whether the session
// proved healthy and why it ended (nil on stop; a *recycled when it was
// retired for idle_timeout or max_lifetime: idle.go).
func (s *Supervisor) serve(sess *session, failures *int) (healthy bool, err error) {
	healthyAfter := time.NewTimer(s.cfg.Reconnect.HealthyAfter)
	defer healthyAfter.Stop()
	// Health pings and suspicion (health.go).
	lv := s.newLiveness(sess)
	defer lv.stop()
	// idle_timeout and max_lifetime (idle.go); never fires without them.
	recycle := s.newRecycleTimer()
	defer recycle.Stop()
	markHealthy := func() {
		if !healthy {
			healthy = true
			*failures = 0
			s.life.setFailures(0)
		}
	}
	for {
		select {
		case <-s.stopCh:
			return healthy, nil
		case <-sess.dead:
			return healthy, sess.err
		case <-s.wake:
			failed, why := s.life.failed(sess.gen)
			if !failed {
				continue
			}
			// A process that died says more about it than the call that
			// tripped over its pipes; give its exit a moment to be seen.
			if sess.processBacked() {
				select {
				case <-sess.dead:
					return healthy, sess.err
				case <-time.After(processExitGrace):
				}
			}
			return healthy, fmt.Errorf("a call found the session broken: %w", why)
		case <-s.relist:
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
			cat, err := s.list(ctx, sess.cs)
			cancel()
			if err != nil {
				s.logger.Warn("re-listing after list_changed failed", "error", recovery.Redact(err.Error()))
				continue
			}
			s.publishCatalog(cat)
		case <-s.healthy:
			markHealthy()
		case <-lv.healthC():
			lv.healthDue()
		case r := <-lv.results:
			if end, err := lv.pinged(r); end {
				return healthy, err
			}
		case <-s.suspect:
			lv.suspicion()
		case <-lv.recheckC():
			lv.suspicion()
		case <-healthyAfter.C:
			markHealthy()
		case <-recycle.C():
			if end, err := s.recycleDue(recycle, sess); end {
				return healthy, err
			}
		case <-s.revive:
			// Already connected: nothing to revive; whoever asked is told
			// the server is ready.
			answer(s.life.takeWaiters(), nil)
		}
	}
}

// closeSession stops the link before closing the session: a stdio server
// then sees EOF on stdin and exits on its own, instead of dying of EPIPE
// because its stdout was closed under it.
func (s *Supervisor) closeSession(sess *session) {
	ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
	defer cancel()
	if err := sess.link.Close(ctx); err != nil {
		s.logger.Warn("stopping server process", "error", err)
	}
	sess.cs.Close()
}

// ProtocolVersion is the MCP protocol version negotiated with the upstream
// on the current session ("" when not connected).
func (s *Supervisor) ProtocolVersion() string {
	sess := s.sessions.ready()
	if sess == nil {
		return ""
	}
	if ir := sess.cs.InitializeResult(); ir != nil {
		return ir.ProtocolVersion
	}
	return ""
}

// stalled reports whether a write to the session's process ever timed out.
func (s *session) stalled() bool { return s.conn != nil && s.conn.stalled() }

func (s *session) isDead() bool {
	select {
	case <-s.dead:
		return true
	default:
		return false
	}
}

// processBacked reports whether the session runs over a process whose death
// we observe (stdio, plugin): a broken connection there means the process is
// gone or going, and an in-flight call's outcome is unknown.
func (s *session) processBacked() bool {
	_, ok := s.link.(transport.ProcessLink)
	return ok
}
