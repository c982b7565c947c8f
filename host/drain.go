package host

// Draining: how a replica leaves a load balancer's rotation without
// failing a call.
//
// An orchestrator stopping a replica (Kubernetes deleting a pod, Nomad
// replacing an allocation, systemd stopping a unit) sends SIGTERM, and the
// load balancers in front learn about it on their own schedule: a health
// check that fails, an endpoint list that is updated a few seconds later.
// A replica that stopped listening at once would fail every request sent to
// it in between. So Drain
//
//  1. marks the host draining: /readyz answers 503 with the reason
//     "draining" at once, while /healthz (liveness) stays 200, so nothing
//     restarts the process, and /mcp keeps serving everything but new
//     sessions (503: they would die with the process moments later);
//  2. keeps serving for the host block's drain period, while the load
//     balancers see /readyz fail and stop sending new requests — if
//     anything has asked /readyz since the host started: with no load
//     balancer or orchestrator watching (mcpvisor on a laptop, behind a
//     desktop client) there is nobody to wait for, and the period is
//     skipped so a stop takes well under 2 s;
//  3. waits for the requests in flight to finish (at most drainCallGrace).
//
// Connections stay keep-alive while draining. Closing each one after its
// response (http.Server.SetKeepAlivesEnabled(false)) would move clients
// that reach the replica directly sooner, but behind HAProxy it made a
// client occasionally reuse a connection the proxy had just closed and
// fail a POST with EOF (host/scaleout caught it); the load balancer in
// front is the case that matters.
//
// Then the caller ends Serve's context (the listener closes, stragglers
// get Serve's short grace, the calls still running are cut with a
// JSON-RPC error, then the GET streams end) and calls Close, which ends
// the downstream sessions and stops the servers. A 2025 session whose
// replica went away is unknown to the others: its next request gets 404,
// and the client initializes a new session (docs/scale-out.md).

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// drainCallGrace bounds how long Drain waits, after the drain period, for
// the HTTP requests in flight to finish. Tool calls usually take seconds;
// one that takes longer is cut by the shutdown that follows rather than
// holding the replica past an orchestrator's kill timeout
// (terminationGracePeriodSeconds, kill_timeout: drain + 30 s covers it).
const drainCallGrace = 20 * time.Second

// Drain takes the host out of its load balancers' rotation before it
// stops, as `mcpvisor run` does on SIGTERM: /readyz answers 503 at once
// (Readiness().Reason is "draining") while /healthz and /mcp keep serving,
// and Drain returns after the host block's drain period (skipped when
// nothing has asked /readyz since the host started: no load balancer is
// watching) once no HTTP request is in flight (waiting at most 20 s more
// for them). From the start, a request that would open a new session gets
// 503. ctx ends the wait early, and Drain then returns
// ctx's error. Afterwards, end Serve's context and Close the host. Drain
// may be called more than once; the host stays draining.
func (h *Host) Drain(ctx context.Context) error {
	h.drainOnce.Do(func() { close(h.draining) })
	h.logger.Info("draining: /readyz answers 503; serving until the load balancers stop sending requests",
		"drain", h.drainPeriod, "in_flight", h.inFlight.count())

	if h.drainPeriod > 0 && !h.readyzAsked.Load() {
		h.logger.Info("draining: nothing has asked /readyz, so no load balancer is watching; not waiting the drain period", "drain", h.drainPeriod)
	} else if h.drainPeriod > 0 {
		t := time.NewTimer(h.drainPeriod)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	if n := h.inFlight.count(); n > 0 {
		h.logger.Info("draining: waiting for requests in flight", "in_flight", n, "at_most", drainCallGrace)
	}
	t := time.NewTimer(drainCallGrace)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		h.logger.Warn("draining: requests still in flight; stopping anyway", "in_flight", h.inFlight.count(), "waited", drainCallGrace)
	case <-h.inFlight.idle():
	}
	h.logger.Info("drained")
	return nil
}

// Draining reports whether Drain has been called.
func (h *Host) Draining() bool {
	select {
	case <-h.draining:
		return true
	default:
		return false
	}
}

// requestGauge counts the HTTP requests being served that end by
// themselves: every method but GET, whose streams last as long as the
// client wants.
type requestGauge struct {
	mu sync.Mutex
	n  int
	// done is closed when n drops to zero, and replaced when it rises.
	done chan struct{}
}

// closedChan is an idle gauge's done channel.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (g *requestGauge) add() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n == 0 {
		g.done = make(chan struct{})
	}
	g.n++
}

func (g *requestGauge) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.n == 0 {
		close(g.done)
	}
}

func (g *requestGauge) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// idle is closed once no request is in flight (already, if none is).
func (g *requestGauge) idle() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n == 0 {
		return closedChan
	}
	return g.done
}

// counted wraps next so that the gauge sees its requests.
func (g *requestGauge) counted(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			next.ServeHTTP(w, r)
			return
		}
		g.add()
		defer g.release()
		next.ServeHTTP(w, r)
	})
}

// Stopping: what a client sees once the host stops serving.
//
// From SIGTERM on (Drain) and once Serve's context ends, a request that
// would open a new session gets 503 with Retry-After: the session would
// die with this process moments later. Calls still in flight when Serve
// gives up waiting for them (after Drain's wait and Serve's grace) are cut:
// each client gets a JSON-RPC error saying the host is shutting down, on
// the request it made, before the connection closes — not a connection
// closed under it with no answer.

// errHostShuttingDown is the cause callsCut ends with.
var errHostShuttingDown = errors.New("host shutting down")

// cutReplyGrace is how long Serve waits, after cutting the calls in
// flight, for their handlers to write the errors, before it closes the
// connections still open.
const cutReplyGrace = 2 * time.Second

// cutDeliveryPause is how long Serve waits, once the cut calls are
// answered, before it ends the clients' GET streams: a client that
// handles its stream's end first may fail the call itself, without the
// answer that is already on its way.
const cutDeliveryPause = time.Second

// stoppingNow reports whether the host takes no new sessions: it drains
// or Serve's context has ended.
func (h *Host) stoppingNow() bool {
	select {
	case <-h.stopping:
		return true
	default:
		return h.Draining()
	}
}

// beginStopping marks the host as stopping (Serve's context ended).
func (h *Host) beginStopping() {
	h.stoppingOnce.Do(func() { close(h.stopping) })
}

// cuttable returns a context for an upstream operation that ends, with
// errHostShuttingDown as its cause, when the host cuts the calls in
// flight at shutdown; done releases it.
func (h *Host) cuttable(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(h.callsCut, func() { cancel(context.Cause(h.callsCut)) })
	return ctx, func() {
		stop()
		cancel(nil)
	}
}

// cutError is err, or for an operation the host cut at shutdown the error
// that tells its client so (and names the server: its outcome is unknown).
func cutError(ctx context.Context, server, op string, err error) error {
	if err == nil || !errors.Is(context.Cause(ctx), errHostShuttingDown) {
		return err
	}
	return &recovery.Error{Server: server, Op: op, Class: recovery.Unavailable,
		Reason: "host shutting down: mcpvisor stopped before the server answered, so the call's outcome is unknown; check before retrying it on another replica or after the restart"}
}

// waitIdle waits up to d for g to have no request in flight, and reports
// whether it got there.
func waitIdle(g *requestGauge, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-g.idle():
		return true
	case <-t.C:
		return false
	}
}
