package gateway

/*
Design note: answering calls as bytes over HTTP (docs/proxy.md, "Results
pass through as bytes").

Through the go-sdk's streamable handler a result is held four times while
it is written: the handler's result, the JSON-RPC layer's encoding of it,
the message's encoding, and the event the stream writes. A client that
reads slowly keeps all four. So a POST of a session-based (2025-11-25 and
older) HTTP session that carries one tools/call, resources/read or
prompts/get is answered here, as stdio calls are (forward.go): the
upstream's result is written to the client as it came, in an
application/json answer, with nothing held but those bytes. The session is
the go-sdk's (looked up in the gateway's book of sessions, with its
owner), and the same questions are asked first: the caller's policies,
the route, whether the call carries a progress token. Whatever is not
plainly such a call — a batch, a progress token, a session the book does
not know or another subject's, roots still to ask for, a protocol version
header other than the session's, a client that could be asked something
during the call (sampling, elicitation, roots) with no standalone stream
open to ask it on — goes to the go-sdk as before.

A notifications/cancelled for a call answered here cancels it (and goes
on to the go-sdk, which knows nothing of the call). The upstream's
questions to the client (sampling, elicitation, roots) reach it on its
standalone stream.
*/

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/identity"
	"github.com/mcpvisor/mcpvisor/host/internal/transport"
	"github.com/mcpvisor/mcpvisor/host/internal/wire"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// streams counts the standalone (GET) streams open, by session id.
type streams struct {
	mu   sync.Mutex
	byID map[string]int
}

func (s *streams) open(id string) {
	s.mu.Lock()
	if s.byID == nil {
		s.byID = map[string]int{}
	}
	s.byID[id]++
	s.mu.Unlock()
}

func (s *streams) close(id string) {
	s.mu.Lock()
	if s.byID[id]--; s.byID[id] <= 0 {
		delete(s.byID, id)
	}
	s.mu.Unlock()
}

func (s *streams) isOpen(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byID[id] > 0
}

// httpCalls are the calls answered by answerBytes in flight, by session
// id and request id, for notifications/cancelled.
type httpCalls struct {
	mu    sync.Mutex
	calls map[string]context.CancelFunc
}

func (c *httpCalls) add(key string, cancel context.CancelFunc) {
	c.mu.Lock()
	if c.calls == nil {
		c.calls = map[string]context.CancelFunc{}
	}
	c.calls[key] = cancel
	c.mu.Unlock()
}

func (c *httpCalls) remove(key string) {
	c.mu.Lock()
	delete(c.calls, key)
	c.mu.Unlock()
}

func (c *httpCalls) cancel(key string) {
	c.mu.Lock()
	cancel := c.calls[key]
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// answerBytes wraps the session-based HTTP handler: the calls it can
// answer as bytes it answers itself (see the note at the top); everything
// else goes to next.
func (g *Gateway) answerBytes(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(sessionIDHeader)
		if r.Method != http.MethodPost || id == "" || r.Body == nil || r.ContentLength > maxForwardBody {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxForwardBody+1))
		r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(body))
		if err != nil || len(body) > maxForwardBody || !g.answerCall(w, r, id, body) {
			next.ServeHTTP(w, r)
		}
	})
}

// maxForwardBody is the largest request body answerBytes looks at; the
// go-sdk refuses bodies over 4 MiB itself.
const maxForwardBody = 4 << 20

// answerCall answers the POST r of session id, whose body is body, and
// reports true, or reports false to leave it to the go-sdk.
func (g *Gateway) answerCall(w http.ResponseWriter, r *http.Request, id string, body []byte) bool {
	msg, err := wire.DecodeMessage(body)
	if err != nil {
		return false
	}
	req, ok := msg.(*jsonrpc.Request)
	if !ok {
		return false
	}
	if !req.IsCall() {
		if req.Method == "notifications/cancelled" {
			var p cancelParams
			if json.Unmarshal(req.Params, &p) == nil && p.RequestID != nil {
				if rid, err := jsonrpc.MakeID(p.RequestID); err == nil {
					g.httpCalls.cancel(id + " " + idKey(rid))
				}
			}
		}
		return false
	}
	switch req.Method {
	case "tools/call", "resources/read", "prompts/get":
	default:
		return false
	}
	kind := kindOf(req.Method)
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" ||
		!strings.Contains(r.Header.Get("Accept"), "application/json") || !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		return false
	}
	who := identity.FromContext(r.Context())
	ss, ok := g.sessionUses.session(id, who.Caller())
	if !ok {
		return false
	}
	ip := ss.InitializeParams()
	if ip == nil || ip.ProtocolVersion >= wire.Stateless || r.Header.Get("Mcp-Protocol-Version") != ip.ProtocolVersion || g.rootsPending(ss) {
		return false
	}
	if c := ip.Capabilities; c != nil && (c.Sampling != nil || c.Elicitation != nil || c.RootsV2 != nil) && !g.standalone.isOpen(id) {
		// The upstream may ask this client something during the call:
		// without its standalone stream, only the go-sdk's stream for
		// this POST could carry the question.
		return false
	}
	target, ok := g.forwardTargetOf(req.Method, req.Params)
	if !ok {
		return false
	}

	ctx := r.Context() // ends when this POST has been served (answers.open)
	key := id + " " + idKey(req.ID)
	stream := &callStream{w: w}
	ctx = context.WithValue(ctx, callStreamKey{}, stream)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g.httpCalls.add(key, cancel)
	defer g.httpCalls.remove(key)
	if g.opts.RequestContext != nil {
		ctx = g.opts.RequestContext(ctx, r.Header)
	}
	var res json.RawMessage
	if e := g.policyEngine(); e != nil {
		err = g.admit(ctx, e, who, ss, req.Method, kind, target.exposed)
	}
	if err == nil {
		if who != nil {
			ctx = identity.NewContext(ctx, who) // for the audit line
		}
		g.forwarded.Add(1)
		res, err = g.backend.Forward(transport.HoldResultsFor(ctx), ss, target.server, req.Method, target.tool, target.params)
	}
	if err != nil && errors.Is(err, context.Canceled) && ctx.Err() != nil {
		// The client canceled, or is gone: no answer, as the go-sdk does.
		if !stream.close() {
			w.WriteHeader(http.StatusNoContent)
		}
		return true
	}
	if err != nil {
		data, merr := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: req.ID, Error: recovery.WireError(err)})
		if merr != nil {
			data = []byte(`{"jsonrpc":"2.0","id":` + string(wire.AppendID(nil, req.ID)) + `,"error":{"code":-32603,"message":"mcpvisor could not encode an error"}}`)
		}
		stream.answer(data)
		return true
	}
	if bytes.ContainsAny(res, "\r\n") {
		// A line break would end the event's data line: compact it (a
		// copy, for the rare upstream that sends one, such as a
		// pretty-printed plugin frame).
		var buf bytes.Buffer
		if json.Compact(&buf, res) == nil {
			res = buf.Bytes()
		}
	}
	// The envelope around the upstream's bytes, which are written as they
	// are: never copied, never re-encoded.
	head := append(append([]byte(`{"jsonrpc":"2.0","id":`), wire.AppendID(nil, req.ID)...), `,"result":`...)
	stream.answer(head, res, []byte{'}'})
	return true
}

// callStream is the event stream that answers a POST answered as bytes:
// the upstream's progress and log notifications for the call (sent by the
// go-sdk session, taken by streamNotifications), then its answer.
type callStream struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	started bool // the head has been written
	done    bool // the answer has been written (or the client is gone)
}

// callStreamKey marks the context of a call answered as bytes with its
// stream.
type callStreamKey struct{}

// errStreamDone: the call's answer is written; a notification goes where
// the go-sdk sends it.
var errStreamDone = errors.New("the call's stream is done")

// event writes one message event made of parts; the caller holds s.mu.
func (s *callStream) eventLocked(parts ...[]byte) error {
	if s.done {
		return errStreamDone
	}
	if !s.started {
		h := s.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		s.w.WriteHeader(http.StatusOK)
		s.started = true
	}
	if _, err := io.WriteString(s.w, "event: message\ndata: "); err != nil {
		return err
	}
	for _, p := range parts {
		if _, err := s.w.Write(p); err != nil {
			return err
		}
	}
	if _, err := io.WriteString(s.w, "\n\n"); err != nil {
		return err
	}
	return http.NewResponseController(s.w).Flush()
}

// notify writes a notification of the call's, before its answer.
func (s *callStream) notify(data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.eventLocked(data)
}

// answer writes the call's answer and ends the stream.
func (s *callStream) answer(parts ...[]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.eventLocked(parts...)
	s.done = true
}

// close ends the stream without an answer; it reports whether anything
// had been written.
func (s *callStream) close() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = true
	return s.started
}

// streamNotifications is the gateway server's sending middleware that
// writes the progress and log notifications the go-sdk session sends for
// a call answered as bytes to that call's own stream, as the go-sdk does
// for the calls it answers (so they precede the answer).
func (g *Gateway) streamNotifications(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		s, ok := ctx.Value(callStreamKey{}).(*callStream)
		if !ok || (method != "notifications/message" && method != "notifications/progress") {
			return next(ctx, method, req)
		}
		params, err := marshalNoEscape(req.GetParams())
		if err != nil {
			return nil, err
		}
		data, err := jsonrpc.EncodeMessage(&jsonrpc.Request{Method: method, Params: params})
		if err != nil {
			return nil, err
		}
		if err := s.notify(data); errors.Is(err, errStreamDone) {
			return next(ctx, method, req)
		} else if err != nil {
			return nil, err
		}
		return nil, nil
	}
}

// rootsPending reports whether the gateway still has to ask ss for its
// roots before its next request (roots.go): the go-sdk path does that.
func (g *Gateway) rootsPending(ss *mcp.ServerSession) bool {
	g.askMu.Lock()
	defer g.askMu.Unlock()
	a := g.asks[ss]
	return a != nil && a.rootsPending
}
