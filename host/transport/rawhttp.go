package transport

/*
Design note: a plain-HTTP poster for the raw tools/call path.

net/http's client hands every request to a writer goroutine and every
response back from a reader goroutine of its connection; on a small machine
those two handoffs cost about a quarter of an HTTP upstream call. The raw
path (upstream/fasthttp.go) only ever POSTs one JSON body and reads one
response, so for plain http:// upstreams without a proxy it uses a
rawPoster: HTTP/1.1 over its own kept-alive connections, written and read
on the caller's goroutine (detached from the network poller when sockio
allows), the response parsed by readResponse — plain responses by a small
parser checked against net/http's (FuzzReadResponse), anything else by
http.ReadResponse. Everything else — https, proxies, a client the embedder
supplied, and the SDK's own requests — stays on net/http.

A pooled connection the server closed while idle is detected before use
with one non-blocking read, so a request is never written to a connection
known to be dead and is never sent twice.
*/

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/mcpvisor/mcpvisor/host/internal/h1text"
	"github.com/mcpvisor/mcpvisor/host/internal/sockio"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// maxIdleRawConns bounds the idle connections a rawPoster keeps.
const maxIdleRawConns = maxIdleConnsPerUpstream

// A Poster sends one POST and returns its response, whose body the caller
// must close.
type Poster interface {
	Post(ctx context.Context, header http.Header, body []byte) (*http.Response, error)
}

// clientPoster posts through a net/http client.
type clientPoster struct {
	url    string
	client *http.Client
}

func (p clientPoster) Post(ctx context.Context, header http.Header, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	return p.client.Do(req)
}

// rawPoster posts to one plain-http URL over connections of its own.
type rawPoster struct {
	addr    string // host:port to dial
	host    string // Host header
	path    string // request target
	headers map[string]string
	dialer  net.Dialer
	// fallback answers what the raw path does not handle: a redirect is
	// followed by net/http, as the SDK's own requests are.
	fallback Poster

	mu   sync.Mutex
	idle []*rawConn
}

type rawConn struct {
	c  net.Conn
	br *bufio.Reader
	bw *bufio.Writer
	// hb holds the header of the connection's responses, one at a time.
	hb h1text.Header
}

// newRawPoster returns a rawPoster for u, or nil when u needs net/http:
// not plain http, or a proxy applies to it.
func newRawPoster(u string, headers map[string]string, fallback Poster) *rawPoster {
	pu, err := url.Parse(u)
	if err != nil || pu.Scheme != "http" || pu.Host == "" || pu.User != nil {
		return nil
	}
	req := &http.Request{URL: pu}
	if proxy, err := http.ProxyFromEnvironment(req); err != nil || proxy != nil {
		return nil
	}
	addr := pu.Host
	if pu.Port() == "" {
		addr = net.JoinHostPort(pu.Hostname(), "80")
	}
	canon := make(map[string]string, len(headers))
	for k, v := range headers {
		canon[http.CanonicalHeaderKey(k)] = v
	}
	for k, v := range canon {
		if validHeader(http.Header{k: {v}}) != nil {
			return nil // net/http will say what is wrong with it
		}
	}
	return &rawPoster{addr: addr, host: pu.Host, path: pu.RequestURI(), headers: canon, fallback: fallback,
		dialer: net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}}
}

func (p *rawPoster) Post(ctx context.Context, header http.Header, body []byte) (*http.Response, error) {
	return p.PostArmed(ctx, func() context.Context { return ctx }, header, body)
}

// maxEarlyWrite bounds the requests PostArmed writes before arming: a
// pooled connection's send buffer is empty and at least this big, so such
// a write cannot block.
const maxEarlyWrite = 2 << 10

// PostArmed is Post for a caller whose own context for the call (its
// timeout) can wait until the request is sent: making it then overlaps
// the upstream's work. arm returns that context, made on its
// first call; PostArmed calls it right after writing a small request to a
// pooled connection, before anything that could block (a dial, a large
// write, reading the response), and everything from then on is bound to
// it. Until then only a canceled ctx stops it.
func (p *rawPoster) PostArmed(ctx context.Context, arm func() context.Context, header http.Header, body []byte) (*http.Response, error) {
	if err := validHeader(header); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rc := p.idleConn()
	if rc == nil || len(body) > maxEarlyWrite {
		ctx = arm()
	}
	if rc == nil {
		var err error
		if rc, err = p.dial(ctx); err != nil {
			return nil, err
		}
	}
	// A canceled ctx interrupts whatever the connection is doing; the
	// connection is then not reused.
	var stop func() bool
	fail := func(err error) (*http.Response, error) {
		if stop != nil {
			stop()
		}
		rc.c.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if len(body) > maxEarlyWrite {
		stop = context.AfterFunc(ctx, rc.abort)
	}
	if err := p.writeRequest(rc.bw, header, body); err != nil {
		return fail(err)
	}
	if stop == nil {
		ctx = arm()
		stop = context.AfterFunc(ctx, rc.abort)
	}
	resp, err := readResponse(rc.br, &rc.hb)
	// Informational answers (103 Early Hints and the like) come before
	// the real one.
	for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
		resp.Body.Close()
		resp, err = readResponse(rc.br, &rc.hb)
	}
	if err != nil {
		return fail(err)
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		fail(nil)
		return nil, fmt.Errorf("%w: POST %s", recovery.ErrUnauthorized, recovery.Redact("http://"+p.host+p.path))
	case resp.StatusCode >= 300 && resp.StatusCode < 400 && resp.Header.Get("Location") != "" && p.fallback != nil:
		fail(nil)
		return p.fallback.Post(ctx, header, body)
	}
	resp.Body = &rawBody{ReadCloser: resp.Body, p: p, rc: rc, stop: stop, reusable: !resp.Close}
	return resp, nil
}

func (p *rawPoster) writeRequest(bw *bufio.Writer, header http.Header, body []byte) error {
	bw.WriteString("POST ")
	bw.WriteString(p.path)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(p.host)
	bw.WriteString("\r\nUser-Agent: mcpvisor\r\nContent-Length: ")
	bw.WriteString(strconv.Itoa(len(body)))
	bw.WriteString("\r\n")
	writeHeader := func(k, v string) {
		bw.WriteString(k)
		bw.WriteString(": ")
		bw.WriteString(v)
		bw.WriteString("\r\n")
	}
	for k, vs := range header {
		if _, ok := p.headers[k]; ok || framingHeader[k] {
			continue // the block's own headers win, as on net/http
		}
		for _, v := range vs {
			writeHeader(k, v)
		}
	}
	for k, v := range p.headers {
		if !framingHeader[k] {
			writeHeader(k, v)
		}
	}
	bw.WriteString("\r\n")
	bw.Write(body)
	return bw.Flush()
}

// framingHeader are the headers the poster writes itself; like net/http,
// it ignores them in a caller's or a block's headers.
var framingHeader = map[string]bool{"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Trailer": true, "Connection": true}

// validHeader refuses what net/http refuses to send: a line break or
// other control character in a header (a session id the upstream made up,
// say), which would otherwise split the request.
func validHeader(h http.Header) error {
	for k, vs := range h {
		bad := !h1text.ValidValue(k)
		for _, v := range vs {
			bad = bad || !h1text.ValidValue(v)
		}
		if bad {
			return fmt.Errorf("invalid header %q: control character", k)
		}
	}
	return nil
}

// idleConn returns a live idle connection, or nil.
func (p *rawPoster) idleConn() *rawConn {
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			return nil
		}
		rc := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if rc.alive() {
			return rc
		}
		rc.c.Close()
	}
}

// dial makes a new connection.
func (p *rawPoster) dial(ctx context.Context) (*rawConn, error) {
	c, err := p.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	if dc, ok := sockio.Detach(c); ok {
		c = dc
	}
	return &rawConn{c: c, br: bufio.NewReaderSize(c, 4<<10), bw: bufio.NewWriterSize(c, 4<<10)}, nil
}

// put keeps rc for reuse, or closes it when the pool is full.
func (p *rawPoster) put(rc *rawConn) {
	p.mu.Lock()
	if len(p.idle) < maxIdleRawConns {
		p.idle = append(p.idle, rc)
		rc = nil
	}
	p.mu.Unlock()
	if rc != nil {
		rc.c.Close()
	}
}

// CloseIdle closes the pooled connections.
func (p *rawPoster) CloseIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, rc := range idle {
		rc.c.Close()
	}
}

// alive reports whether an idle connection can carry a request: nothing
// is buffered and one non-blocking read finds neither data nor EOF (a
// server that closed the connection while it was idle).
func (rc *rawConn) alive() bool {
	if rc.br.Buffered() > 0 {
		return false
	}
	if dc, ok := rc.c.(*sockio.Conn); ok {
		return dc.Alive()
	}
	sc, ok := rc.c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	var buf [1]byte
	err = raw.Read(func(fd uintptr) bool {
		n, err := syscall.Read(int(fd), buf[:])
		alive = n < 0 && errors.Is(err, syscall.EAGAIN)
		return true // one attempt, never wait
	})
	return err == nil && alive
}

// abort interrupts what the connection is doing; it is not reused after.
func (rc *rawConn) abort() {
	if dc, ok := rc.c.(*sockio.Conn); ok {
		dc.Abort()
		return
	}
	rc.c.SetDeadline(time.Unix(1, 0))
}

// rawBody returns its connection to the pool once the response was read
// to its end.
type rawBody struct {
	io.ReadCloser
	p        *rawPoster
	rc       *rawConn
	stop     func() bool
	reusable bool
	eof      bool
	closed   bool
}

func (b *rawBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.eof = true
	}
	return n, err
}

func (b *rawBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	if b.stop() && b.eof && b.reusable {
		err := b.ReadCloser.Close()
		b.p.put(b.rc)
		return err
	}
	// Not read to its end (a stream the server keeps open, a canceled
	// call): the connection goes, before the body's Close would try to
	// drain what is left.
	b.rc.c.Close()
	b.ReadCloser.Close()
	return nil
}
