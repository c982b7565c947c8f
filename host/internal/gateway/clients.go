package gateway

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/status"
)

// Client is a connected downstream client (status.Client).
type Client = status.Client

// sessionIDShown is how much of a session id Clients shows: an id is the
// session's only credential besides the bearer token, so the status never
// carries a whole one.
const sessionIDShown = 8

// stdioSessions are the sessions served by ServeTransport, with when each
// began; they have no id, so the session book (sessionUses) does not hold
// them.
type stdioSessions struct {
	mu    sync.Mutex
	since map[*mcp.ServerSession]time.Time // guarded by mu
}

func (s *stdioSessions) add(ss *mcp.ServerSession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.since == nil {
		s.since = map[*mcp.ServerSession]time.Time{}
	}
	s.since[ss] = time.Now()
}

func (s *stdioSessions) remove(ss *mcp.ServerSession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.since, ss)
}

// Clients lists the connected downstream clients that have initialized,
// oldest first. A stateless (2026-07-28) request's per-request session is
// not a connected client.
func (g *Gateway) Clients() []Client {
	var out []Client
	describe := func(ss *mcp.ServerSession, c Client) {
		if ip := ss.InitializeParams(); ip != nil {
			c.Protocol = ip.ProtocolVersion
			if ip.ClientInfo != nil {
				c.Name, c.Version = ip.ClientInfo.Name, ip.ClientInfo.Version
			}
			out = append(out, c)
		}
	}
	for ss := range g.server.Sessions() {
		id := ss.ID()
		if id == "" {
			continue
		}
		since, ok := g.sessionUses.openedAt(id)
		if !ok {
			continue // its initialize is still on its way
		}
		describe(ss, Client{Transport: "streamable-http", Session: shortID(id), Since: since})
	}
	g.stdio.mu.Lock()
	stdio := make(map[*mcp.ServerSession]time.Time, len(g.stdio.since))
	for ss, t := range g.stdio.since {
		stdio[ss] = t
	}
	g.stdio.mu.Unlock()
	for ss, since := range stdio {
		describe(ss, Client{Transport: "stdio", Since: since})
	}
	slices.SortFunc(out, func(a, b Client) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return strings.Compare(a.Session, b.Session)
	})
	return out
}

// shortID is the start of a session id, for showing.
func shortID(id string) string {
	if len(id) <= sessionIDShown {
		return id
	}
	return id[:sessionIDShown] + "…"
}
