package transport

import (
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/tmaxmax/go-sse"

	"github.com/mcpvisor/mcpvisor/host/internal/wire"
)

// A NotificationRelay is a Link that hands chosen notifications to the
// supervisor itself, in the order the server sent them, before the session
// reads anything the server sent after them.
//
// Why: the go-sdk client retires a call as soon as it reads the call's
// response, but runs notification handlers on another goroutine, so a
// progress or log notification sent just before a result is often handled
// after it — when the downstream's stream for that call is already closed
// and the notification is dropped. Process links are ordered by wrapping
// their connection (package upstream). HTTP links cannot be: the SDK's
// streamable client connection depends on unexported methods a wrapper
// would hide. They are ordered one layer down instead: every event stream
// the session reads passes through an SSE parser (github.com/tmaxmax/go-sse)
// that sees each chunk before the SDK does and relays the notifications it
// completes; the SDK gets the chunk only after that. The bytes reach the
// SDK unchanged, so it still handles these notifications too; a supervisor
// using a relay must ignore them there.
type NotificationRelay interface {
	// RelayNotifications makes the link call fn with every notification
	// whose method is one of methods. fn runs on the goroutine reading the
	// stream: until it returns, that stream does not move. Call it before
	// the link's Transport is connected.
	RelayNotifications(methods []string, fn func(*jsonrpc.Request))
}

// relay is what an httpLink relays, and to whom.
type relay struct {
	methods []string
	fn      func(*jsonrpc.Request)
}

// maxRelayedEvent bounds the line the relay's parser buffers. It is above
// the SDK's own event limit, so whatever the session accepts, the relay
// has parsed too.
const maxRelayedEvent = mcp.DefaultMaxEventSize + 64<<10

func (l *httpLink) RelayNotifications(methods []string, fn func(*jsonrpc.Request)) {
	l.relay.Store(&relay{methods: slices.Clone(methods), fn: fn})
}

// relayingRoundTripper gives every event stream of one link a relayBody.
type relayingRoundTripper struct {
	base   http.RoundTripper
	relay  *atomic.Pointer[relay]
	logger hclog.Logger
}

func (rt *relayingRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rt.base.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	r := rt.relay.Load()
	if r == nil {
		return resp, nil
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		return resp, nil
	}
	resp.Body = newRelayBody(resp.Body, r, rt.logger)
	return resp, nil
}

// relayBody is an event stream's body. Each chunk the session reads is
// first fed to a parser goroutine; Read returns only once the parser has
// handled every event the bytes so far complete and asks for more.
type relayBody struct {
	body io.ReadCloser

	feed    chan []byte   // chunks read, to the parser
	drained chan struct{} // the parser has used up the last chunk
	stopped chan struct{} // closed when the parser has ended

	closing   chan struct{} // closed by Close
	closeOnce sync.Once
}

func newRelayBody(body io.ReadCloser, r *relay, logger hclog.Logger) *relayBody {
	b := &relayBody{
		body:    body,
		feed:    make(chan []byte),
		drained: make(chan struct{}),
		stopped: make(chan struct{}),
		closing: make(chan struct{}),
	}
	go b.parse(r, logger)
	return b
}

func (b *relayBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if n > 0 {
		select {
		case b.feed <- p[:n]:
			select {
			case <-b.drained:
			case <-b.stopped:
			}
		case <-b.stopped:
		}
	}
	return n, err
}

// Close ends the stream. It does not wait for the parser: that may be
// inside the relay's fn, and ends when fn returns.
func (b *relayBody) Close() error {
	b.closeOnce.Do(func() { close(b.closing) })
	return b.body.Close()
}

func (b *relayBody) parse(r *relay, logger hclog.Logger) {
	defer close(b.stopped)
	in := &fedReader{b: b}
	for ev, err := range sse.Read(in, &sse.ReadConfig{MaxEventSize: maxRelayedEvent}) {
		if err != nil {
			// The session's own parser, with a lower limit, has failed the
			// stream already.
			logger.Debug("event stream no longer relayed", "error", err)
			return
		}
		if req, ok := decodeNotification(ev.Data, r.methods); ok {
			r.fn(req)
		}
	}
}

// decodeNotification returns the event's data as a notification if it is
// one whose method is in methods.
func decodeNotification(data string, methods []string) (*jsonrpc.Request, bool) {
	// Most events are results, some large: they are not decoded (and
	// copied) twice. Every relayed method begins "notifications/", and an
	// encoder that escapes the slash (PHP's does) leaves the word alone.
	if !strings.Contains(data, "notifications") {
		return nil, false
	}
	msg, err := wire.DecodeMessage([]byte(data))
	if err != nil {
		return nil, false
	}
	req, ok := msg.(*jsonrpc.Request)
	if !ok || req.IsCall() || !slices.Contains(methods, req.Method) {
		return nil, false
	}
	return req, true
}

// fedReader is the parser's input: the chunks Read feeds it. Asking for
// more than the last chunk holds is the signal that every event the chunk
// completed has been handled.
type fedReader struct {
	b   *relayBody
	cur []byte
	fed bool
}

func (f *fedReader) Read(p []byte) (int, error) {
	if len(f.cur) == 0 {
		if f.fed {
			select {
			case f.b.drained <- struct{}{}:
			case <-f.b.closing:
				return 0, io.EOF
			}
		}
		select {
		case f.cur = <-f.b.feed:
			f.fed = true
		case <-f.b.closing:
			return 0, io.EOF
		}
	}
	n := copy(p, f.cur)
	f.cur = f.cur[n:]
	return n, nil
}
