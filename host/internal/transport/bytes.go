package transport

// Bytes from HTTP upstreams are bounded twice before they are held
// (docs/security.md, "Bytes from upstream servers"):
//
//   - per message: a response body larger than the server's
//     max_message_size is not read past the limit, on the link's
//     http.Client: the go-sdk reads a JSON response body whole, with no
//     limit, and ends the session on an event over its own limit. Each
//     event of an event stream is bounded in events.go.
//   - across the host: the bytes of JSON responses are reserved from the
//     host's ResultBudget as they arrive and released when the call's
//     result has been handed on or dropped: when the gateway has written
//     the answer to its client (HoldResultsFor), else when the upstream
//     call returns. A result that arrives whole — an event over 64 KiB of
//     a call's own event stream (events.go), a stdio line or a plugin
//     frame (the supervisor's process connection) — is counted once read
//     (HoldResponse) and cannot wait: without room it is dropped and its
//     call fails as busy.
//
// A response refused by either bound fails as an error of RoundTrip. The
// go-sdk treats a failed RoundTrip as that request's failure (it wraps it in
// jsonrpc2.ErrRejected) and keeps the session; a failed body read, by
// contrast, would end the whole session. So a JSON body is read to its end
// (or its Content-Length checked) inside RoundTrip, before the go-sdk sees
// the response.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// ErrMessageTooLarge is wrapped by the error of a call whose response from
// the upstream was larger than the server's max_message_size.
var ErrMessageTooLarge = errors.New("upstream response larger than max_message_size")

// ErrBusy is wrapped by the error of a call whose response could not be
// held because the host's max_inflight_bytes were taken by other calls'
// responses until the call's deadline.
var ErrBusy = errors.New("upstream response bytes in flight at the host's max_inflight_bytes")

// A ResultBudget bounds the bytes of upstream responses a Host holds at
// once, across all its servers and calls. Each Host has its own. Each
// server may hold at most its share of it (SetShares), so that one
// upstream flooding the host cannot starve the calls to the others.
type ResultBudget struct {
	limit int64

	mu          sync.Mutex    // guards everything below
	used        int64         // bytes reserved now
	waitingHeld int64         // bytes held by readers waiting to reserve more
	waiters     int           // readers waiting for room
	room        chan struct{} // closed (and replaced) when bytes are released
	servers     map[string]*serverHold
	shares      map[string]int64 // each server's share; absent: the whole limit
}

// serverHold is what one server's responses hold of the budget.
type serverHold struct {
	used, waitingHeld int64
}

// NewResultBudget returns a budget of limit bytes; limit <= 0 means
// config.DefaultMaxInflightBytes.
func NewResultBudget(limit int64) *ResultBudget {
	if limit <= 0 {
		limit = config.DefaultMaxInflightBytes
	}
	return &ResultBudget{limit: limit, room: make(chan struct{}), servers: map[string]*serverHold{}}
}

// Limit returns the budget's size in bytes.
func (b *ResultBudget) Limit() int64 { return b.limit }

// InUse returns the bytes reserved now.
func (b *ResultBudget) InUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// ServerInUse returns the bytes server's responses hold now.
func (b *ResultBudget) ServerInUse(server string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h := b.servers[server]; h != nil {
		return h.used
	}
	return 0
}

// Share is the most of a budget of limit bytes that one of n servers,
// whose messages may be maxMessage bytes, holds at once: an even share
// of the budget, but never less than two messages, nor more than the
// whole (docs/security.md, "Bytes from upstream servers").
func Share(limit int64, n int, maxMessage int64) int64 {
	share := limit
	if n > 1 {
		share = max(limit/int64(n), 2*maxMessage)
	}
	return min(share, limit)
}

// SetShares sets the share of each server (by name) in the budget: its
// max_message_size, from which Share derives it. A server not named has
// the whole budget. Called when the configuration is loaded or reloaded;
// bytes held beyond a new, smaller share stay held until released.
func (b *ResultBudget) SetShares(maxMessage map[string]int64) {
	shares := make(map[string]int64, len(maxMessage))
	for name, m := range maxMessage {
		shares[name] = Share(b.limit, len(maxMessage), m)
	}
	b.mu.Lock()
	b.shares = shares
	close(b.room)
	b.room = make(chan struct{})
	b.mu.Unlock()
}

// ShareOf returns server's share of the budget in bytes.
func (b *ResultBudget) ShareOf(server string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.shareLocked(server)
}

func (b *ResultBudget) shareLocked(server string) int64 {
	if s, ok := b.shares[server]; ok {
		return s
	}
	return b.limit
}

func (b *ResultBudget) holdOf(server string) *serverHold {
	h := b.servers[server]
	if h == nil {
		h = &serverHold{}
		b.servers[server] = h
	}
	return h
}

// fits reports whether n more bytes for server fit both the budget and
// the server's share. Called with b.mu held.
func (b *ResultBudget) fits(server string, n int64) bool {
	return b.used+n <= b.limit && b.holdOf(server).used+n <= b.shareLocked(server)
}

func (b *ResultBudget) take(server string, n int64) {
	b.used += n
	b.holdOf(server).used += n
}

// reserve reserves n bytes for a reader of no particular server (the
// whole budget is its share); see reserveFor.
func (b *ResultBudget) reserve(ctx context.Context, held, n int64) error {
	return b.reserveFor(ctx, "", held, n)
}

// reserveFor reserves n more bytes for a reader of server's responses that
// holds held bytes of the budget already, waiting for other readers to
// release theirs until ctx is done. A reader that holds bytes and waits
// for more could wait for another that does the same: when every byte
// reserved (of the budget, or of the server's share) is held by such
// waiting readers, none would ever be released, and the reader that found
// it so fails (and releases what it holds) instead of waiting.
func (b *ResultBudget) reserveFor(ctx context.Context, server string, held, n int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if held+n > b.shareLocked(server) {
		return ErrBusy
	}
	h := b.holdOf(server)
	waiting := false
	defer func() {
		if waiting {
			b.waitingHeld -= held
			h.waitingHeld -= held
			b.waiters--
		}
	}()
	for {
		if b.fits(server, n) {
			b.take(server, n)
			return nil
		}
		if !waiting {
			b.waitingHeld += held
			h.waitingHeld += held
			b.waiters++
			waiting = true
		}
		if held > 0 && (b.waitingHeld >= b.used || h.waitingHeld >= h.used) {
			return ErrBusy
		}
		room := b.room
		b.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			b.mu.Lock()
			return fmt.Errorf("%w: %w", ErrBusy, ctx.Err())
		}
		b.mu.Lock()
	}
}

func (b *ResultBudget) release(n int64) { b.releaseFor("", n) }

func (b *ResultBudget) releaseFor(server string, n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	if h := b.servers[server]; h != nil {
		h.used -= n
		if h.used == 0 && h.waitingHeld == 0 {
			delete(b.servers, server)
		}
	}
	close(b.room)
	b.room = make(chan struct{})
	b.mu.Unlock()
}

// budgetStep is how much a response of unknown length reserves at a time
// while it is read.
const budgetStep = 256 << 10

// boundedRoundTripper bounds the response bodies of one server's link
// (see the note at the top of this file).
type boundedRoundTripper struct {
	base   http.RoundTripper
	server string
	limit  int64
	budget *ResultBudget
	logger hclog.Logger
}

func (rt *boundedRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rt.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "text/event-stream" {
		// Read one event at a time, each bounded (events.go).
		rt.boundEvents(req, resp)
		return resp, nil
	}
	if resp.ContentLength > rt.limit {
		resp.Body.Close()
		return nil, rt.tooLarge(req, resp.ContentLength)
	}
	if mt != "application/json" || resp.StatusCode != http.StatusOK {
		// An error page or an empty acknowledgement: read by the go-sdk
		// for its error message at most, and never past the limit.
		resp.Body = &limitedBody{body: resp.Body, left: rt.limit, err: func() error { return rt.tooLarge(req, -1) }}
		return resp, nil
	}
	ctx := req.Context()
	if resp.ContentLength >= 0 {
		// The whole answer is reserved before any of it is read; net/http
		// reads no more than Content-Length.
		if err := rt.budget.reserveFor(ctx, rt.server, 0, resp.ContentLength); err != nil {
			resp.Body.Close()
			return nil, rt.busy(req, err)
		}
		rt.holdUntilDone(ctx, resp.ContentLength)
		return resp, nil
	}
	// Chunked: read it all here, so that a response over the limit fails
	// this call (see the note at the top of the file).
	buf, err := rt.readChunked(req, resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(buf))
	resp.ContentLength = int64(len(buf))
	return resp, nil
}

// readChunked reads a body of unknown length whole, reserving its bytes
// from the budget as they arrive. The reservation is held until ctx is
// done (holdUntilDone).
func (rt *boundedRoundTripper) readChunked(req *http.Request, body io.Reader) ([]byte, error) {
	ctx := req.Context()
	var buf []byte
	var held int64
	for {
		if int64(len(buf)) == held && held < rt.limit {
			step := min(int64(budgetStep), rt.limit-held)
			if err := rt.budget.reserveFor(ctx, rt.server, held, step); err != nil {
				rt.budget.releaseFor(rt.server, held)
				return nil, rt.busy(req, err)
			}
			held += step
		}
		// At the limit, one byte more (not counted) tells a body over it.
		end := max(held, int64(len(buf))+1)
		buf = growTo(buf, end)
		n, err := body.Read(buf[len(buf):end])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > rt.limit {
			rt.budget.releaseFor(rt.server, held)
			return nil, rt.tooLarge(req, -1)
		}
		if err == io.EOF {
			// Keep only what the answer holds.
			rt.budget.releaseFor(rt.server, held-int64(len(buf)))
			rt.holdUntilDone(ctx, int64(len(buf)))
			return buf, nil
		}
		if err != nil {
			rt.budget.releaseFor(rt.server, held)
			return nil, err
		}
	}
}

// growTo returns buf with a capacity of at least n, doubling as it grows
// so that a large answer is copied a few times, not once per step.
func growTo(buf []byte, n int64) []byte {
	if int64(cap(buf)) >= n {
		return buf
	}
	c := max(n, 2*int64(cap(buf)))
	nb := make([]byte, len(buf), c)
	copy(nb, buf)
	return nb
}

// resultsHeldKey marks a context whose end is when its calls' results
// have been delivered (HoldResultsFor).
type resultsHeldKey struct{}

// HoldResultsFor returns ctx marked so that the upstream response bytes of
// a call made under it (with any context derived from it) count against
// the ResultBudget until ctx itself is done, not only until the upstream
// call returns. The gateway marks the context of a client's request, which
// ends once the answer has been written to the client: so the budget
// covers the result on its whole way through mcpvisor. ctx must end
// soon after the call it carries, or the budget stays taken.
//
// A context value, because the bytes are counted inside the go-sdk's
// HTTP requests, which carry nothing else of the caller's.
//
// A ctx marked already (HoldResultsUntil) keeps its mark.
func HoldResultsFor(ctx context.Context) context.Context {
	if ctx.Done() == nil || HoldsResults(ctx) {
		return ctx
	}
	return context.WithValue(ctx, resultsHeldKey{}, ctx)
}

// HoldResultsUntil is HoldResultsFor with the end of the hold given apart
// from ctx: the upstream response bytes of a call made under the returned
// context count against the ResultBudget until until is done. The
// gateway's HTTP handler gives the context of the HTTP request that
// carries the call, which ends once its answer has been written to the
// client — or the client is gone, or missed its write deadline
// (docs/security.md, "Bytes from upstream servers"). until must end soon
// after the call.
func HoldResultsUntil(ctx, until context.Context) context.Context {
	if until.Done() == nil {
		return HoldResultsFor(ctx)
	}
	return context.WithValue(ctx, resultsHeldKey{}, until)
}

// HoldsResults reports whether ctx was marked by HoldResultsFor: a call
// made for a downstream client, whose result is handed on when that
// context ends. Only such calls' responses are counted by HoldResponse; a
// list or ping the supervisor makes for itself is bounded per message.
func HoldsResults(ctx context.Context) bool {
	_, ok := ctx.Value(resultsHeldKey{}).(context.Context)
	return ok
}

// holdUntilDone keeps n bytes of the budget until ctx, the context of the
// call whose answer they are, is done — or, if the call was made under
// HoldResultsFor, until that context is: then the call's result has been
// handed on, or dropped. Every call mcpvisor makes has a deadline (the
// server's timeout), so every such context ends.
func (rt *boundedRoundTripper) holdUntilDone(ctx context.Context, n int64) {
	rt.budget.holdUntilDone(ctx, rt.server, n)
}

func (b *ResultBudget) holdUntilDone(ctx context.Context, server string, n int64) {
	if n == 0 {
		return
	}
	if held, ok := ctx.Value(resultsHeldKey{}).(context.Context); ok {
		ctx = held
	}
	if ctx.Done() == nil {
		// A context that never ends (only a test or an embedder's
		// direct use builds one): hold nothing.
		b.releaseFor(server, n)
		return
	}
	context.AfterFunc(ctx, func() { b.releaseFor(server, n) })
}

// tooLarge is the error of a response over the limit; size is its
// Content-Length, or -1 when unknown.
func (rt *boundedRoundTripper) tooLarge(req *http.Request, size int64) *recovery.Error {
	op := requestMethod(req)
	rt.logger.Warn("upstream response over max_message_size refused", "op", op, "limit", rt.limit, "content_length", size)
	return MessageTooLarge(rt.server, op, rt.limit, size)
}

// MessageTooLarge is the error of a call to server whose response was
// larger than its max_message_size, limit: size bytes, or -1 when only
// "more than limit" is known. Every transport fails such a call with it.
func MessageTooLarge(server, op string, limit, size int64) *recovery.Error {
	what := "more than " + config.FormatSize(limit)
	if size >= 0 {
		what = fmt.Sprintf("%d bytes", size)
	}
	return &recovery.Error{Server: server, Op: op, Class: recovery.Application,
		Reason: fmt.Sprintf("the server's response (%s) is larger than its max_message_size (%s); the call failed and the server stays connected. If results this large are expected, raise max_message_size in the server block",
			what, config.FormatSize(limit)),
		Limit: "max_message_size", Err: ErrMessageTooLarge}
}

// busy is the error of a response the budget had no room for.
func (rt *boundedRoundTripper) busy(req *http.Request, err error) error {
	if errors.Is(err, context.Canceled) {
		// The caller gave up while waiting: that is all that happened.
		return context.Canceled
	}
	op := requestMethod(req)
	rt.logger.Warn("upstream response refused: max_inflight_bytes reached", "op", op, "limit", rt.budget.Limit())
	return Busy(rt.server, op, rt.budget.Limit(), err)
}

// Busy is the error of a call to server whose response found no room in
// the host's max_inflight_bytes (limit bytes), or in the server's share of
// it; err wraps ErrBusy.
func Busy(server, op string, limit int64, err error) *recovery.Error {
	return &recovery.Error{Server: server, Op: op, Class: recovery.Application,
		Reason: fmt.Sprintf("mcpvisor is busy: the responses in flight fill max_inflight_bytes of the host block (%s), or this server's share of it, so this call's response was dropped; retry later, or raise max_inflight_bytes",
			config.FormatSize(limit)),
		Limit: "max_inflight_bytes", Err: err}
}

// HoldResponse counts n bytes of server's response that arrived whole (a stdio
// line, a plugin frame) against the budget until the call it answers has
// been handed on: until ctx, the call's context, or the context it was
// marked with by HoldResultsFor, is done. It reports false, holding
// nothing, when the budget has no room: the response is already in memory
// and is then dropped, and the reader never waits, since waiting would
// stall every other message of the connection. A nil budget holds nothing
// and always has room.
func (b *ResultBudget) HoldResponse(ctx context.Context, server string, n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	b.mu.Lock()
	if !b.fits(server, n) {
		b.mu.Unlock()
		return false
	}
	b.take(server, n)
	b.mu.Unlock()
	b.holdUntilDone(ctx, server, n)
	return true
}

// requestMethod is the JSON-RPC method of an MCP request, for messages:
// the Mcp-Method header where the protocol version has it, else the
// method in the body the go-sdk sent.
func requestMethod(req *http.Request) string {
	if m := req.Header.Get("Mcp-Method"); m != "" {
		return m
	}
	_, method := requestCall(req)
	return method
}

// requestCall returns the id and method of the JSON-RPC call a request
// carries (nil and "" for anything else), from the body the go-sdk sent,
// which it can send again (GetBody).
func requestCall(req *http.Request) (json.RawMessage, string) {
	if req.GetBody == nil {
		return nil, ""
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, ""
	}
	defer body.Close()
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.NewDecoder(io.LimitReader(body, maxMethodScan)).Decode(&msg) != nil || msg.Method == "" {
		return nil, ""
	}
	if len(msg.ID) == 0 || string(msg.ID) == "null" {
		return nil, msg.Method
	}
	return msg.ID, msg.Method
}

// maxMethodScan bounds what requestMethod reads of a request body.
const maxMethodScan = 1 << 20

// limitedBody fails a read past left bytes with err().
type limitedBody struct {
	body io.ReadCloser
	left int64
	err  func() error
}

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.left < 0 {
		return 0, l.err()
	}
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.body.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		n += int(l.left)
		l.err = sync.OnceValue(l.err)
		return n, l.err()
	}
	return n, err
}

func (l *limitedBody) Close() error { return l.body.Close() }
