package gateway

/*
Design note: the HTTP/1.1 front.

net/http's server costs a proxy hop more than the proxying does: per
request it hands the connection to a background reader goroutine and takes
it back, and on a small machine every such handoff is a cross-thread
wakeup. Server (NewServer) is a front for the gateway's listener that
serves the one request that has to be fast — a tools/call POST on a live
session, the fast path of fasthttp.go — on the connection's own goroutine:
read, call the upstream, write the answer, with no handoff at all.
Everything else goes to an ordinary net/http server behind the front:

  - A request head the front parses is framed exactly as net/http frames
    it: HTTP/1.1, CRLF lines, token header names, no control characters,
    no Transfer-Encoding, Expect or Upgrade, at most one plain decimal
    Content-Length. Such a request the front does not answer itself is
    passed, as the bytes the client sent, to net/http over an in-memory
    connection kept for the client's connection, and net/http's response
    is relayed back (framed by net/http's own Content-Length or chunked
    encoding). Requests are answered in order, one at a time.
  - A head outside that subset (HTTP/1.0, chunked bodies, anything odd),
    an oversized head or body, makes the front hand the whole connection
    to net/http, the bytes it read first; from then on the front is out of
    the way and net/http frames every byte. So the front and net/http never
    disagree on where a request ends: no request smuggling.

A client that goes away while net/http serves its request is noticed as
net/http would notice it (the request's context ends). A fast call that
runs longer than watchAfter starts the same watch, so a long tool call is
canceled when its client disappears; a quick one pays nothing for it.
*/

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpvisor/mcpvisor/host/internal/h1text"
	"github.com/mcpvisor/mcpvisor/host/internal/sockio"
)

const (
	// maxHeadBytes bounds the request heads the front reads; a longer one
	// goes to net/http, whose own limit (1 MB) applies.
	maxHeadBytes = 32 << 10
	// watchAfter is how long a fast call runs before the front watches its
	// connection for the client going away.
	watchAfter = 5 * time.Millisecond
)

// Server serves the gateway over HTTP/1.1 (see the design note): the
// fast path's tools/call POSTs on the connection's goroutine, everything
// else through an http.Server with Handler, which must serve the gateway's
// HTTPHandler at /mcp.
type Server struct {
	g     *Gateway
	inner *http.Server
	vl    *pipeListener
	// readHeaderTimeout bounds reading a head once its first byte came.
	readHeaderTimeout time.Duration

	serveOnce sync.Once
	closing   atomic.Bool
	// watcher is set while watchCalls runs.
	watcher   atomic.Bool
	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*frontConn]struct{}
	wg        sync.WaitGroup
}

// NewServer returns a Server for handler. readHeaderTimeout bounds the
// time to read a request head (zero: no bound), as http.Server's does.
func (g *Gateway) NewServer(handler http.Handler, readHeaderTimeout time.Duration) *Server {
	vl := newPipeListener()
	return &Server{
		g:                 g,
		vl:                vl,
		inner:             &http.Server{Handler: handler, ReadHeaderTimeout: readHeaderTimeout},
		readHeaderTimeout: readHeaderTimeout,
		listeners:         map[net.Listener]struct{}{},
		conns:             map[*frontConn]struct{}{},
	}
}

// Serve accepts connections on ln until Shutdown, when it returns
// http.ErrServerClosed; any other accept error ends it too.
func (s *Server) Serve(ln net.Listener) error {
	s.serveOnce.Do(func() { go s.inner.Serve(s.vl) })
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return http.ErrServerClosed
			}
			// Out of descriptors and the like: wait and retry, as
			// net/http does, rather than stop serving.
			if te, ok := err.(interface{ Temporary() bool }); ok && te.Temporary() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.g.logger.Warn("accepting a connection failed; retrying", "error", err, "in", delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		fc := s.track(c)
		if fc == nil {
			c.Close()
			continue
		}
		go fc.serve()
	}
}

func (s *Server) track(c net.Conn) *frontConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return nil
	}
	fc := &frontConn{s: s, c: c, watchDone: make(chan struct{}, 1)}
	if dc, ok := sockio.Detach(c); ok {
		fc.c = dc
	}
	fc.br, fc.bw = bufio.NewReaderSize(connIO{fc}, 16<<10), bufio.NewWriterSize(connIO{fc}, 16<<10)
	fc.local = c.LocalAddr()
	s.conns[fc] = struct{}{}
	s.wg.Add(1)
	return fc
}

func (s *Server) forget(fc *frontConn) {
	s.mu.Lock()
	delete(s.conns, fc)
	s.mu.Unlock()
	s.wg.Done()
}

// Shutdown stops accepting, closes idle connections and waits for the
// requests being served, as http.Server's Shutdown does; when ctx ends
// first it returns ctx's error and leaves the rest running.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing.Store(true)
	for ln := range s.listeners {
		ln.Close()
	}
	s.mu.Unlock()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		s.mu.Lock()
		for fc := range s.conns {
			fc.closeIfIdle()
		}
		n := len(s.conns)
		s.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	s.wg.Wait()
	return s.inner.Shutdown(ctx)
}

// Connection states.
const (
	connIdle   int32 = iota // waiting for a request
	connActive              // reading or serving one
	connClosed              // closed by Shutdown
)

// frontConn is one client connection of the front. While it waits for and
// serves fast calls, the connection is detached from the network poller
// when it can be (sockio: the conn goroutine's thread reads and writes the
// socket itself, saving two thread hand-offs per call); a connection that
// starts a stream or is handed to net/http goes back to the poller.
type frontConn struct {
	s     *Server
	c     net.Conn // a *sockio.Conn while detached
	br    *bufio.Reader
	bw    *bufio.Writer
	local net.Addr
	state atomic.Int32

	// pipe is the front's end of the in-memory connection to net/http,
	// made for the first request net/http serves.
	pipe net.Conn
	pbr  *bufio.Reader
	// buf holds the request being served: its head and body as read.
	buf []byte
	// yielded is when yield last yielded.
	yielded time.Time
	// req is the request being served (its storage reused).
	req frontRequest

	// The watch of a fast call (serveFast; see Server.watchCalls): the
	// call's state, its start (Unix ns), its cancel, whether the client
	// went away, and a token sent when watchCall returns.
	callState  atomic.Int32
	callStart  atomic.Int64
	callCancel context.CancelFunc
	gone       atomic.Bool
	watchDone  chan struct{}
}

// Fast call states of a connection.
const (
	callIdle    int32 = iota // no fast call
	callRunning              // a fast call, not watched
	callWatched              // a fast call that watchCall watches
)

// ensureWatcher starts watchCalls unless it runs.
func (s *Server) ensureWatcher() {
	if !s.watcher.Load() && s.watcher.CompareAndSwap(false, true) {
		go s.watchCalls()
	}
}

// watchCalls starts the watch of every fast call that has run for
// watchAfter, looking every watchAfter; it ends once a look finds no call
// started since the one before.
func (s *Server) watchCalls() {
	tick := time.NewTicker(watchAfter)
	defer tick.Stop()
	last := time.Now().UnixNano()
	for {
		<-tick.C
		now := time.Now().UnixNano()
		if s.lookAtCalls(last, now) {
			last = now
			continue
		}
		// Nothing is running: stop, unless a call started after that
		// look but saw the watcher still on (the two stores and loads are
		// ordered, so one of them sees the other).
		s.watcher.Store(false)
		if !s.lookAtCalls(last, now) || !s.watcher.CompareAndSwap(false, true) {
			return
		}
		last = now
	}
}

// lookAtCalls starts watchCall for the calls that started before now -
// watchAfter, and reports whether any unwatched call runs or a call
// started after since.
func (s *Server) lookAtCalls(since, now int64) bool {
	busy := false
	s.mu.Lock()
	defer s.mu.Unlock()
	for fc := range s.conns {
		state := fc.callState.Load()
		start := fc.callStart.Load()
		if start > since || state == callRunning {
			busy = true // a watched call needs no more looks
		}
		if state == callRunning && now-start >= int64(watchAfter) && fc.callState.CompareAndSwap(callRunning, callWatched) {
			go fc.watchCall()
		}
	}
	return busy
}

// connIO reads and writes whichever connection fc has now.
type connIO struct{ fc *frontConn }

func (c connIO) Read(p []byte) (int, error)  { return c.fc.c.Read(p) }
func (c connIO) Write(p []byte) (int, error) { return c.fc.c.Write(p) }

// attach hands a detached connection back to the network poller; it
// reports false when that failed and the connection is closed.
func (fc *frontConn) attach() bool {
	dc, ok := fc.c.(*sockio.Conn)
	if !ok {
		return true
	}
	nc, err := dc.Attach()
	if err != nil {
		fc.s.g.logger.Debug("front: handing a connection back to the poller failed", "error", err)
		dc.Close()
		return false
	}
	fc.c = nc
	return true
}

func (fc *frontConn) closeIfIdle() {
	if fc.state.CompareAndSwap(connIdle, connClosed) {
		fc.c.Close()
	}
}

func (fc *frontConn) close() {
	fc.c.Close()
	if fc.pipe != nil {
		fc.pipe.Close()
	}
}

func (fc *frontConn) serve() {
	defer fc.s.forget(fc)
	for {
		if _, err := fc.br.Peek(1); err != nil {
			fc.close()
			return
		}
		if !fc.state.CompareAndSwap(connIdle, connActive) {
			fc.close()
			return
		}
		req, err := fc.readRequest()
		if errors.Is(err, errHandoff) {
			fc.handoff()
			return
		}
		if err != nil {
			fc.close()
			return
		}
		keep := fc.serveRequest(req)
		if !keep || fc.s.closing.Load() {
			fc.close()
			return
		}
		fc.state.Store(connIdle)
		fc.yield()
	}
}

// yieldEvery is how often a detached connection's goroutine yields; see
// yield.
const yieldEvery = 2 * time.Millisecond

// yield lets the scheduler see a detached connection's goroutine make
// progress. Blocked in system calls rather than parked, the goroutine never
// passes through the scheduler, so after 10 ms the runtime's monitor
// thread takes it for a goroutine that hogs its processor, preempts it and
// keeps polling every 20 µs, competing with the calls for the CPU (16 % of
// mcpvisor's CPU under the HTTP c=1 benchmark). A Gosched every 2 ms,
// between requests, avoids both (measured against 0.5, 6 and 8 ms: 2 was
// best).
func (fc *frontConn) yield() {
	if _, ok := fc.c.(*sockio.Conn); !ok {
		return
	}
	if now := time.Now(); now.Sub(fc.yielded) >= yieldEvery {
		fc.yielded = now
		runtime.Gosched()
	}
}

// readRequest reads one request head and, when it is framed by the front
// and not larger than the fast path takes, its body, into fc.buf.
func (fc *frontConn) readRequest() (*frontRequest, error) {
	fc.buf = fc.buf[:0]
	buffered, _ := fc.br.Peek(fc.br.Buffered())
	if end := bytes.Index(buffered, []byte("\r\n\r\n")); end >= 0 && end+4 <= maxHeadBytes {
		// All here (the usual case): take it at once. Should a bare LF
		// end the head earlier, parse refuses either split alike.
		fc.buf = append(fc.buf, buffered[:end+4]...)
		fc.br.Discard(end + 4)
	} else if err := fc.readHeadLines(); err != nil {
		return nil, err
	}
	req := &fc.req
	if err := req.parse(fc.buf); err != nil {
		return nil, err
	}
	if req.contentLength > maxFastBody {
		return nil, errHandoff
	}
	if n := int(req.contentLength); n > 0 {
		start := len(fc.buf)
		fc.buf = slices.Grow(fc.buf, n)[:start+n]
		if _, err := io.ReadFull(fc.br, fc.buf[start:]); err != nil {
			return nil, err
		}
	}
	return req, nil
}

// readHeadLines reads a request head line by line into fc.buf, its wait
// bounded by the read-header timeout.
func (fc *frontConn) readHeadLines() error {
	if fc.s.readHeaderTimeout > 0 {
		fc.c.SetReadDeadline(time.Now().Add(fc.s.readHeaderTimeout))
		defer fc.c.SetReadDeadline(time.Time{}) // on every way out
	}
	for {
		line, err := fc.br.ReadSlice('\n')
		fc.buf = append(fc.buf, line...)
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) && len(fc.buf) <= maxHeadBytes {
				continue
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				return errHandoff
			}
			return err
		}
		if len(fc.buf) > maxHeadBytes {
			return errHandoff
		}
		if len(line) <= 2 && (len(line) == 1 || line[0] == '\r') {
			return nil
		}
	}
}

// handoff gives the connection to net/http, the bytes read of the current
// request first.
func (fc *frontConn) handoff() {
	if fc.pipe != nil {
		fc.pipe.Close() // net/http's connection for it is idle: it ends
	}
	if !fc.attach() {
		return
	}
	read := append([]byte(nil), fc.buf...)
	rc := &replayConn{Conn: fc.c, r: io.MultiReader(bytes.NewReader(read), fc.br)}
	if !fc.s.vl.push(rc) {
		fc.c.Close()
	}
}

// serveRequest answers req on the fast path or through net/http and
// reports whether the connection stays open.
func (fc *frontConn) serveRequest(req *frontRequest) bool {
	if fc.s.g.frontFast(req) {
		if served, keep := fc.serveFast(req); served {
			return keep && !req.close
		}
	}
	return fc.viaHTTP(req) && !req.close
}

// serveFast offers req to the gateway's fast path. It reports whether the
// gateway answered it and whether the connection is still good.
func (fc *frontConn) serveFast(req *frontRequest) (served, keep bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := &fastPost{
		ctx:             ctx,
		cancel:          cancel,
		sid:             req.get("Mcp-Session-Id"),
		contentType:     req.get("Content-Type"),
		accept:          req.accept,
		protocolVersion: req.get("Mcp-Protocol-Version"),
		host:            req.get("Host"),
		local:           fc.local,
		body:            fc.buf[len(fc.buf)-int(req.contentLength):],
	}
	w := &frontWriter{fc: fc, close: req.close}

	// The server's watcher starts a watch of the connection should the
	// call run longer than watchAfter (no timer per call: arming one
	// often wakes the runtime's network poller, on the call's path).
	fc.callCancel = cancel
	fc.gone.Store(false)
	fc.callStart.Store(time.Now().UnixNano())
	fc.callState.Store(callRunning)
	fc.s.ensureWatcher()
	served = p.acceptable() && fc.s.g.serveFastPost(w, p)
	if !fc.callState.CompareAndSwap(callRunning, callIdle) {
		fc.endWatch(fc.watchDone) // the watcher started watchCall
		fc.callState.Store(callIdle)
	}
	fc.callCancel = nil
	if !served {
		return false, true
	}
	if fc.gone.Load() {
		return true, false
	}
	return true, w.finish() == nil
}

// watchCall is the watch of a fast call that runs longer than watchAfter:
// it cancels the call when the client goes away.
func (fc *frontConn) watchCall() {
	defer func() { fc.watchDone <- struct{}{} }()
	if fc.watch() {
		fc.gone.Store(true)
		fc.callCancel()
	}
}

// watch blocks until the client sends more or goes away, or endWatch, and
// reports whether the client went away.
func (fc *frontConn) watch() bool {
	if dc, ok := fc.c.(*sockio.Conn); ok {
		if fc.br.Buffered() > 0 {
			return false
		}
		gone, err := dc.WaitReadable()
		return gone && err == nil
	}
	_, err := fc.br.Peek(1)
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// endWatch interrupts watch and waits for it to return.
func (fc *frontConn) endWatch(done <-chan struct{}) {
	if dc, ok := fc.c.(*sockio.Conn); ok {
		dc.Wake()
		<-done
		dc.Unwake()
		return
	}
	fc.c.SetReadDeadline(aLongTimeAgo)
	<-done
	fc.c.SetReadDeadline(time.Time{})
}

var aLongTimeAgo = time.Unix(1, 0)

// viaHTTP has net/http serve req and relays its response; it reports
// whether the connection stays open.
func (fc *frontConn) viaHTTP(req *frontRequest) bool {
	if req.method != http.MethodPost && !fc.attach() {
		return false // a GET is a stream, likely long: no thread for it
	}
	if fc.pipe == nil {
		a, b := net.Pipe()
		if !fc.s.vl.push(&addrConn{Conn: b, local: fc.c.LocalAddr(), remote: fc.c.RemoteAddr()}) {
			a.Close()
			return false
		}
		fc.pipe, fc.pbr = a, bufio.NewReader(a)
	}
	wrote := make(chan error, 1)
	raw := fc.buf
	go func() {
		_, err := fc.pipe.Write(raw)
		wrote <- err
	}()
	var gone atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		if fc.watch() {
			gone.Store(true)
			fc.pipe.Close() // net/http's request context ends
		}
	}()
	keep := fc.relay(req.method == http.MethodHead)
	fc.endWatch(done)
	if !keep {
		fc.pipe.Close()
	}
	if err := <-wrote; err != nil {
		return false
	}
	return keep && !gone.Load()
}

// relay copies one response of net/http's to the client and reports
// whether net/http keeps the connection.
func (fc *frontConn) relay(head bool) bool {
	for {
		h, err := readResponseHead(fc.pbr)
		if err != nil {
			return false
		}
		fc.bw.Write(h.raw)
		if h.status >= 100 && h.status < 200 && h.status != http.StatusSwitchingProtocols {
			if fc.bw.Flush() != nil {
				return false
			}
			continue // an interim response: the final one follows
		}
		switch {
		case h.status == http.StatusSwitchingProtocols:
			fc.bw.Flush()
			return false // never asked for: Upgrade requests are handed off
		case head || h.status == http.StatusNoContent || h.status == http.StatusNotModified:
		case h.chunked:
			if !fc.relayChunks() {
				return false
			}
		case h.contentLength >= 0:
			if !fc.relayN(h.contentLength) {
				return false
			}
		default: // the body ends when net/http closes
			fc.relayN(-1)
			fc.bw.Flush()
			return false
		}
		return fc.bw.Flush() == nil && !h.close
	}
}

// relayN copies n bytes (all, when n < 0) of the response body, flushing
// whenever net/http has no more ready, so streams reach the client as
// they are written.
func (fc *frontConn) relayN(n int64) bool {
	for n != 0 {
		p, err := fc.pbr.Peek(1)
		if err != nil {
			return n < 0 && errors.Is(err, io.EOF)
		}
		p, _ = fc.pbr.Peek(fc.pbr.Buffered())
		if n > 0 && int64(len(p)) > n {
			p = p[:n]
		}
		if _, err := fc.bw.Write(p); err != nil {
			return false
		}
		fc.pbr.Discard(len(p))
		if n > 0 {
			n -= int64(len(p))
		}
		if fc.pbr.Buffered() == 0 && fc.bw.Flush() != nil {
			return false
		}
	}
	return true
}

// relayChunks copies a chunked body and its trailer.
func (fc *frontConn) relayChunks() bool {
	for {
		line, err := fc.pbr.ReadSlice('\n')
		if err != nil {
			return false
		}
		fc.bw.Write(line)
		size, err := strconv.ParseInt(string(bytes.TrimRight(line, "\r\n")), 16, 64)
		if err != nil || size < 0 {
			return false
		}
		if size == 0 {
			for { // trailer lines, then the empty line
				line, err := fc.pbr.ReadSlice('\n')
				if err != nil {
					return false
				}
				fc.bw.Write(line)
				if len(line) <= 2 {
					return true
				}
			}
		}
		if !fc.relayN(size + 2) {
			return false
		}
	}
}

// responseHead is a response head of net/http's, as read.
type responseHead struct {
	raw           []byte
	status        int
	chunked       bool
	contentLength int64
	close         bool
}

func readResponseHead(br *bufio.Reader) (*responseHead, error) {
	h := &responseHead{contentLength: -1}
	for first := true; ; first = false {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return nil, err
		}
		h.raw = append(h.raw, line...)
		text := bytes.TrimRight(line, "\r\n")
		if first {
			_, rest, _ := bytes.Cut(text, []byte{' '})
			code, _, _ := bytes.Cut(rest, []byte{' '})
			if h.status, err = strconv.Atoi(string(code)); err != nil {
				return nil, err
			}
			continue
		}
		if len(text) == 0 {
			return h, nil
		}
		name, rawValue, _ := bytes.Cut(text, []byte{':'})
		value := h1text.TrimOWS(string(rawValue))
		switch {
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			h.chunked = h1text.HasToken(value, "chunked")
		case bytes.EqualFold(name, []byte("Content-Length")):
			if h.contentLength, err = strconv.ParseInt(value, 10, 64); err != nil {
				return nil, err
			}
		case bytes.EqualFold(name, []byte("Connection")):
			h.close = h1text.HasToken(value, "close")
		}
	}
}

// frontWriter is the http.ResponseWriter of a fast call on the front: the
// answer is written as one response with Content-Length, or chunked from
// the first Flush on (an SSE stream).
type frontWriter struct {
	fc          *frontConn
	header      http.Header
	status      int
	wroteHeader bool
	chunked     bool
	close       bool
	body        []byte
	err         error
	done        bool
}

func (w *frontWriter) Header() http.Header {
	if w.header == nil {
		w.header = make(http.Header, 4)
	}
	return w.header
}

// writeJSON answers with head, msg and tail, one after the other, as the
// whole application/json body, when nothing else was written: the reply of
// most fast calls, written without a header map or a copy of the body. It
// reports false, writing nothing, when the response has already begun.
func (w *frontWriter) writeJSON(head, msg, tail []byte) bool {
	if w.wroteHeader || w.done {
		return false
	}
	w.wroteHeader, w.status, w.done = true, http.StatusOK, true
	bw := w.fc.bw
	bw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: ")
	bw.Write(httpDate())
	bw.WriteString("\r\nContent-Length: ")
	bw.WriteString(strconv.Itoa(len(head) + len(msg) + len(tail)))
	if w.close {
		bw.WriteString("\r\nConnection: close")
	}
	bw.WriteString("\r\n\r\n")
	bw.Write(head)
	bw.Write(msg)
	bw.Write(tail)
	w.flush()
	return true
}

func (w *frontWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.status, w.wroteHeader = code, true
	}
}

func (w *frontWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if !w.chunked {
		w.body = append(w.body, p...)
		return len(p), nil
	}
	w.chunk(p)
	return len(p), w.err
}

// Flush sends what was written and makes the rest of the body chunked.
func (w *frontWriter) Flush() {
	w.WriteHeader(http.StatusOK)
	if !w.chunked {
		w.chunked = true
		w.writeHead(-1)
		w.chunk(w.body)
		w.body = nil
	}
	w.flush()
}

func (w *frontWriter) chunk(p []byte) {
	if len(p) == 0 || w.err != nil {
		return
	}
	bw := w.fc.bw
	bw.WriteString(strconv.FormatInt(int64(len(p)), 16))
	bw.WriteString("\r\n")
	bw.Write(p)
	_, w.err = bw.WriteString("\r\n")
}

func (w *frontWriter) flush() {
	if w.err == nil {
		w.err = w.fc.bw.Flush()
	}
}

// finish ends the response: it writes the whole of it, or ends the chunked
// body.
func (w *frontWriter) finish() error {
	if w.done {
		return w.err
	}
	w.done = true
	w.WriteHeader(http.StatusOK)
	if w.chunked {
		if w.err == nil {
			_, w.err = w.fc.bw.WriteString("0\r\n\r\n")
		}
	} else {
		w.writeHead(len(w.body))
		if w.err == nil {
			_, w.err = w.fc.bw.Write(w.body)
		}
	}
	w.flush()
	return w.err
}

// writeHead writes the status line and headers: with Content-Length n, or
// chunked when n < 0.
func (w *frontWriter) writeHead(n int) {
	bw := w.fc.bw
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(strconv.Itoa(w.status))
	bw.WriteByte(' ')
	bw.WriteString(http.StatusText(w.status))
	bw.WriteString("\r\n")
	w.header.Del("Content-Length")
	w.header.Del("Transfer-Encoding")
	w.header.Del("Connection")
	for k, vs := range w.header {
		for _, v := range vs {
			if strings.ContainsAny(v, "\r\n") {
				continue
			}
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	bw.WriteString("Date: ")
	bw.Write(httpDate())
	bw.WriteString("\r\n")
	switch {
	case n < 0:
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	case w.status == http.StatusNoContent || w.status == http.StatusNotModified:
	default:
		bw.WriteString("Content-Length: ")
		bw.WriteString(strconv.Itoa(n))
		bw.WriteString("\r\n")
	}
	if w.close {
		bw.WriteString("Connection: close\r\n")
	}
	_, w.err = bw.WriteString("\r\n")
}

// dateCache is the Date header value of the current second.
var dateCache atomic.Pointer[cachedDate]

type cachedDate struct {
	sec int64
	b   []byte
}

func httpDate() []byte {
	now := time.Now()
	if d := dateCache.Load(); d != nil && d.sec == now.Unix() {
		return d.b
	}
	d := &cachedDate{sec: now.Unix(), b: now.UTC().AppendFormat(nil, http.TimeFormat)}
	dateCache.Store(d)
	return d.b
}

// pipeListener hands the front's connections to the net/http server.
type pipeListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) push(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "mcpvisor-front" }

// addrConn is the net/http side of a front connection's pipe, with the
// client connection's addresses (for the SDK's DNS rebinding check, logs).
type addrConn struct {
	net.Conn
	local, remote net.Addr
}

func (c *addrConn) LocalAddr() net.Addr  { return c.local }
func (c *addrConn) RemoteAddr() net.Addr { return c.remote }

// replayConn is a client connection handed to net/http: the bytes the
// front read first, then the rest.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite lets net/http half-close the connection as it does its own.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
