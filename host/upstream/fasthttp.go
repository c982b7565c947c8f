package upstream

/*
Design note: the raw tools/call path over streamable HTTP.

The go-sdk's streamable client decodes every response into typed values,
hands each message through its connection's goroutines and re-encodes the
result for the gateway. On the raw path (CallToolRaw) mcpvisor instead
POSTs the downstream's params as they came, on the SDK session's own
session id and protocol version, and reads the answer itself: a JSON body,
or an SSE stream whose messages before the response are handled as the SDK
client would handle them — progress and log notifications forwarded to the
downstream (in order, before the result), list_changed and resource
updates signalled, and server-to-client requests (sampling, elicitation,
roots, ping) answered by a POST of their response. Errors are shaped as
the SDK shapes them (404 on our session → mcp.ErrSessionMissing; a
JSON-RPC error body kept; 401 typed by the transport's round tripper), so
the recovery path classifies both paths alike.
*/

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/rawjson"
	"github.com/mcpvisor/mcpvisor/host/transport"
)

// maxHTTPMessage bounds one JSON body or SSE event from an upstream (the
// SDK's line limit for stdio).
const maxHTTPMessage = mcp.DefaultMaxLineLength

// httpRaw reports whether sess can take the raw HTTP path.
func (sess *session) httpRaw() bool {
	return sess.poster != nil && sess.cs.ID() != ""
}

// httpCall sends one raw request on sess's HTTP session and returns its
// raw result. The request goes out under ctx; arm gives the call's own
// context (see doArmed), which bounds everything after.
func (s *Supervisor) httpCall(ctx context.Context, arm func() context.Context, sess *session, method string, params json.RawMessage) (json.RawMessage, error) {
	id := fastIDPrefix + strconv.FormatUint(s.httpSeq.Add(1), 10)
	summary := func() string { return fmt.Sprintf("calling %q", method) } // for errors only
	resp, err := s.httpPostArmed(ctx, arm, sess, transport.RawRequest(id, method, params))
	ctx = arm()
	if err != nil {
		if ctx.Err() != nil {
			// The request may have reached the upstream before the
			// cancel did.
			s.httpCancel(ctx, sess, id)
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%s: %w", summary(), err)
	}
	defer func() {
		// Drain a little so the connection can be reused.
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
	}()
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		return nil, s.httpStatusError(sess, summary(), resp)
	}
	var res *jsonrpc.Response
	mt := resp.Header.Get("Content-Type")
	if mt != "text/event-stream" && mt != "application/json" {
		mt, _, _ = mime.ParseMediaType(mt)
	}
	switch mt {
	case "application/json":
		res, err = readJSONResponse(resp.Body, id)
	case "text/event-stream":
		res, err = s.readEventStream(ctx, sess, resp.Body, id)
	default:
		err = fmt.Errorf("unexpected content type %q", mt)
	}
	if err != nil {
		if ctx.Err() != nil {
			s.httpCancel(ctx, sess, id)
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%s: %w", summary(), err)
	}
	result, err := responseResult(res)
	if early := earlyFrom(ctx); early != nil && err == nil && len(result) > 0 {
		early(result) // before the drain: the rest of the stream can wait
	}
	return result, err
}

// httpPost POSTs one JSON-RPC message on sess's session. A canceled ctx
// aborts it.
func (s *Supervisor) httpPost(ctx context.Context, sess *session, body []byte) (*http.Response, error) {
	resp, err := sess.poster.Post(ctx, sess.postHeader(), body)
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return resp, err
}

// armedPoster is a Poster that can send before the call's own context
// exists (transport's raw poster; see doArmed).
type armedPoster interface {
	PostArmed(ctx context.Context, arm func() context.Context, header http.Header, body []byte) (*http.Response, error)
}

// httpPostArmed is httpPost under ctx until the request is sent and
// arm's context after.
func (s *Supervisor) httpPostArmed(ctx context.Context, arm func() context.Context, sess *session, body []byte) (*http.Response, error) {
	ap, ok := sess.poster.(armedPoster)
	if !ok {
		return s.httpPost(arm(), sess, body)
	}
	resp, err := ap.PostArmed(ctx, arm, sess.postHeader(), body)
	if err != nil {
		if cctx := arm(); cctx.Err() != nil {
			return nil, cctx.Err()
		}
	}
	return resp, err
}

// postHeader returns the headers of the session's raw POSTs, made once:
// its id and protocol version do not change. Posters only read them.
func (sess *session) postHeader() http.Header {
	if h := sess.rawHeader.Load(); h != nil {
		return *h
	}
	h := http.Header{
		"Content-Type":   {"application/json"},
		"Accept":         {"application/json, text/event-stream"},
		"Mcp-Session-Id": {sess.cs.ID()},
	}
	if ir := sess.cs.InitializeResult(); ir != nil {
		h["Mcp-Protocol-Version"] = []string{ir.ProtocolVersion}
	}
	if sess.cs.ID() != "" {
		sess.rawHeader.Store(&h)
	}
	return h
}

// httpStatusError shapes a non-2xx answer as the SDK's client does.
func (s *Supervisor) httpStatusError(sess *session, summary string, resp *http.Response) error {
	status := http.StatusText(resp.StatusCode)
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxHTTPMessage))
	if msg, err := transport.DecodeMessage(body); err == nil {
		if r, ok := msg.(*jsonrpc.Response); ok && r.Error != nil {
			return fmt.Errorf("%s: %w: %v", summary, r.Error, status)
		}
	}
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%s: failed to connect (session ID: %v): %w", summary, sess.cs.ID(), mcp.ErrSessionMissing)
	}
	return fmt.Errorf("%s: %v", summary, status)
}

// httpCancel tells the upstream a raw call was canceled, as the SDK does
// for its own calls; off the caller's path so a stuck peer cannot delay
// the return.
func (s *Supervisor) httpCancel(ctx context.Context, sess *session, id string) {
	go func() {
		p, _ := json.Marshal(&mcp.CancelledParams{RequestID: id, Reason: ctx.Err().Error()})
		nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeGrace)
		defer cancel()
		if resp, err := s.httpPost(nctx, sess, rawNotification("notifications/cancelled", p)); err == nil {
			resp.Body.Close()
		}
	}()
}

func rawNotification(method string, params json.RawMessage) []byte {
	buf := append([]byte(`{"jsonrpc":"2.0","method":`), rawjson.Quote(method)...)
	buf = append(buf, `,"params":`...)
	buf = append(buf, params...)
	return append(buf, '}')
}

// readJSONResponse reads a single-message JSON body answering id.
func readJSONResponse(r io.Reader, id string) (*jsonrpc.Response, error) {
	body, err := io.ReadAll(io.LimitReader(r, maxHTTPMessage+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxHTTPMessage {
		return nil, fmt.Errorf("response longer than %d bytes", maxHTTPMessage)
	}
	msg, err := transport.DecodeOwnedMessage(body)
	if err != nil {
		return nil, err
	}
	res, ok := msg.(*jsonrpc.Response)
	if !ok || res.ID.Raw() != id {
		return nil, fmt.Errorf("the response body is not the answer to request %s", id)
	}
	return res, nil
}

// readEventStream reads an SSE response until the response to id,
// handling every message before it.
func (s *Supervisor) readEventStream(ctx context.Context, sess *session, r io.Reader, id string) (*jsonrpc.Response, error) {
	var res *jsonrpc.Response
	err := scanEvents(r, func(data []byte) (bool, error) {
		msg, err := transport.DecodeOwnedMessage(data) // each event's data is its own
		if err != nil {
			return false, err
		}
		switch m := msg.(type) {
		case *jsonrpc.Response:
			if m.ID.Raw() == id {
				res = m
				return true, nil
			}
		case *jsonrpc.Request:
			if m.IsCall() {
				s.answerHTTP(ctx, sess, m)
			} else {
				s.httpNotification(m)
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	if res == nil {
		return nil, errors.New("the upstream ended the response stream without answering")
	}
	return res, nil
}

// scanEvents reads a text/event-stream and calls fn with the data of each
// "message" event (events without a type are messages), until fn reports
// done, fn fails, or the stream ends (nil error). Data lines of one event
// are joined with newlines; one event may hold at most maxHTTPMessage
// bytes.
func scanEvents(r io.Reader, fn func(data []byte) (done bool, err error)) error {
	br := sseReaders.Get().(*bufio.Reader)
	br.Reset(r)
	defer func() {
		br.Reset(nil)
		sseReaders.Put(br)
	}()
	var data []byte
	message := true // the event's type is "message" (or none)
	for {
		line, err := readSSELine(br)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(line) > 0 {
			field, value, _ := bytes.Cut(line, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			switch string(field) {
			case "data":
				if data != nil {
					data = append(data, '\n')
				}
				data = append(data, value...)
				if len(data) > maxHTTPMessage {
					return fmt.Errorf("event longer than %d bytes", maxHTTPMessage)
				}
			case "event":
				message = len(value) == 0 || string(value) == "message"
			}
			continue
		}
		// A blank line dispatches the event.
		payload, isMessage := data, message
		data, message = nil, true
		if payload == nil || !isMessage {
			continue
		}
		if done, err := fn(payload); done || err != nil {
			return err
		}
	}
}

// sseReaders are scanEvents' buffers (events are copied out of them).
var sseReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}

// readSSELine returns the next line without its line ending (LF or CRLF).
func readSSELine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		buf := append([]byte(nil), line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = br.ReadSlice('\n')
			buf = append(buf, line...)
			if len(buf) > maxHTTPMessage {
				return nil, fmt.Errorf("event line longer than %d bytes", maxHTTPMessage)
			}
		}
		line = buf
	}
	if err != nil && !(errors.Is(err, io.EOF) && len(line) > 0) {
		return nil, err
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r")), nil
}

// httpNotification handles a notification that came on a call's stream as
// the SDK client's handlers would.
func (s *Supervisor) httpNotification(req *jsonrpc.Request) {
	switch req.Method {
	case methodProgress:
		var p mcp.ProgressNotificationParams
		if json.Unmarshal(req.Params, &p) == nil {
			s.forwardProgress(&p)
		}
	case methodLog:
		var p mcp.LoggingMessageParams
		if json.Unmarshal(req.Params, &p) == nil {
			s.forwardLog(&p)
		}
	case "notifications/tools/list_changed", "notifications/prompts/list_changed", "notifications/resources/list_changed":
		signal(s.relist)
	case "notifications/resources/updated":
		var p mcp.ResourceUpdatedNotificationParams
		if json.Unmarshal(req.Params, &p) == nil && s.opts.OnResourceUpdated != nil {
			s.opts.OnResourceUpdated(s.name, &p)
		}
	default:
		s.logger.Debug("notification on a call's stream ignored", "method", req.Method)
	}
}

// answerHTTP answers a server-to-client request that came on a call's
// stream, as the SDK client's handlers would, and POSTs the response.
func (s *Supervisor) answerHTTP(ctx context.Context, sess *session, req *jsonrpc.Request) {
	var (
		result any
		err    error
	)
	switch req.Method {
	case "ping":
		result = struct{}{}
	case "roots/list":
		p := &mcp.ListRootsParams{}
		if err = unmarshalParams(req.Params, p); err == nil {
			if f := s.latestFlight(); f != nil {
				result, err = f.d.ListRoots(f.ctx, p)
			} else {
				// The supervisor's own client has no roots.
				result = &mcp.ListRootsResult{Roots: []*mcp.Root{}}
			}
		}
	case "sampling/createMessage":
		p := &mcp.CreateMessageParams{}
		if err = unmarshalParams(req.Params, p); err == nil {
			result, err = s.onCreateMessage(ctx, &mcp.CreateMessageRequest{Params: p})
		}
	case "elicitation/create":
		p := &mcp.ElicitParams{}
		if err = unmarshalParams(req.Params, p); err == nil {
			result, err = s.onElicit(ctx, &mcp.ElicitRequest{Params: p})
		}
	default:
		err = &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: fmt.Sprintf("method %q not supported by this client", req.Method)}
	}
	resp := &jsonrpc.Response{ID: req.ID}
	if err != nil {
		var wire *jsonrpc.Error
		if !errors.As(err, &wire) {
			wire = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
		}
		resp.Error = wire
	} else if resp.Result, err = json.Marshal(result); err != nil {
		resp.Result, resp.Error = nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
	}
	body, err := jsonrpc.EncodeMessage(resp)
	if err == nil {
		var hr *http.Response
		if hr, err = s.httpPost(ctx, sess, body); err == nil {
			hr.Body.Close()
		}
	}
	if err != nil {
		s.logger.Debug("answering a request on a call's stream failed", "method", req.Method, "error", err)
	}
}

func unmarshalParams(raw json.RawMessage, p any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, p); err != nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	return nil
}
