package gateway

/*
Design note: sampling, elicitation and roots for 2026-07-28 clients.

From protocol 2026-07-28 on, a server may not send requests to its client
while serving one. A tool call, prompts/get or resources/read that needs
the client's help ends with an input_required result instead: the requests
the server needs answered (inputRequests) and an opaque requestState. The
client answers them and sends the same request again, with its answers
(inputResponses) and the requestState.

Upstreams on the session-based protocols (2025-xx), and the go-sdk client
itself when it fulfils a 2026 upstream's input_required result, still ask
mid-call: a sampling/createMessage, elicitation/create or roots/list
request arrives while the upstream call is running, and the call cannot
finish until it is answered. For a 2026-07-28 downstream the gateway
bridges the two: the upstream call runs on a goroutine of its own with an
bridgedCall as its Downstream, which turns each such request into an
entry of an input_required result; the client's retry, found by its
requestState, answers them and the upstream call goes on. The first
request that finds the call finished gets its result.

requestState is a random 128-bit id, known only to the client that got it,
and refers to a call in this process: a retry that reaches another replica,
or comes after the call ended (inputWait without a retry ends it), gets an
error saying to call again. The upstream's call timeout bounds the whole
exchange as it bounds any call.
*/

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/upstream"
	"github.com/mcpvisor/mcpvisor/host/internal/wire"
)

// inputWait is how long a call waiting for a client's answers is kept
// after its input_required result was sent. A client that does not come
// back within it has given up; the upstream call is cancelled.
var inputWait = 5 * time.Minute

// maxBridgedCalls bounds the calls kept waiting for clients' answers, so
// clients that never come back cannot pile up upstream calls.
var maxBridgedCalls = 1024

// needsInputBridge reports whether the client of ss gets server-to-client
// requests as input_required results: it speaks 2026-07-28 or later (as
// the go-sdk decides, a session without initialize params does too).
func needsInputBridge(ss *mcp.ServerSession) bool {
	if ss == nil {
		return false
	}
	ip := ss.InitializeParams()
	return ip == nil || ip.ProtocolVersion >= wire.Stateless
}

// inputBridge holds the calls waiting for their clients' answers.
type inputBridge struct {
	mu    sync.Mutex
	calls map[string]*bridgedCall
}

// errUnknownRequestState answers a retry whose call is not (or no longer)
// here.
var errUnknownRequestState = &jsonrpc.Error{
	Code: jsonrpc.CodeInvalidParams,
	Message: "requestState refers to no call waiting for input on this mcpvisor: it ended (answers are awaited " +
		inputWait.String() + "), or the request reached another replica; send the request again without requestState",
}

// bridgedCall is one upstream call made for a 2026-07-28 client. It is the
// call's Downstream.
type bridgedCall struct {
	bridge *inputBridge
	id     string
	cancel context.CancelFunc // ends the upstream call

	asks chan *inputAsk // requests the upstream made, not yet sent to the client
	done chan struct{}  // closed when the upstream call has returned
	res  mcp.Result     // the upstream call's outcome, set before done closes
	err  error

	// declared is what the client declared with the request that started
	// the call; set before the upstream call starts, read-only after. It is
	// computed on first use: the go-sdk decodes the request's capabilities
	// out of its _meta anew each time they are asked for (a JSON decode
	// with a 32 KiB buffer), and most calls never make an upstream request
	// that needs them (host/bench/README.md, BenchmarkCallAllocation).
	declared func() *mcp.InitializeParams

	mu    sync.Mutex
	round *mcp.ServerSession // the session of the request now waiting, nil between rounds
	rctx  context.Context    // that request's context
	token any                // that request's progress token
	open  map[string]*inputAsk
	seq   int
	idle  *time.Timer // ends the call when no retry comes (between rounds)
}

// inputAsk is one server-to-client request awaiting the client's answer.
type inputAsk struct {
	key    string
	req    mcp.InputRequest
	answer chan mcp.InputResponse // buffered: the client's answer
}

// run serves one round of a bridged request: the first (state "") starts
// the upstream call with start, a retry hands the client's answers to the
// call it names. It returns the call's outcome, or the requests the client
// must answer (asks non-nil) and the state to send back with them.
func (b *inputBridge) run(ctx context.Context, ss *mcp.ServerSession, state string, answers mcp.InputResponseMap, token any,
	start func(ctx context.Context, d *bridgedCall) (mcp.Result, error),
) (res mcp.Result, asks mcp.InputRequestMap, newState string, err error) {
	var c *bridgedCall
	launch := func() {}
	if state == "" {
		c, launch = b.start(ctx, start)
	} else {
		b.mu.Lock()
		c = b.calls[state]
		b.mu.Unlock()
		if c == nil {
			return nil, nil, "", errUnknownRequestState
		}
	}
	pending, err := c.begin(ctx, ss, token, answers)
	if err != nil {
		if state == "" {
			c.cancel() // never launched
		}
		return nil, nil, "", err
	}
	// The first round is the call's current one before the upstream call
	// starts, so a notification it sends at once (progress) finds the
	// request to carry it.
	launch()
	final := false
	defer func() { c.end(final) }()
	if len(pending) > 0 {
		// The client left some of the last round's requests unanswered.
		return nil, pending, c.id, nil
	}
	select {
	case <-c.done:
		final = true
		b.remove(c)
		return c.res, nil, "", c.err
	case a := <-c.asks:
		asks := c.collect(a)
		if err := b.keep(c); err != nil {
			final = true
			c.cancel()
			return nil, nil, "", err
		}
		return nil, asks, c.id, nil
	case <-ctx.Done():
		// The client cancelled this request, or went away: the call is
		// over for it.
		final = true
		c.cancel()
		b.remove(c)
		return nil, nil, "", ctx.Err()
	}
}

// start makes the call; launch starts the upstream call on a goroutine of
// its own, once the first round has begun. The call is kept (keep) only
// once it waits for the client's answers.
func (b *inputBridge) start(rctx context.Context, start func(ctx context.Context, d *bridgedCall) (mcp.Result, error)) (c *bridgedCall, launch func()) {
	var raw [16]byte
	rand.Read(raw[:])
	// The call outlives the request that started it (it waits for the
	// retries), keeping its values (trace and audit context); the
	// upstream's call timeout still bounds it.
	ctx, cancel := context.WithCancel(context.WithoutCancel(rctx))
	c = &bridgedCall{
		bridge: b,
		id:     hex.EncodeToString(raw[:]),
		cancel: cancel,
		asks:   make(chan *inputAsk),
		done:   make(chan struct{}),
		open:   map[string]*inputAsk{},
	}
	return c, func() {
		go func() {
			defer cancel()
			c.res, c.err = start(ctx, c)
			close(c.done)
		}()
	}
}

// keep makes c findable by its id, unless too many calls wait already.
func (b *inputBridge) keep(c *bridgedCall) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.calls[c.id]; ok {
		return nil
	}
	if len(b.calls) >= maxBridgedCalls {
		return fmt.Errorf("mcpvisor has %d calls waiting for their clients' answers to sampling, elicitation or roots requests; "+
			"answer or cancel those first", maxBridgedCalls)
	}
	if b.calls == nil {
		b.calls = map[string]*bridgedCall{}
	}
	b.calls[c.id] = c
	return nil
}

func (b *inputBridge) remove(c *bridgedCall) {
	b.mu.Lock()
	delete(b.calls, c.id)
	b.mu.Unlock()
}

// begin makes ss's request the call's current round and hands the client's
// answers on. It returns the asks still unanswered.
func (c *bridgedCall) begin(ctx context.Context, ss *mcp.ServerSession, token any, answers mcp.InputResponseMap) (mcp.InputRequestMap, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.round != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "another request is already continuing this call; wait for its result"}
	}
	if c.idle != nil {
		c.idle.Stop()
		c.idle = nil
	}
	c.round, c.rctx, c.token = ss, ctx, token
	select {
	case <-c.done:
		// The call ended (its timeout, say) while asking: its questions
		// need no answers any more.
		clear(c.open)
		return nil, nil
	default:
	}
	for key, a := range answers {
		if ask, ok := c.open[key]; ok {
			ask.answer <- a
			delete(c.open, key)
		}
	}
	if len(c.open) == 0 {
		return nil, nil
	}
	pending := mcp.InputRequestMap{}
	for key, a := range c.open {
		pending[key] = a.req
	}
	return pending, nil
}

// end closes the current round. Unless the round was the last (final),
// the call is cancelled (if still running) and forgotten when no retry
// comes within inputWait.
func (c *bridgedCall) end(final bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.round, c.rctx, c.token = nil, nil, nil
	if final {
		return
	}
	c.idle = time.AfterFunc(inputWait, func() {
		c.cancel()
		c.bridge.remove(c)
	})
}

// collect adds a and any other request the upstream has made meanwhile to
// the open asks and returns them all.
func (c *bridgedCall) collect(a *inputAsk) mcp.InputRequestMap {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		c.open[a.key] = a
		select {
		case a = <-c.asks:
			continue
		default:
		}
		break
	}
	all := mcp.InputRequestMap{}
	for key, a := range c.open {
		all[key] = a.req
	}
	return all
}

// ask sends req to the client through the next input_required result and
// waits for its answer.
func (c *bridgedCall) ask(ctx context.Context, req mcp.InputRequest) (mcp.InputResponse, error) {
	c.mu.Lock()
	c.seq++
	a := &inputAsk{key: "mcpvisor-" + strconv.Itoa(c.seq), req: req, answer: make(chan mcp.InputResponse, 1)}
	c.mu.Unlock()
	select {
	case c.asks <- a:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case resp := <-a.answer:
		return resp, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// current returns the request now waiting on the call, if any.
func (c *bridgedCall) current() (*mcp.ServerSession, context.Context, any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.round, c.rctx, c.token
}

// errNoRound is what a notification sent between rounds gets: no request
// of the client is open to carry it.
var errNoRound = errors.New("no request of the client is open to carry it (the call is waiting for the client's answers)")

func (c *bridgedCall) NotifyProgress(_ context.Context, p *mcp.ProgressNotificationParams) error {
	ss, ctx, token := c.current()
	if ss == nil {
		return errNoRound
	}
	if token == nil {
		return nil // this round asked for no progress
	}
	out := *p
	out.ProgressToken = token
	return ss.NotifyProgress(ctx, &out)
}

// InitializeParams is what the client declared with the request that
// started the call: its capabilities decide which of the upstream's requests
// may become input requests.
func (c *bridgedCall) InitializeParams() *mcp.InitializeParams {
	if c.declared == nil {
		return nil
	}
	return c.declared()
}

func (c *bridgedCall) Log(_ context.Context, p *mcp.LoggingMessageParams) error {
	ss, ctx, _ := c.current()
	if ss == nil {
		return errNoRound
	}
	return ss.Log(ctx, p)
}

func (c *bridgedCall) CreateMessage(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
	resp, err := c.ask(ctx, p)
	if err != nil {
		return nil, err
	}
	switch r := resp.(type) {
	case *mcp.CreateMessageResult:
		return r, nil
	case *mcp.CreateMessageWithToolsResult:
		if len(r.Content) != 1 {
			return nil, fmt.Errorf("the client answered sampling/createMessage with %d content blocks; the server asked on a protocol version that takes exactly one", len(r.Content))
		}
		return &mcp.CreateMessageResult{Meta: r.Meta, Content: r.Content[0], Model: r.Model, Role: r.Role, StopReason: r.StopReason}, nil
	default:
		return nil, fmt.Errorf("the client answered sampling/createMessage with a %T", resp)
	}
}

func (c *bridgedCall) Elicit(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	return askFor[*mcp.ElicitResult](ctx, c, "elicitation/create", p)
}

func (c *bridgedCall) ListRoots(ctx context.Context, p *mcp.ListRootsParams) (*mcp.ListRootsResult, error) {
	return askFor[*mcp.ListRootsResult](ctx, c, "roots/list", p)
}

// askFor asks the client req (a method request) and wants an answer of
// type R.
func askFor[R mcp.InputResponse](ctx context.Context, c *bridgedCall, method string, req mcp.InputRequest) (R, error) {
	var zero R
	resp, err := c.ask(ctx, req)
	if err != nil {
		return zero, err
	}
	r, ok := resp.(R)
	if !ok {
		return zero, fmt.Errorf("the client answered %s with a %T", method, resp)
	}
	return r, nil
}

// bridged runs one round of a 2026-07-28 client's request through the
// input bridge. caps returns the capabilities the request declared (in its
// _meta), and is called only if the upstream makes a request; the upstream's requests the client did not declare never become
// input requests. state and answers point at the request's requestState and
// inputResponses, which are the bridge's, not the upstream's: they are
// taken out of the params. call is the upstream request, inputRequired
// makes the result that asks the client for input.
func bridged[R mcp.Result](g *Gateway, ctx context.Context, ss *mcp.ServerSession, caps func() *mcp.ClientCapabilities, state *string, answers *mcp.InputResponseMap, token any,
	call func(context.Context, upstream.Downstream) (R, error),
	inputRequired func(asks mcp.InputRequestMap, state string) R,
) (R, error) {
	st, ans := *state, *answers
	*state, *answers = "", nil
	res, asks, newState, err := g.inputs.run(ctx, ss, st, ans, token,
		func(ctx context.Context, d *bridgedCall) (mcp.Result, error) {
			d.declared = sync.OnceValue(func() *mcp.InitializeParams {
				return &mcp.InitializeParams{Capabilities: caps()}
			})
			return call(ctx, d)
		})
	if err != nil || asks != nil {
		return inputRequired(asks, newState), err
	}
	return res.(R), nil
}
