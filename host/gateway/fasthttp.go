package gateway

/*
Design note: the streamable HTTP fast path for tools/call.

On HTTP the go-sdk server costs more per call than on stdio: every POST
goes through its session's stream machinery and answers on an SSE stream.
For a tools/call on a known session the gateway answers the POST itself
with the backend's raw result: application/json when nothing else is sent
for the call (the common case), or an SSE stream the moment the call needs
one — a server-to-client request of the upstream (roots/list) goes out on
that stream as the SDK would send it, and the client's answer, POSTed back,
is taken by the gateway. Everything else goes to the SDK handler
unchanged, as do calls the fast path cannot serve exactly as the SDK
would:

  - a session on 2026-07-28 or later (the SDK server shapes those results),
    or a request whose protocol version header differs from the session's;
  - a progress token (the SDK path forwards progress on the request's
    stream);
  - a client that declared sampling or elicitation, or that set a log level
    (those messages belong on the request's stream too);
  - a request the SDK would refuse (Host header not loopback on a loopback
    listener, wrong Content-Type or Accept): the SDK answers it as before.
*/

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/transport"
)

// maxFastBody bounds the POST bodies the fast path reads; a longer one goes
// to the SDK handler, which applies its own limits.
const maxFastBody = 4 << 20

// clientRequestPrefix starts the ids of the requests the gateway sends to a
// client on a fast call's stream.
const clientRequestPrefix = "mcpvisor-rq-"

// httpFast is the gateway's state for HTTP fast calls; none of it is
// behind a lock of the gateway's, so concurrent calls do not serialise.
type httpFast struct {
	// inflight are the running fast calls (*fastCall) by session id and
	// request id, for notifications/cancelled.
	inflight sync.Map
	// pending are requests sent to clients on a fast call's stream
	// (*clientRequest), by id.
	pending sync.Map
	seq     atomic.Uint64
	// sessions are the live sessions the fast path has seen, by id
	// (*mcp.ServerSession), each removed when it ends.
	sessions sync.Map
	// logging holds the sessions (*mcp.ServerSession) whose client set a
	// log level.
	logging sync.Map
}

type clientRequest struct {
	sessionID string
	ch        chan *jsonrpc.Response
}

// fastPost is a POST offered to the fast path: what serveFastPost needs of
// it, from net/http's request or straight from the front's.
type fastPost struct {
	// ctx is the call's context and cancel ends it (the call's cancel,
	// for notifications/cancelled).
	ctx    context.Context
	cancel context.CancelFunc
	sid    string
	// contentType, accept and protocolVersion are the values of the
	// Content-Type, Accept (all of them) and Mcp-Protocol-Version fields.
	contentType     string
	accept          []string
	protocolVersion string
	// host is the Host header; local, the address the request came to
	// (nil when unknown).
	host  string
	local net.Addr
	body  []byte
}

// serveFast answers r on the fast path and reports true, or leaves r (with
// its body intact) to the SDK handler and reports false.
func (g *Gateway) serveFast(w http.ResponseWriter, r *http.Request) bool {
	sid := r.Header.Get("Mcp-Session-Id")
	if r.Method != http.MethodPost || sid == "" {
		return false
	}
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	p := &fastPost{sid: sid, contentType: r.Header.Get("Content-Type"), accept: r.Header.Values("Accept"),
		protocolVersion: r.Header.Get("Mcp-Protocol-Version"), host: r.Host, local: local}
	if !p.acceptable() {
		return false // before reading a body the fast path would not take
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxFastBody+1))
	// Whatever happens next, the SDK handler can still read the body.
	r.Body = readCloser{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
	if err != nil || len(body) > maxFastBody {
		return false
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	p.ctx, p.cancel, p.body = ctx, cancel, body
	return g.serveFastPost(w, p)
}

// acceptable reports whether the fast path may take p at all: a JSON body,
// an answer the client accepts, and no DNS-rebinding suspicion (the SDK
// handler refuses those, and so it answers them).
func (p *fastPost) acceptable() bool {
	return jsonContent(p.contentType, p.accept) && !rebindingSuspect(p.local, p.host)
}

// serveFastPost answers p, which must be acceptable, on the fast path and
// reports true, or reports false having written nothing (p goes to the SDK
// handler).
func (g *Gateway) serveFastPost(w http.ResponseWriter, p *fastPost) bool {
	msg, err := transport.DecodeMessage(p.body)
	if err != nil {
		return false
	}
	switch m := msg.(type) {
	case *jsonrpc.Response:
		return g.takeClientResponse(w, p.sid, m)
	case *jsonrpc.Request:
		if !m.IsCall() {
			if m.Method == "notifications/cancelled" {
				g.cancelFastHTTP(p.sid, m.Params)
			}
			return false // the SDK session sees every notification
		}
		if m.Method != "tools/call" {
			return false
		}
		ss := g.sessionByID(p.sid)
		if ss == nil || !g.fastHTTPSession(p.protocolVersion, ss) {
			return false
		}
		tc, ok := g.fastTarget(m.Params)
		if !ok {
			return false
		}
		g.fastCalls.Add(1)
		g.runFastHTTP(w, p, ss, m.ID, tc)
		return true
	}
	return false
}

type readCloser struct {
	io.Reader
	io.Closer
}

// jsonContent reports whether a request with this Content-Type and these
// Accept values has a JSON body and takes back either JSON or an event
// stream, as streamable HTTP requires.
func jsonContent(ct string, accept []string) bool {
	if ct != "application/json" {
		if mt, _, _ := mime.ParseMediaType(ct); mt != "application/json" {
			return false
		}
	}
	if len(accept) == 1 && (accept[0] == "application/json, text/event-stream" || accept[0] == "text/event-stream, application/json") {
		return true // what clients send; the general case follows
	}
	jsonOK, streamOK := false, false
	for _, v := range accept {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := mime.ParseMediaType(strings.TrimSpace(part))
			switch mt {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				streamOK = true
			case "*/*":
				jsonOK, streamOK = true, true
			}
		}
	}
	return jsonOK && streamOK
}

// rebindingSuspect reports a request the SDK handler refuses as a DNS
// rebinding attempt: a non-loopback Host header on a loopback listener
// (local is the listener's address, nil when unknown).
func rebindingSuspect(local net.Addr, host string) bool {
	if local == nil {
		return false
	}
	if ta, ok := local.(*net.TCPAddr); ok {
		if !ta.IP.IsLoopback() {
			return false
		}
	} else if !loopbackHostPort(local.String()) {
		return false
	}
	return !loopbackHostPort(host)
}

func loopbackHostPort(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") || host == "127.0.0.1" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// sessionByID returns the live session with id, or nil. Sessions found
// are kept in hf.sessions until they end.
func (g *Gateway) sessionByID(id string) *mcp.ServerSession {
	if v, ok := g.hf.sessions.Load(id); ok {
		return v.(*mcp.ServerSession)
	}
	for ss := range g.server.Sessions() {
		if ss.ID() == id {
			if _, loaded := g.hf.sessions.LoadOrStore(id, ss); !loaded {
				go func() {
					ss.Wait()
					g.hf.sessions.CompareAndDelete(id, ss)
				}()
			}
			return ss
		}
	}
	return nil
}

// fastHTTPSession reports whether calls on ss, made with this
// Mcp-Protocol-Version header (empty: none), can take the fast path (see
// the design note).
func (g *Gateway) fastHTTPSession(version string, ss *mcp.ServerSession) bool {
	ip := ss.InitializeParams()
	if ip == nil || ip.ProtocolVersion >= statelessProtocolVersion {
		return false
	}
	if version != "" && version != ip.ProtocolVersion {
		return false
	}
	if c := ip.Capabilities; c != nil && (c.Sampling != nil || c.Elicitation != nil) {
		return false
	}
	_, logging := g.hf.logging.Load(ss)
	return !logging
}

// trackLogLevel notes the sessions whose client set a log level: log
// messages for them must travel on the request's stream, which the fast
// path leaves to the SDK.
func (g *Gateway) trackLogLevel(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if method != "logging/setLevel" || err != nil {
			return res, err
		}
		ss, ok := req.GetSession().(*mcp.ServerSession)
		if !ok {
			return res, err
		}
		live := map[*mcp.ServerSession]bool{}
		for s := range g.server.Sessions() {
			live[s] = true
		}
		g.hf.logging.Range(func(k, _ any) bool {
			if !live[k.(*mcp.ServerSession)] {
				g.hf.logging.Delete(k) // an ended session
			}
			return true
		})
		g.hf.logging.Store(ss, true)
		return res, err
	}
}

// runFastHTTP makes one fast call for a POST and answers it.
func (g *Gateway) runFastHTTP(w http.ResponseWriter, p *fastPost, ss *mcp.ServerSession, id jsonrpc.ID, tc fastCallTarget) {
	c := &httpFastCall{id: id}
	out := &c.out
	out.w = w
	c.down = httpDownstream{ServerSession: ss, g: g, sid: p.sid, out: out}
	ctx := p.ctx
	key := string(transport.AppendID(append(append(make([]byte, 0, len(p.sid)+24), p.sid...), '/'), id))
	c.fc.cancel = p.cancel
	g.hf.inflight.Store(key, &c.fc)
	defer g.hf.inflight.CompareAndDelete(key, &c.fc)

	// A result is answered the moment it is read; an upstream's stream may
	// still be ending.
	early := c.early
	down := &c.down
	res, err := g.rawBackend.CallToolRaw(ctx, tc.server, tc.tool, tc.params, down, early)
	if err != nil && errors.Is(err, context.Canceled) && ctx.Err() != nil {
		out.close() // the client canceled or went away: no response
		return
	}
	if err == nil {
		out.finishResult(id, res)
		return
	}
	var msg []byte
	if msg, err = jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: wireError(err)}); err != nil {
		g.logger.Debug("encoding a tools/call error failed", "error", err)
		return
	}
	out.finish(msg)
}

// httpFastCall is one fast HTTP call's state, in one allocation.
type httpFastCall struct {
	id   jsonrpc.ID
	out  fastResponse
	down httpDownstream
	fc   fastCall
}

func (c *httpFastCall) early(res json.RawMessage) { c.out.finishResult(c.id, res) }

// cancelFastHTTP ends the fast call a notifications/cancelled names.
func (g *Gateway) cancelFastHTTP(sid string, raw json.RawMessage) {
	key, ok := cancelledKey(raw)
	if !ok {
		return
	}
	if fc, ok := g.hf.inflight.Load(sid + "/" + key); ok {
		fc.(*fastCall).cancel()
	}
}

// takeClientResponse hands a client's answer to a request sent on a fast
// call's stream to the call waiting for it (202 Accepted), or reports false.
func (g *Gateway) takeClientResponse(w http.ResponseWriter, sid string, resp *jsonrpc.Response) bool {
	key, ok := resp.ID.Raw().(string)
	if !ok || !strings.HasPrefix(key, clientRequestPrefix) {
		return false
	}
	v, ok := g.hf.pending.Load(key)
	if !ok || v.(*clientRequest).sessionID != sid || !g.hf.pending.CompareAndDelete(key, v) {
		return false
	}
	cr := v.(*clientRequest)
	cr.ch <- resp
	w.WriteHeader(http.StatusAccepted)
	return true
}

// fastResponse is the answer to one fast POST: JSON unless something had
// to be sent before the result, which makes it an SSE stream.
type fastResponse struct {
	mu        sync.Mutex
	w         http.ResponseWriter
	streaming bool
	done      bool
}

// event sends msg ahead of the result, as an SSE event.
func (o *fastResponse) event(msg []byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done {
		return errors.New("the call has already been answered")
	}
	if !o.streaming {
		o.streaming = true
		h := o.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache, no-transform")
		o.w.WriteHeader(http.StatusOK)
	}
	return o.writeEvent(msg)
}

func (o *fastResponse) writeEvent(msg []byte) error {
	buf := make([]byte, 0, len(msg)+24)
	buf = append(buf, "event: message\ndata: "...)
	buf = append(buf, msg...)
	buf = append(buf, "\n\n"...)
	if _, err := o.w.Write(buf); err != nil {
		return err
	}
	if f, ok := o.w.(http.Flusher); ok {
		f.Flush()
	}
	return nil
}

// finish answers the call with msg.
func (o *fastResponse) finish(msg []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done {
		return
	}
	o.done = true
	if o.streaming {
		o.writeEvent(msg)
		return
	}
	if jw, ok := o.w.(jsonWriter); ok && jw.writeJSON(nil, msg, nil) {
		return // the front's writer: sent as it is
	}
	h := o.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(msg)))
	o.w.WriteHeader(http.StatusOK)
	o.w.Write(msg)
	// Send it now: the handler may have more to do (draining the
	// upstream's stream) before it returns.
	switch w := o.w.(type) {
	case interface{ finish() error }:
		w.finish()
	case http.Flusher:
		w.Flush()
	}
}

// jsonWriter is a ResponseWriter that writes a whole JSON answer at once,
// given in three parts (the front's).
type jsonWriter interface {
	writeJSON(head, msg, tail []byte) bool
}

// finishResult answers the call with result, as finish(RawResponse(id,
// result)) does, without building the message when the writer can write
// it in parts.
func (o *fastResponse) finishResult(id jsonrpc.ID, result json.RawMessage) {
	o.mu.Lock()
	if jw, ok := o.w.(jsonWriter); ok && !o.done && !o.streaming {
		var buf [64]byte
		head := transport.AppendID(append(buf[:0], `{"jsonrpc":"2.0","id":`...), id)
		head = append(head, `,"result":`...)
		if jw.writeJSON(head, result, []byte("}")) {
			o.done = true
			o.mu.Unlock()
			return
		}
	}
	o.mu.Unlock()
	o.finish(transport.RawResponse(id, result))
}

// close ends the response without an answer.
func (o *fastResponse) close() {
	o.mu.Lock()
	o.done = true
	o.mu.Unlock()
}

// httpDownstream is the client of a fast HTTP call as the backend sees it:
// the SDK session, except that a request for the client's roots — the one
// server-to-client message a fast call can carry (calls with a progress
// token, and clients that take sampling, elicitation or logs, go the SDK
// path) — goes on the fast response's own stream.
type httpDownstream struct {
	*mcp.ServerSession
	g   *Gateway
	sid string
	out *fastResponse
}

func (d *httpDownstream) ListRoots(ctx context.Context, p *mcp.ListRootsParams) (*mcp.ListRootsResult, error) {
	raw, err := d.request(ctx, "roots/list", p)
	if err != nil {
		return nil, err
	}
	var res mcp.ListRootsResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("roots/list: decoding the client's answer: %w", err)
	}
	return &res, nil
}

// request sends a request to the client on the call's stream and waits for
// the answer the client POSTs back.
func (d *httpDownstream) request(ctx context.Context, method string, params any) (json.RawMessage, error) {
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	hf := &d.g.hf
	key := clientRequestPrefix + strconv.FormatUint(hf.seq.Add(1), 10)
	cr := &clientRequest{sessionID: d.sid, ch: make(chan *jsonrpc.Response, 1)}
	hf.pending.Store(key, cr)
	defer hf.pending.Delete(key)
	if err := d.out.event(transport.RawRequest(key, method, raw)); err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	select {
	case resp := <-cr.ch:
		if resp.Error != nil {
			return nil, resp.Error
		}
		return resp.Result, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
