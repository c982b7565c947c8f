package transport

// An event stream's events are bounded by the server's max_message_size
// here, before the go-sdk reads them. The go-sdk has a bound of its own
// (MaxEventSize), but an event over it ends the whole session
// ("malformed event"), and with it every call in flight. Here each event
// is held until it ends; one that grows past the limit is not held but
// skipped to its end, keeping only its first and last few kB. If those
// show it is a response and which call it answers (wire.OversizedResponseID),
// the go-sdk gets, in its place, an event answering that call with the
// same error a JSON body over the limit gets; anything else over the limit
// (a notification, a request) is dropped and logged. The session and its
// other calls go on. The go-sdk's own bound is set a little above this
// one, so that it is never reached first.

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	"github.com/hashicorp/go-hclog"

	"github.com/mcpvisor/mcpvisor/host/internal/wire"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

const (
	// eventKeep is how much of an oversized event's start and end is kept
	// to find which call it answers.
	eventKeep = 4 << 10
	// eventReadSize is how much an event stream is read at a time.
	eventReadSize = 32 << 10
	// heldEventMin is the size from which an event of a call's own stream
	// counts against max_inflight_bytes: results, not the progress and log
	// notifications that precede them.
	heldEventMin = 64 << 10
	// sdkEventSlack is how far above max_message_size the go-sdk's own
	// bound on an event is set: it counts an event's data, this file its
	// lines, which are a little longer.
	sdkEventSlack = 64 << 10
)

// eventLimitBody is an event stream's body with every event bounded (see
// the note at the top of the file).
type eventLimitBody struct {
	body    io.ReadCloser
	limit   int64
	refusal func() *recovery.Error // the error a call answered by an oversized event gets
	logger  hclog.Logger
	// callID returns the id of the call whose answer this stream is (a
	// POST's stream), or nil (the standalone stream, a legacy SSE stream).
	callID func() json.RawMessage

	// hold, when set (a call's own stream), counts a large event's bytes
	// against the host's max_inflight_bytes until the call has been handed
	// on, and reports false when there is no room (HoldResponse); busy is
	// the error the call then gets in the event's place.
	hold func(n int) bool
	busy func() *recovery.Error

	buf      []byte // read from body
	event    []byte // the current event, held until it ends
	out      []byte // ready for the reader
	last     byte   // the last byte looked at
	skipping bool   // the current event is over the limit
	head     []byte // while skipping: the event's first bytes
	tail     []byte // while skipping: its last bytes so far
	err      error  // body's error, returned once out is empty
}

func newEventLimitBody(body io.ReadCloser, limit int64, callID func() json.RawMessage, refusal func() *recovery.Error, logger hclog.Logger) *eventLimitBody {
	return &eventLimitBody{body: body, limit: limit, callID: callID, refusal: refusal, logger: logger}
}

func (b *eventLimitBody) Read(p []byte) (int, error) {
	for len(b.out) == 0 {
		if b.err != nil {
			if b.skipping {
				// The stream ended inside an oversized event.
				b.out = b.replacement()
				b.skipping, b.head, b.tail = false, nil, nil
				continue
			}
			if len(b.event) > 0 {
				// The stream ended inside an event: the go-sdk decides
				// what an unfinished event is.
				b.out, b.event = b.event, nil
				continue
			}
			return 0, b.err
		}
		if b.buf == nil {
			b.buf = make([]byte, eventReadSize)
		}
		n, err := b.body.Read(b.buf)
		b.take(b.buf[:n])
		b.err = err
	}
	n := copy(p, b.out)
	b.out = b.out[n:]
	return n, nil
}

// take looks at the next bytes of the stream.
func (b *eventLimitBody) take(chunk []byte) {
	for len(chunk) > 0 {
		part := chunk
		end := blankLineEnd(b.last, chunk)
		if end >= 0 {
			part = chunk[:end]
		}
		b.last = part[len(part)-1]
		if b.skipping {
			b.keepTail(part)
		} else {
			b.appendEvent(part)
			if int64(len(b.event)) > b.limit {
				b.skipping = true
				b.head = bytes.Clone(b.event[:min(len(b.event), eventKeep)])
				b.tail = nil
				b.keepTail(b.event)
				b.event = nil
			}
		}
		if end < 0 {
			return
		}
		if b.skipping {
			b.out = append(b.out, b.replacement()...)
			b.skipping, b.head, b.tail = false, nil, nil
		} else if len(b.event) > heldEventMin && b.hold != nil && !b.hold(len(b.event)) {
			// No room for it in max_inflight_bytes: the call gets its busy
			// error in the event's place, and the event's bytes go now.
			eventID, _ := eventFields(b.event[:min(len(b.event), eventKeep)])
			b.out = append(b.out, b.answer(b.callID(), b.busy(), eventID)...)
			b.event = nil
		} else if len(b.out) == 0 && cap(b.event) > 64<<10 {
			// A large event is handed on as it is, not copied; a
			// long-lived stream does not keep its buffer.
			b.out, b.event = b.event, nil
		} else {
			b.out = append(b.out, b.event...)
			b.event = b.event[:0]
		}
		chunk = chunk[end:]
	}
}

// appendEvent adds part to the event being held. Its buffer grows by
// doubling, never past the limit and one read: append grows a large slice
// in steps of a quarter, which for an event near the limit allocates about
// four times its size on the way up, and an upstream can send one such
// event after another.
func (b *eventLimitBody) appendEvent(part []byte) {
	if need := len(b.event) + len(part); need > cap(b.event) {
		size := max(2*cap(b.event), need, eventReadSize)
		size = min(size, max(need, int(min(b.limit, 1<<40))+eventReadSize))
		grown := make([]byte, len(b.event), size)
		copy(grown, b.event)
		b.event = grown
	}
	b.event = append(b.event, part...)
}

func (b *eventLimitBody) keepTail(part []byte) {
	b.tail = append(b.tail, part...)
	if len(b.tail) > 2*eventKeep {
		b.tail = append(b.tail[:0], b.tail[len(b.tail)-eventKeep:]...)
	}
}

// replacement is what the go-sdk gets for an event over the limit: an
// event answering its call with the refusal, or nothing.
func (b *eventLimitBody) replacement() []byte {
	eventID, headData := eventFields(b.head)
	tailData := lastDataLine(b.tail)
	id, ok := wire.OversizedResponseID(headData, tailData)
	if !ok {
		// A POST's stream is one call's: whatever was too large, that
		// call gets the error.
		id = b.callID()
		ok = id != nil
	}
	if !ok {
		b.logger.Warn("upstream event over max_message_size dropped: not a response to a call", "limit", b.limit)
		return nil
	}
	return b.answer(id, b.refusal(), eventID)
}

// answer is an event answering call id with err; eventID, when not empty,
// is kept so that a resumed stream starts after it.
func (b *eventLimitBody) answer(id json.RawMessage, refusal *recovery.Error, eventID string) []byte {
	if id == nil {
		return nil
	}
	msg, err := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   any             `json:"error"`
	}{"2.0", id, recovery.WireError(refusal)})
	if err != nil {
		return nil
	}
	var ev bytes.Buffer
	ev.WriteString("event: message\n")
	if eventID != "" {
		// Kept, so that a resumed stream starts after this event.
		ev.WriteString("id: " + eventID + "\n")
	}
	ev.WriteString("data: ")
	ev.Write(msg)
	ev.WriteString("\n\n")
	return ev.Bytes()
}

// eventFields returns the id field and the data of the start of an event.
func eventFields(head []byte) (id string, data []byte) {
	for _, line := range bytes.Split(head, []byte("\n")) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		if v, ok := field(line, "id"); ok {
			id = string(v)
		}
		if v, ok := field(line, "data"); ok {
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, v...)
		}
	}
	return id, data
}

// lastDataLine returns the data of the end of an event: the last data
// line in tail, or all of tail when it is the end of one long line.
func lastDataLine(tail []byte) []byte {
	tail = bytes.TrimRight(tail, "\r\n")
	lines := bytes.Split(tail, []byte("\n"))
	for i := len(lines) - 1; i >= 1; i-- {
		if v, ok := field(bytes.TrimSuffix(lines[i], []byte("\r")), "data"); ok {
			return v
		}
	}
	return lines[0]
}

// field returns the value of an event stream line "name: value".
func field(line []byte, name string) ([]byte, bool) {
	v, ok := bytes.CutPrefix(line, []byte(name+":"))
	if !ok {
		return nil, false
	}
	return bytes.TrimPrefix(v, []byte(" ")), true
}

func (b *eventLimitBody) Close() error { return b.body.Close() }

// boundEvents gives an event stream's response its eventLimitBody.
func (rt *boundedRoundTripper) boundEvents(req *http.Request, resp *http.Response) {
	callID := func() json.RawMessage {
		if req.Method != http.MethodPost {
			return nil
		}
		id, _ := requestCall(req)
		return id
	}
	body := newEventLimitBody(resp.Body, rt.limit, callID, func() *recovery.Error { return rt.tooLarge(req, -1) }, rt.logger)
	if ctx := req.Context(); req.Method == http.MethodPost && HoldsResults(ctx) {
		body.hold = func(n int) bool { return rt.budget.HoldResponse(ctx, rt.server, int64(n)) }
		body.busy = func() *recovery.Error {
			op := requestMethod(req)
			rt.logger.Warn("upstream response refused: max_inflight_bytes reached", "op", op, "limit", rt.budget.Limit())
			return Busy(rt.server, op, rt.budget.Limit(), ErrBusy)
		}
	}
	resp.Body = body
}
