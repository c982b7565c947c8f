package upstream

/*
Design note: routing what an upstream sends back.

An upstream session is shared by every downstream client, yet progress
notifications, log messages and server-to-client requests (sampling,
elicitation) belong to the downstream request that caused them. Every
operation takes the Downstream it is made for as an argument, and the
supervisor records every in-flight call that has one:

  - Progress is exact: the call's progress token is the key. A token that
    another in-flight call already uses is replaced by a unique one upstream
    and mapped back on the way down.
  - Log messages and sampling/elicitation requests carry no request id on
    the 2025-11-25 protocol, so they go to the most recent in-flight call's
    downstream; with no call in flight, logs go to OnLog (the gateway sends
    them to every session, each filtering by its own level) and requests are
    declined with an error that says why.

Notifications are sent with the downstream request's own context, so over
streamable HTTP they travel on that request's response stream.
*/

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Downstream is the client whose request caused an upstream operation. It
// receives what the upstream sends back for that request. *mcp.ServerSession
// implements it.
type Downstream interface {
	NotifyProgress(ctx context.Context, params *mcp.ProgressNotificationParams) error
	Log(ctx context.Context, params *mcp.LoggingMessageParams) error
	CreateMessage(ctx context.Context, params *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error)
	Elicit(ctx context.Context, params *mcp.ElicitParams) (*mcp.ElicitResult, error)
	ListRoots(ctx context.Context, params *mcp.ListRootsParams) (*mcp.ListRootsResult, error)
}

// ErrNoDownstream is returned to an upstream that sends a server-to-client
// request while no downstream request of its is in flight.
var ErrNoDownstream = errors.New("no downstream client request is in flight to route this to; declined by mcpvisor")

// inflight is one upstream call made on behalf of a downstream client.
type inflight struct {
	d   Downstream
	ctx context.Context // the downstream request's context
	// token is the downstream's progress token, upKey the JSON of the
	// token sent upstream (the same unless it collided).
	token any
	upKey string
}

// track records an in-flight call made with ctx for the downstream client
// d (nil: none, nothing to record). It returns the progress token to send
// upstream (tok itself unless another in-flight call uses it; rewritten
// says so) and a release func.
func (s *Supervisor) track(ctx context.Context, d Downstream, tok any) (upTok any, rewritten bool, release func()) {
	if d == nil {
		return tok, false, func() {}
	}
	f := &inflight{d: d, ctx: ctx, token: tok}
	s.flightMu.Lock()
	s.flightSeq++
	id := s.flightSeq
	upTok = tok
	if tok != nil {
		key := tokenKey(tok)
		if _, taken := s.byToken[key]; taken {
			upTok = fmt.Sprintf("mcpvisor-%s-%d", s.name, id)
			rewritten = true
			key = tokenKey(upTok)
		}
		f.upKey = key
		s.byToken[key] = f
	}
	s.flights[id] = f
	s.flightMu.Unlock()
	return upTok, rewritten, func() {
		s.flightMu.Lock()
		delete(s.flights, id)
		if f.upKey != "" {
			delete(s.byToken, f.upKey)
		}
		s.flightMu.Unlock()
	}
}

// tokenKey normalises a progress token (string or number) for lookup.
func tokenKey(tok any) string {
	b, err := json.Marshal(tok)
	if err != nil {
		return fmt.Sprint(tok)
	}
	return string(b)
}

// latestFlight returns the most recently started in-flight call, if any.
func (s *Supervisor) latestFlight() *inflight {
	s.flightMu.Lock()
	defer s.flightMu.Unlock()
	var best uint64
	var f *inflight
	for id, fl := range s.flights {
		if id > best {
			best, f = id, fl
		}
	}
	return f
}

// onProgress and onLog are the SDK's handlers. A link that relays these
// notifications has forwarded them already, in order (connectSession).
func (s *Supervisor) onProgress(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
	if !s.relayed.Load() {
		s.forwardProgress(req.Params)
	}
}

func (s *Supervisor) forwardProgress(p *mcp.ProgressNotificationParams) {
	s.flightMu.Lock()
	f := s.byToken[tokenKey(p.ProgressToken)]
	s.flightMu.Unlock()
	if f == nil {
		s.logger.Debug("progress notification for no in-flight call dropped", "token", p.ProgressToken)
		s.notified("progress", false)
		return
	}
	out := *p
	out.ProgressToken = f.token
	err := f.d.NotifyProgress(f.ctx, &out)
	if err != nil {
		s.logger.Debug("forwarding progress failed", "error", err)
	}
	s.notified("progress", err == nil)
}

func (s *Supervisor) onLog(ctx context.Context, req *mcp.LoggingMessageRequest) {
	if !s.relayed.Load() {
		s.forwardLog(req.Params)
	}
}

func (s *Supervisor) forwardLog(p *mcp.LoggingMessageParams) {
	if f := s.latestFlight(); f != nil {
		err := f.d.Log(f.ctx, p)
		if err != nil {
			s.logger.Debug("forwarding log message failed", "error", err)
		}
		s.notified("log", err == nil)
		return
	}
	if s.opts.OnLog != nil {
		s.opts.OnLog(s.name, p)
	}
	s.notified("log", s.opts.OnLog != nil)
}

func (s *Supervisor) onCreateMessage(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
	f := s.latestFlight()
	if f == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "sampling/createMessage: " + ErrNoDownstream.Error()}
	}
	return f.d.CreateMessage(f.ctx, req.Params)
}

func (s *Supervisor) onElicit(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	f := s.latestFlight()
	if f == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "elicitation/create: " + ErrNoDownstream.Error()}
	}
	return f.d.Elicit(f.ctx, req.Params)
}

func (s *Supervisor) onResourceUpdated(ctx context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
	if s.opts.OnResourceUpdated != nil {
		s.opts.OnResourceUpdated(s.name, req.Params)
	}
	s.notified("resource_updated", s.opts.OnResourceUpdated != nil)
}

// rootsMiddleware answers an upstream's roots/list with the roots of the
// downstream client whose request is in flight; with none, the SDK client's
// own root list answers: the roots of the downstream client that last
// connected with roots or changed them (SetRoots), or none before any did.
func (s *Supervisor) rootsMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "roots/list" {
			return next(ctx, method, req)
		}
		f := s.latestFlight()
		if f == nil {
			return next(ctx, method, req)
		}
		p, _ := req.GetParams().(*mcp.ListRootsParams)
		if p == nil {
			p = &mcp.ListRootsParams{}
		}
		res, err := f.d.ListRoots(f.ctx, p)
		if err != nil && f.ctx.Err() != nil && ctx.Err() == nil {
			// The call ended before its client answered (a server that
			// asks on its own, after list_changed, while a call runs):
			// no call is in flight any more, so the roots every client
			// shares answer, as they would have a moment later.
			return next(ctx, method, req)
		}
		return res, err
	}
}

// SetRoots makes roots the server's roots when no downstream request is in
// flight (see rootsMiddleware). When they differ from the current ones, the
// upstream is told with notifications/roots/list_changed, so a server that
// asked once (right after initialize) asks again.
func (s *Supervisor) SetRoots(roots []*mcp.Root) {
	s.rootsMu.Lock()
	defer s.rootsMu.Unlock()
	keep := map[string]bool{}
	for _, r := range roots {
		keep[r.URI] = true
	}
	var gone []string
	for uri := range s.roots {
		if !keep[uri] {
			gone = append(gone, uri)
		}
	}
	var changed []*mcp.Root
	for _, r := range roots {
		if old, ok := s.roots[r.URI]; !ok || old.Name != r.Name {
			changed = append(changed, r)
		}
	}
	// The SDK client notifies its sessions only when its list changes.
	s.client.RemoveRoots(gone...)
	s.client.AddRoots(changed...)
	s.roots = map[string]*mcp.Root{}
	for _, r := range roots {
		s.roots[r.URI] = r
	}
}
