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
// that is given the bytes that may end an event before the SDK gets them,
// and relays the notifications they complete; the SDK gets them only after
// that. The bytes reach the SDK unchanged, so it still handles these
// notifications too; a supervisor using a relay must ignore them there.
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

// maxRelayedEvent bounds the event the relay holds and parses. An event
// larger than this is no notification worth relaying (a result, most
// likely): the relay skips it and parses again from the next event, and
// the session's own parser, with the server's limit (events.go), still reads
// it. Bounding it keeps a stream's relay within about twice this much
// memory, whatever the upstream sends.
const maxRelayedEvent = 4 << 20

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

// relayBody is an event stream's body. The bytes the session reads go to
// a parser goroutine, held back until they may end an event (a blank line,
// or the stream's end): until then nothing the session reads can complete
// an event either. When they are handed over, Read returns only once the
// parser has handled every event they complete and asks for more. Held
// back, a large event reaches the parser once, not once per read: its line
// scanner looks at the whole unfinished event each time it is given more.
type relayBody struct {
	body   io.ReadCloser
	r      *relay
	logger hclog.Logger

	p        *relayParser // nil while an oversized event is skipped
	held     []byte       // read by the session, not yet given to the parser
	last     byte         // the last byte read
	skipping bool         // the current event is over maxRelayedEvent
	feeds    int          // chunks given to parsers (for the tests)

	closing   chan struct{} // closed by Close
	closeOnce sync.Once
}

// relayParser is one parser goroutine, from one event boundary on.
type relayParser struct {
	feed    chan []byte   // chunks read, to the parser
	drained chan struct{} // the parser has used up the last chunk
	stopped chan struct{} // closed when the parser has ended
	quit    chan struct{} // closed to end it
}

func newRelayBody(body io.ReadCloser, r *relay, logger hclog.Logger) *relayBody {
	b := &relayBody{body: body, r: r, logger: logger, closing: make(chan struct{})}
	b.p = b.startParser()
	return b
}

func (b *relayBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	chunk := p[:n]
	if b.skipping {
		// Parse again from the event after the one skipped.
		i := blankLineEnd(b.last, chunk)
		if i < 0 {
			if n > 0 {
				b.last = chunk[n-1]
			}
			return n, err
		}
		b.last = chunk[i-1]
		chunk = chunk[i:]
		b.skipping = false
		b.p = b.startParser()
	}
	if b.p == nil || b.p.done() {
		return n, err
	}
	ends := false
	if len(chunk) > 0 {
		ends = blankLineEnd(b.last, chunk) >= 0
		b.last = chunk[len(chunk)-1]
		b.held = append(b.held, chunk...)
	}
	if !ends && err == nil {
		if len(b.held) > maxRelayedEvent {
			// No blank line in what is held: one event is this large.
			b.logger.Debug("event stream: an event over the relay's limit is not parsed", "limit", maxRelayedEvent)
			b.p.stop()
			b.p, b.held, b.skipping = nil, nil, true
		}
		return n, err
	}
	if len(b.held) > 0 {
		b.feeds++
		b.p.give(b.held)
		b.held = b.held[:0]
		if cap(b.held) > 64<<10 {
			// A large event passed: a long-lived stream does not keep
			// its buffer.
			b.held = nil
		}
	}
	return n, err
}

// blankLineEnd returns the index in chunk, read after the byte last, just
// past the first blank line (two line ends in a row: "\n\n", "\r\r", or
// "\n\r", which "\r\n\r\n" contains), or -1 if there is none. A CRLF's
// "\n" right after it is left to the parser, which skips blank lines.
func blankLineEnd(last byte, chunk []byte) int {
	prev := last
	for i, c := range chunk {
		if (c == '\n' || c == '\r') && (prev == '\n' || (prev == '\r' && c == '\r')) {
			return i + 1
		}
		prev = c
	}
	return -1
}

// Close ends the stream. It does not wait for the parser: that may be
// inside the relay's fn, and ends when fn returns.
func (b *relayBody) Close() error {
	b.closeOnce.Do(func() { close(b.closing) })
	return b.body.Close()
}

func (b *relayBody) startParser() *relayParser {
	rp := &relayParser{
		feed:    make(chan []byte),
		drained: make(chan struct{}),
		stopped: make(chan struct{}),
		quit:    make(chan struct{}),
	}
	go rp.parse(b.r, b.logger, b.closing)
	return rp
}

// give hands chunk to the parser and waits until it has handled every
// event chunk completes.
func (rp *relayParser) give(chunk []byte) {
	select {
	case rp.feed <- chunk:
		select {
		case <-rp.drained:
		case <-rp.stopped:
		}
	case <-rp.stopped:
	}
}

func (rp *relayParser) stop() { close(rp.quit) }

func (rp *relayParser) done() bool {
	select {
	case <-rp.stopped:
		return true
	default:
		return false
	}
}

func (rp *relayParser) parse(r *relay, logger hclog.Logger, closing <-chan struct{}) {
	defer close(rp.stopped)
	in := &fedReader{rp: rp, closing: closing}
	// The limit only guards the parser: Read skips larger events first.
	for ev, err := range sse.Read(in, &sse.ReadConfig{MaxEventSize: 2 * maxRelayedEvent}) {
		if err != nil {
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

// fedReader is a parser's input: the chunks Read gives it. Asking for
// more than the last chunk holds is the signal that every event the chunk
// completed has been handled.
type fedReader struct {
	rp      *relayParser
	closing <-chan struct{}
	cur     []byte
	fed     bool
}

func (f *fedReader) Read(p []byte) (int, error) {
	if len(f.cur) == 0 {
		if f.fed {
			select {
			case f.rp.drained <- struct{}{}:
			case <-f.rp.quit:
				return 0, io.EOF
			case <-f.closing:
				return 0, io.EOF
			}
		}
		select {
		case f.cur = <-f.rp.feed:
			f.fed = true
		case <-f.rp.quit:
			return 0, io.EOF
		case <-f.closing:
			return 0, io.EOF
		}
	}
	n := copy(p, f.cur)
	f.cur = f.cur[n:]
	return n, nil
}
