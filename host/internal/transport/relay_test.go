package transport

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/tmaxmax/go-sse"
)

// stream is an event stream as a streamable HTTP server writes it: three
// progress notifications and a log message about a call, then its result.
// Newlines are \n; tests swap in other line endings.
const stream = `id: 1
data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}

: a comment

id: 2
event: message
data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":2}}

data: {"jsonrpc":"2.0","method":"notifications/progress",
data:  "params":{"progressToken":"t","progress":3}}

data: {"jsonrpc":"2.0","method":"notifications\/message","params":{"level":"info","data":"x"}}

data: {"jsonrpc":"2.0","method":"notifications/tools/list_changed"}

data: {"jsonrpc":"2.0","id":7,"result":{"content":[]}}

`

// relayed collects what a relay handed on.
type relayed struct {
	mu  sync.Mutex
	got []string
}

func (r *relayed) fn(req *jsonrpc.Request) {
	// Forwarding to a downstream takes a while; a body that let the
	// session read on meanwhile would be caught.
	time.Sleep(2 * time.Millisecond)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, req.Method+" "+string(req.Params))
}

// The session reads the stream unchanged, and each relayed notification is
// handed on before the session has read the end of the event after it —
// however the stream is cut into reads, whatever its line endings.
func TestRelayBodyOrdersNotificationsBeforeLaterEvents(t *testing.T) {
	readers := map[string]func(io.Reader) io.Reader{
		"one byte": iotest.OneByteReader,
		"halves":   iotest.HalfReader,
		"whole":    func(r io.Reader) io.Reader { return r },
	}
	endings := map[string]string{"LF": "\n", "CRLF": "\r\n", "CR": "\r"}
	for rname, wrap := range readers {
		for ename, nl := range endings {
			t.Run(rname+"/"+ename, func(t *testing.T) {
				text := strings.ReplaceAll(stream, "\n", nl)
				var read int
				r := &relayed{}
				b := newRelayBody(io.NopCloser(wrap(strings.NewReader(text))),
					&relay{methods: []string{"notifications/progress", "notifications/message"}, fn: r.fn}, hclog.NewNullLogger())
				// ends: the offset just past each notification event's
				// blank line. A bare CR may be the first half of a CRLF, so
				// there the parser knows an event ended only with the next
				// byte.
				var ends []int
				end := 0
				for _, e := range strings.Split(text, nl+nl) {
					end += len(e) + 2*len(nl)
					if strings.Contains(e, "notifications") && !strings.Contains(e, "list_changed") {
						if nl == "\r" {
							ends = append(ends, end+1)
						} else {
							ends = append(ends, end)
						}
					}
				}
				got := readAll(t, b, func(n int) {
					r.mu.Lock()
					defer r.mu.Unlock()
					read += n
					// Every notification whose event the session has now
					// read in full must have been relayed already.
					complete := 0
					for _, e := range ends {
						if e <= read {
							complete++
						}
					}
					if len(r.got) < complete {
						t.Errorf("the session has read %d bytes, completing %d notifications, but only %d were relayed", read, complete, len(r.got))
					}
				})
				if got != text {
					t.Fatalf("the session read %q, want the stream unchanged", got)
				}
				want := []string{
					`notifications/progress {"progressToken":"t","progress":1}`,
					`notifications/progress {"progressToken":"t","progress":2}`,
					"notifications/progress {\"progressToken\":\"t\",\"progress\":3}",
					`notifications/message {"level":"info","data":"x"}`,
				}
				if len(r.got) != len(want) {
					t.Fatalf("relayed %q, want %q", r.got, want)
				}
				// Each notification event ends with a blank line; the next
				// event's last byte comes later. The relay must have run
				// before the session read that far.
				for i, w := range want {
					if strings.ReplaceAll(r.got[i], nl, "") != strings.ReplaceAll(w, "\n", "") {
						t.Errorf("relayed #%d: %q, want %q", i, r.got[i], w)
					}
				}
			})
		}
	}
}

// Close does not wait for a relay that is busy (forwarding to a slow
// downstream), and the parser goroutine ends once the relay returns.
func TestRelayBodyCloseWhileRelaying(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	pr, pw := io.Pipe()
	b := newRelayBody(pr, &relay{methods: []string{"notifications/progress"}, fn: func(*jsonrpc.Request) {
		close(entered)
		<-release
	}}, hclog.NewNullLogger())
	go pw.Write([]byte("data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n"))
	readDone := make(chan error, 1)
	go func() {
		_, err := b.Read(make([]byte, 512))
		readDone <- err
	}()
	<-entered
	closed := make(chan struct{})
	go func() {
		b.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the relay")
	}
	close(release)
	if err := <-readDone; err != nil {
		t.Fatalf("Read: %v", err)
	}
	select {
	case <-b.p.stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the parser goroutine did not end after Close")
	}
}

// readAll reads b to its end in 4 KiB reads as the session does, calling
// after with each read's size, then closes b, waits for its parser and
// returns what was read.
func readAll(t *testing.T, b *relayBody, after func(n int)) string {
	t.Helper()
	var got bytes.Buffer
	buf := make([]byte, 4<<10)
	for {
		n, err := b.Read(buf)
		got.Write(buf[:n])
		after(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	b.Close()
	<-b.p.stopped
	return got.String()
}

// chunkReader returns at most n bytes per Read.
type chunkReader struct {
	data []byte
	n    int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	k := min(c.n, len(p), len(c.data))
	copy(p, c.data[:k])
	c.data = c.data[k:]
	return k, nil
}

// Whatever the stream and however it is cut into reads, the session reads
// it unchanged, nothing hangs, the parser goroutine ends, and the relay
// hands on exactly the notifications a parse of the whole stream at once
// finds.
func FuzzRelayBody(f *testing.F) {
	f.Add([]byte(stream), uint8(0))
	f.Add([]byte(strings.ReplaceAll(stream, "\n", "\r\n")), uint8(2))
	f.Add([]byte(strings.ReplaceAll(stream, "\n", "\r")), uint8(5))
	f.Add([]byte("data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\"}}"), uint8(9))
	f.Add([]byte(":\n\ndata\n\nevent: x\nid: 3\nretry: 10\n\n\xef\xbb\xbfdata: {}\n\n"), uint8(63))
	methods := []string{"notifications/progress", "notifications/message"}
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		var want []string
		for ev, err := range sse.Read(bytes.NewReader(data), &sse.ReadConfig{MaxEventSize: 2 * maxRelayedEvent}) {
			if err != nil {
				break
			}
			if req, ok := decodeNotification(ev.Data, methods); ok {
				want = append(want, req.Method+" "+string(req.Params))
			}
		}
		var mu sync.Mutex
		var got []string
		b := newRelayBody(io.NopCloser(&chunkReader{data: data, n: int(chunk)%64 + 1}),
			&relay{methods: methods, fn: func(req *jsonrpc.Request) {
				mu.Lock()
				got = append(got, req.Method+" "+string(req.Params))
				mu.Unlock()
			}}, hclog.NewNullLogger())
		read := make(chan []byte, 1)
		go func() {
			out, _ := io.ReadAll(b)
			read <- out
		}()
		select {
		case out := <-read:
			if !bytes.Equal(out, data) {
				t.Fatalf("the session read %q, want %q", out, data)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("reading the body hung")
		}
		b.Close()
		select {
		case <-b.p.stopped:
		case <-time.After(10 * time.Second):
			t.Fatal("the parser goroutine did not end after Close")
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(got, want) {
			t.Fatalf("relayed %q, want %q", got, want)
		}
	})
}

// A large event reaches the parser once, not once per read: the parser's
// line scanner looks at the whole unfinished event each time it is given
// more, so feeding it every 4 KiB read of a 16 MiB event cost seconds of
// CPU (a 40 MB event from a hostile upstream held a call until its
// timeout). Whether the event is one long line or many short ones, the
// parser is fed when a blank line may have arrived.
func TestRelayBodyFeedsLargeEventsOnce(t *testing.T) {
	const notification = "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n"
	for name, event := range map[string]string{
		"one line":    "data: " + strings.Repeat("x", 4<<20) + "\n\n",
		"short lines": strings.Repeat("data: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n", (4<<20)/38) + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			var relayed int
			b := newRelayBody(io.NopCloser(&chunkReader{data: []byte(notification + event + notification), n: 4 << 10}),
				&relay{methods: []string{"notifications/progress"}, fn: func(*jsonrpc.Request) { relayed++ }}, hclog.NewNullLogger())
			if _, err := io.Copy(io.Discard, b); err != nil {
				t.Fatal(err)
			}
			b.Close()
			<-b.p.stopped
			if relayed != 2 {
				t.Errorf("relayed %d notifications, want the 2 around the large event", relayed)
			}
			// Reads: about 1,000; feeds: the first notification's read,
			// the read that ends the large event, and the end of stream.
			if b.feeds > 4 {
				t.Errorf("the parser was fed %d times for a stream of three events", b.feeds)
			}
		})
	}
}

// An event over the relay's limit is skipped, not parsed: the relay holds
// at most about the limit, and parses again from the next event, so a
// notification after a huge result is still relayed — for every line
// ending.
func TestRelayBodySkipsOversizedEvents(t *testing.T) {
	for ename, nl := range map[string]string{"LF": "\n", "CRLF": "\r\n", "CR": "\r"} {
		t.Run(ename, func(t *testing.T) {
			note := func(i int) string {
				return fmt.Sprintf(`data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":%d}}`, i) + nl + nl
			}
			big := "data: " + strings.Repeat("x", maxRelayedEvent+1) + nl + nl
			lines := strings.Repeat("data: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"+nl, (maxRelayedEvent+1)/36) + nl
			text := note(1) + big + note(2) + lines + note(3)
			var got []string
			b := newRelayBody(io.NopCloser(&chunkReader{data: []byte(text), n: 4 << 10}),
				&relay{methods: []string{"notifications/progress"}, fn: func(req *jsonrpc.Request) { got = append(got, string(req.Params)) }},
				hclog.NewNullLogger())
			maxHeld := 0
			read := readAll(t, b, func(int) { maxHeld = max(maxHeld, len(b.held)) })
			if read != text {
				t.Fatal("the session did not read the stream unchanged")
			}
			want := []string{`{"progress":1}`, `{"progress":2}`, `{"progress":3}`}
			if !slices.Equal(got, want) {
				t.Fatalf("relayed %q, want %q", got, want)
			}
			if maxHeld > maxRelayedEvent+4<<10 {
				t.Errorf("the relay held %d bytes at once, limit %d", maxHeld, maxRelayedEvent)
			}
		})
	}
}
