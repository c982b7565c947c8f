package host

// Downstream request bounds: what a client without a token can make the
// host hold, and for how long (docs/security.md, "Downstream requests and
// bodies").
//
// A request body is read here, before any endpoint sees it, as its bytes
// arrive: the buffer grows with what was sent, never with what
// Content-Length announces, and every byte of buffer is first taken from
// a host-wide budget (max_body_bytes_inflight). The read has a deadline
// (body_timeout), set on the connection for this request only with
// http.ResponseController: the server's ReadTimeout would also end the
// clients' long-lived GET streams, whose connection net/http keeps reading
// in the background. Once the body is in, the deadline is lifted and the
// bytes are handed on; the go-sdk handler reads them again (its own
// io.ReadAll, bounded by its 4 MiB MaxRequestBodyBytes), which is a copy
// of a complete body, made at once, not a wait on the client.
//
// A refusal leaves the read deadline in the past, so net/http cannot try
// to drain the rest of the body from a client that stalled; the
// connection closes after the answer.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/limits"
	"github.com/mcpvisor/mcpvisor/host/internal/wire"
)

const (
	// maxRequestBody is the largest request body the host accepts: the
	// go-sdk handler's own limit, checked here first so that a larger
	// declared Content-Length is refused before a byte is read.
	maxRequestBody = mcp.DefaultMaxRequestBodyBytes

	// bodyChunk is the smallest step a body buffer grows by.
	bodyChunk = 32 << 10

	// bodyBudgetWait is how long a request whose body would go past
	// max_body_bytes_inflight waits for other bodies to finish arriving
	// before it is refused with 503.
	bodyBudgetWait = time.Second

	// retryAfterBusy is the Retry-After of a 503 for a full budget or cap:
	// the bodies and calls that fill it end within seconds.
	retryAfterBusy = "1"

	// retryAfterStopping is the Retry-After of a 503 for a new session on
	// a host that is draining or stopping: a load balancer sends the retry
	// to another replica; a lone host is back after its restart.
	retryAfterStopping = "5"
)

// requestLimits enforces the host block's downstream request bounds in
// front of every endpoint (after the ingress checks: a client without the
// token is refused before its body is read).
type requestLimits struct {
	h      *Host
	next   http.Handler
	logger hclog.Logger

	// bodyTimeout is the host block's body_timeout.
	bodyTimeout time.Duration
	// bodies is the budget of max_body_bytes_inflight.
	bodies *bodyBudget
	// stateless holds one token per stateless request being served; its
	// capacity is max_inflight.
	stateless chan struct{}
	// perSession is max_inflight_per_session; sessions counts the
	// requests in flight of each session-based session, by id.
	perSession int
	sessionsMu sync.Mutex
	sessions   map[string]int
}

func newRequestLimits(h *Host, hc config.Host, next http.Handler) *requestLimits {
	return &requestLimits{
		h:           h,
		next:        next,
		logger:      h.logger.Named("http"),
		bodyTimeout: cmp.Or(hc.BodyTimeout, config.DefaultBodyTimeout),
		bodies:      newBodyBudget(cmp.Or(hc.MaxBodyBytesInflight, config.DefaultMaxBodyBytesInflight)),
		stateless:   make(chan struct{}, cmp.Or(hc.MaxInflight, config.DefaultMaxInflight)),
		perSession:  cmp.Or(hc.MaxInflightPerSession, config.DefaultMaxInflightPerSession),
		sessions:    map[string]int{},
	}
}

func (l *requestLimits) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if opensSession(r) && l.h.stoppingNow() {
		l.logger.Info("http request refused: a new session while the host drains or stops", "remote", r.RemoteAddr)
		refuse(w, http.StatusServiceUnavailable, retryAfterStopping,
			"Service Unavailable: this mcpvisor is shutting down and opens no new sessions; connect again (behind a load balancer, another replica answers)")
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		body, ok := l.readBody(w, r)
		if !ok {
			return
		}
		defer body.release()
		r.Body = body
		r.ContentLength = int64(body.size)
		if statelessCall(r, body.chunks) {
			select {
			case l.stateless <- struct{}{}:
				defer func() { <-l.stateless }()
			default:
				l.h.limitHits.Hit(limits.MaxInflight)
				l.logger.Warn("http request refused: too many stateless requests in flight", "max_inflight", cap(l.stateless), "remote", r.RemoteAddr)
				refuse(w, http.StatusServiceUnavailable, retryAfterBusy, fmt.Sprintf(
					"Service Unavailable: %d stateless requests are in flight, the most this host serves at once (max_inflight); retry shortly or raise max_inflight", cap(l.stateless)))
				return
			}
		} else if id := sessionCall(r, body.chunks); id != "" {
			if !l.enterSession(id) {
				l.h.limitHits.Hit(limits.MaxInflightPerSession)
				l.logger.Warn("http request refused: too many requests of one session in flight", "max_inflight_per_session", l.perSession, "remote", r.RemoteAddr)
				refuse(w, http.StatusServiceUnavailable, retryAfterBusy, fmt.Sprintf(
					"Service Unavailable: this session has %d requests in flight, the most one session may have at once (max_inflight_per_session); retry shortly or raise max_inflight_per_session", l.perSession))
				return
			}
			defer l.leaveSession(id)
		}
	}
	l.next.ServeHTTP(w, r)
}

// enterSession counts one more request in flight for session id, or
// reports false when it has max_inflight_per_session already.
func (l *requestLimits) enterSession(id string) bool {
	l.sessionsMu.Lock()
	defer l.sessionsMu.Unlock()
	if l.sessions[id] >= l.perSession {
		return false
	}
	l.sessions[id]++
	return true
}

func (l *requestLimits) leaveSession(id string) {
	l.sessionsMu.Lock()
	defer l.sessionsMu.Unlock()
	if l.sessions[id]--; l.sessions[id] <= 0 {
		delete(l.sessions, id)
	}
}

// sessionCall returns the session id of r when it is a request (not a
// notification or a response) of a session-based (2025-11-25 and older)
// session, which max_inflight_per_session counts; "" otherwise. A POST is
// one request in flight until it has been answered.
func sessionCall(r *http.Request, body [][]byte) string {
	id := r.Header.Get("Mcp-Session-Id")
	if id == "" || r.Method != http.MethodPost || r.URL.Path != "/mcp" || r.Header.Get("Mcp-Protocol-Version") >= wire.Stateless {
		return ""
	}
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	b := bytes.Join(body, nil)
	if len(body) == 1 {
		b = body[0]
	}
	if json.Unmarshal(b, &msg) != nil {
		// A batch (2025-03-26) or not JSON: counted, like a call.
		return id
	}
	if msg.Method == "" || len(msg.ID) == 0 || string(msg.ID) == "null" {
		return ""
	}
	return id
}

// readBody reads r's body within body_timeout and the body budget. On a
// refusal it has answered the client and returns false.
func (l *requestLimits) readBody(w http.ResponseWriter, r *http.Request) (*heldBody, bool) {
	if r.ContentLength > maxRequestBody {
		l.h.limitHits.Hit(limits.MaxBodyBytesInflight)
		l.refuseBody(w, http.StatusRequestEntityTooLarge, "", fmt.Sprintf(
			"Request Entity Too Large: the body is %d bytes; a request may carry at most %d", r.ContentLength, maxRequestBody))
		return nil, false
	}
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(l.bodyTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		l.logger.Debug("setting the request body's read deadline failed", "error", err)
	}
	body := &heldBody{budget: l.bodies}
	var cur []byte // the last chunk, being filled
	for {
		if len(cur) == cap(cur) {
			// A new chunk: bodyChunk, or for a short declared length just
			// that (and the byte that sees EOF), never past one byte over
			// the limit (that byte tells a body too large). Chunks are
			// never copied into larger ones: growing a buffer would leave
			// garbage as large as the body.
			first := body.size == 0
			step := bodyChunk
			if first && r.ContentLength >= 0 && r.ContentLength < bodyChunk {
				step = int(r.ContentLength) + 1
			}
			step = min(step, maxRequestBody+1-body.size)
			if !l.bodies.take(r.Context(), int64(step), first, bodyBudgetWait) {
				body.release()
				l.logger.Warn("http request refused: request bodies still arriving fill max_body_bytes_inflight", "max_body_bytes_inflight", l.bodies.max, "remote", r.RemoteAddr)
				l.h.limitHits.Hit(limits.MaxBodyBytesInflight)
				l.refuseBody(w, http.StatusServiceUnavailable, retryAfterBusy, fmt.Sprintf(
					"Service Unavailable: request bodies still arriving hold the %d bytes this host buffers at once (max_body_bytes_inflight); retry shortly", l.bodies.max))
				return nil, false
			}
			body.held += int64(step)
			cur = make([]byte, 0, step)
			body.chunks = append(body.chunks, cur)
		}
		n, err := r.Body.Read(cur[len(cur):cap(cur)])
		cur = cur[:len(cur)+n]
		body.chunks[len(body.chunks)-1] = cur
		body.size += n
		if body.size > maxRequestBody {
			body.release()
			l.h.limitHits.Hit(limits.MaxBodyBytesInflight)
			l.refuseBody(w, http.StatusRequestEntityTooLarge, "", fmt.Sprintf(
				"Request Entity Too Large: a request may carry at most %d bytes", maxRequestBody))
			return nil, false
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			body.release()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				l.logger.Warn("http request refused: its body did not arrive in time", "body_timeout", l.bodyTimeout, "received", body.size, "remote", r.RemoteAddr)
				l.h.limitHits.Hit(limits.BodyTimeout)
				l.refuseBody(w, http.StatusRequestTimeout, "", fmt.Sprintf(
					"Request Timeout: the request body did not arrive within %s (body_timeout)", l.bodyTimeout))
				return nil, false
			}
			l.refuseBody(w, http.StatusBadRequest, "", "Bad Request: reading the request body failed")
			return nil, false
		}
	}
	// The whole body is in: lift the deadline, or net/http's background
	// read of the connection would end the request's context at it.
	rc.SetReadDeadline(time.Time{})
	readers := make([]io.Reader, len(body.chunks))
	for i, c := range body.chunks {
		readers[i] = bytes.NewReader(c)
	}
	body.Reader = io.MultiReader(readers...)
	return body, true
}

// refuseBody answers a request whose body was not read to its end and
// makes sure the connection closes after the answer: the read deadline is
// put in the past, so net/http does not wait for the rest of the body.
func (l *requestLimits) refuseBody(w http.ResponseWriter, status int, retryAfter, msg string) {
	http.NewResponseController(w).SetReadDeadline(time.Now())
	w.Header().Set("Connection", "close")
	refuse(w, status, retryAfter, msg)
}

// refuse answers an error status with a message saying what to do.
func refuse(w http.ResponseWriter, status int, retryAfter, msg string) {
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	http.Error(w, msg, status)
}

// opensSession reports whether r would open a downstream session: a POST
// without a session id from a client older than the stateless protocol.
func opensSession(r *http.Request) bool {
	return r.Method == http.MethodPost && r.URL.Path == "/mcp" && r.Header.Get("Mcp-Session-Id") == "" &&
		r.Header.Get("Mcp-Protocol-Version") < wire.Stateless
}

// statelessCall reports whether r is a stateless (2026-07-28) MCP request
// that max_inflight counts: every one but subscriptions/listen, which is
// a stream a client keeps open, not a call.
func statelessCall(r *http.Request, body [][]byte) bool {
	if r.Method != http.MethodPost || r.URL.Path != "/mcp" || r.Header.Get("Mcp-Protocol-Version") < wire.Stateless {
		return false
	}
	var msg struct {
		Method string `json:"method"`
	}
	if len(body) == 1 {
		return json.Unmarshal(body[0], &msg) != nil || msg.Method != "subscriptions/listen"
	}
	return json.Unmarshal(bytes.Join(body, nil), &msg) != nil || msg.Method != "subscriptions/listen"
}

// heldBody is a request body read in full, whose buffer is charged to the
// body budget until the handler has read it or returned.
type heldBody struct {
	io.Reader // over chunks
	chunks    [][]byte
	size      int // bytes in chunks
	budget    *bodyBudget
	held      int64 // bytes taken from budget: the chunks' capacity
	once      sync.Once
}

func (b *heldBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	if err == io.EOF {
		b.release()
	}
	return n, err
}

func (b *heldBody) Close() error {
	b.release()
	return nil
}

// release gives the body's bytes back to the budget, once.
func (b *heldBody) release() {
	b.once.Do(func() { b.budget.give(b.held) })
}

// bodyBudget is the host-wide budget of bytes held by request bodies
// being read (max_body_bytes_inflight).
type bodyBudget struct {
	max int64
	mu  sync.Mutex
	// used and freed are guarded by mu; freed is closed, and replaced,
	// each time bytes are given back.
	used  int64
	freed chan struct{}
}

func newBodyBudget(max int64) *bodyBudget {
	return &bodyBudget{max: max, freed: make(chan struct{})}
}

// take reserves n bytes, waiting up to wait (or until ctx ends) for other
// bodies to give theirs back. It reports whether it got them. Only a
// body's first chunk may use the last quarter of the budget: large bodies
// that stall cannot keep requests of the usual size (a few kB) from
// arriving.
func (b *bodyBudget) take(ctx context.Context, n int64, first bool, wait time.Duration) bool {
	limit := b.max
	if !first {
		limit -= b.max / 4
	}
	var timeout <-chan time.Time
	for {
		b.mu.Lock()
		if b.used+n <= limit {
			b.used += n
			b.mu.Unlock()
			return true
		}
		freed := b.freed
		b.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-freed:
		case <-timeout:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// give returns n bytes to the budget.
func (b *bodyBudget) give(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	close(b.freed)
	b.freed = make(chan struct{})
}
