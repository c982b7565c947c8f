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

Requests to clients (sampling, elicitation, roots) are bounded, because the
upstream is untrusted and each one holds a goroutine and the client's
attention until it is answered (docs/security.md, "Requests from servers to
clients"): at most max_pending_requests wait at once, the next is declined
at once; each waits at most until its call's deadline (serverRequestTimeout
when the call has none); and none reaches a client that did not declare
the capability it needs in its initialize request: the upstream gets an
invalid-request error saying so instead.

Notifications are sent with the downstream request's own context, so over
streamable HTTP they travel on that request's response stream.
*/

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/limits"
)

// Downstream is the client whose request caused an upstream operation. It
// receives what the upstream sends back for that request. *mcp.ServerSession
// implements it.
type Downstream interface {
	// InitializeParams is what the client declared: a request of the
	// upstream's reaches it only when its capabilities include the
	// feature (sampling, elicitation, roots). Nil declares nothing.
	InitializeParams() *mcp.InitializeParams
	NotifyProgress(ctx context.Context, params *mcp.ProgressNotificationParams) error
	Log(ctx context.Context, params *mcp.LoggingMessageParams) error
	CreateMessage(ctx context.Context, params *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error)
	Elicit(ctx context.Context, params *mcp.ElicitParams) (*mcp.ElicitResult, error)
	ListRoots(ctx context.Context, params *mcp.ListRootsParams) (*mcp.ListRootsResult, error)
}

// ErrNoDownstream is returned to an upstream that sends a server-to-client
// request while no downstream request of its is in flight.
var ErrNoDownstream = errors.New("no downstream client request is in flight to route this to; declined by mcpvisor")

// declinedLogEvery is how often a request declined for
// max_pending_requests is logged: a server asking in a loop must not flood
// the log either.
const declinedLogEvery = 10000

// serverRequestTimeout bounds a request of the upstream's to a downstream
// client made during a call that has no deadline of its own.
const serverRequestTimeout = 60 * time.Second

// inflight is one upstream call made on behalf of a downstream client.
type inflight struct {
	d   Downstream
	ctx context.Context // the downstream request's context
	// deadline is when the call times out (the server's timeout); zero
	// when it has none.
	deadline time.Time
	// token is the downstream's progress token, upKey the JSON of the
	// token sent upstream (the same unless it collided).
	token any
	upKey string
}

// onProgress and onLog are the SDK's handlers. A link that relays these
// notifications has forwarded them already, in order (connectSession).
func (s *Supervisor) onProgress(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
	if !s.relayed.Load() {
		s.forwardProgress(req.Params)
	}
}

func (s *Supervisor) forwardProgress(p *mcp.ProgressNotificationParams) {
	f := s.calls.byProgress(p.ProgressToken)
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
	if f := s.calls.latest(); f != nil {
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
	f, fctx, done, err := s.clientFor(ctx, "sampling/createMessage")
	if err != nil {
		return nil, err
	}
	if f == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "sampling/createMessage: " + ErrNoDownstream.Error()}
	}
	defer done()
	return f.d.CreateMessage(fctx, req.Params)
}

func (s *Supervisor) onElicit(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	f, fctx, done, err := s.clientFor(ctx, "elicitation/create")
	if err != nil {
		return nil, err
	}
	if f == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "elicitation/create: " + ErrNoDownstream.Error()}
	}
	defer done()
	return f.d.Elicit(fctx, req.Params)
}

// clientFor picks the downstream client a request of the upstream's goes
// to: the most recent in-flight call's (nil when no call is in flight). It
// refuses a client that did not declare the capability method needs. The
// returned context is the call's, ending at the call's deadline (or after
// serverRequestTimeout when it has none) or when the upstream cancels its
// request (ctx); done releases it.
func (s *Supervisor) clientFor(ctx context.Context, method string) (f *inflight, fctx context.Context, done func(), err error) {
	f = s.calls.latest()
	if f == nil {
		return nil, nil, nil, nil
	}
	if capability := neededCapability(method); !declares(f.d.InitializeParams(), capability) {
		s.logger.Debug("request to a client without the capability declined", "method", method, "capability", capability)
		// Not CodeMethodNotFound: the go-sdk answers that code with its own
		// message, and the server would not learn why.
		return nil, nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: fmt.Sprintf(
			"%s: the client of this call did not declare the %s capability, so mcpvisor does not send it this request; declined",
			method, capability)}
	}
	deadline := f.deadline
	if deadline.IsZero() {
		deadline = time.Now().Add(serverRequestTimeout)
	}
	fctx, cancel := context.WithDeadline(f.ctx, deadline)
	stop := context.AfterFunc(ctx, cancel)
	return f, fctx, func() { stop(); cancel() }, nil
}

// neededCapability names the client capability a request to the client
// needs.
func neededCapability(method string) string {
	switch method {
	case "sampling/createMessage":
		return "sampling"
	case "elicitation/create":
		return "elicitation"
	case "roots/list":
		return "roots"
	}
	return ""
}

// declares reports whether a client that initialized with ip declared
// capability.
func declares(ip *mcp.InitializeParams, capability string) bool {
	if ip == nil || ip.Capabilities == nil {
		return false
	}
	c := ip.Capabilities
	switch capability {
	case "sampling":
		return c.Sampling != nil
	case "elicitation":
		return c.Elicitation != nil
	case "roots":
		return c.RootsV2 != nil
	}
	return false
}

// boundRequestsToClients declines a request of the upstream's to a client
// (sampling, elicitation, roots) at once while max_pending_requests of them
// are waiting already: an upstream that asks in a loop cannot pile up
// goroutines and memory in mcpvisor, or requests at a client. (A process
// link sheds such a burst before the SDK even starts a goroutine for each
// request: processConn.Read.)
func (s *Supervisor) boundRequestsToClients(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if neededCapability(method) == "" {
			return next(ctx, method, req)
		}
		if s.calls.requestsToClients.Add(1) > s.calls.maxPending {
			s.calls.requestsToClients.Add(-1)
			return nil, s.tooManyPending(method)
		}
		defer s.calls.requestsToClients.Add(-1)
		return next(ctx, method, req)
	}
}

// atPendingCap reports whether a request of the upstream's for method
// would be declined for max_pending_requests.
func (s *Supervisor) atPendingCap(method string) bool {
	return neededCapability(method) != "" && s.calls.requestsToClients.Load() >= s.calls.maxPending
}

// tooManyPending is the error a request past max_pending_requests gets. The
// first and every declinedLogEvery-th are logged, not each of a flood.
func (s *Supervisor) tooManyPending(method string) *jsonrpc.Error {
	s.opts.LimitHits.Hit(limits.MaxPendingRequests)
	if n := s.calls.declined.Add(1); n == 1 || n%declinedLogEvery == 0 {
		s.logger.Warn("server's request to a client declined: too many pending",
			"method", method, "max_pending_requests", s.calls.maxPending, "declined_so_far", n)
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf(
		"%s: server %q already has %d requests waiting on clients, the most mcpvisor allows (max_pending_requests); declined, wait for their answers before asking more",
		method, s.name, s.calls.maxPending)}
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
		f, fctx, done, err := s.clientFor(ctx, method)
		if err != nil {
			return nil, err
		}
		if f == nil {
			return next(ctx, method, req)
		}
		defer done()
		p, _ := req.GetParams().(*mcp.ListRootsParams)
		if p == nil {
			p = &mcp.ListRootsParams{}
		}
		res, err := f.d.ListRoots(fctx, p)
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
