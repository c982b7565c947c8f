package transport

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// hangGuard bounds what a test waits for; it is never reached when the
// code works.
const hangGuard = 30 * time.Second

// TestResultBudgetsAreSeparate: two budgets (two Hosts) do not share their
// bytes.
func TestResultBudgetsAreSeparate(t *testing.T) {
	a, b := NewResultBudget(1<<20), NewResultBudget(1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := a.reserve(ctx, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := b.reserve(ctx, 0, 1<<20); err != nil {
		t.Fatalf("b is full because a is: %v", err)
	}
	if a.InUse() != 1<<20 || b.InUse() != 1<<20 {
		t.Fatalf("in use: a %d, b %d", a.InUse(), b.InUse())
	}
}

// TestResultBudgetWaitsForRoom: a reservation that does not fit waits until
// another is released, and fails as busy when its context ends first.
func TestResultBudgetWaitsForRoom(t *testing.T) {
	b := NewResultBudget(1 << 20)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := b.reserve(ctx, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- b.reserve(ctx, 0, 512<<10) }()
	waitFor(t, func() bool { return b.waiting() == 1 })
	b.release(1 << 20)
	if err := <-got; err != nil {
		t.Fatalf("the waiting reservation failed after room was made: %v", err)
	}

	short, stop := context.WithCancel(ctx)
	go func() { got <- b.reserve(short, 0, 1<<20) }()
	waitFor(t, func() bool { return b.waiting() == 1 })
	stop()
	if err := <-got; !errors.Is(err, ErrBusy) || !errors.Is(err, context.Canceled) {
		t.Fatalf("a reservation whose context ended: %v, want ErrBusy wrapping the context's error", err)
	}
}

// TestResultBudgetBreaksWaitCycle: two readers that each hold half the
// budget and wait for more would wait for each other forever; the one that
// completes the cycle fails, and the other gets its room.
func TestResultBudgetBreaksWaitCycle(t *testing.T) {
	b := NewResultBudget(1 << 20)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	half := int64(512 << 10)
	for range 2 {
		if err := b.reserve(ctx, 0, half); err != nil {
			t.Fatal(err)
		}
	}
	first := make(chan error, 1)
	go func() { first <- b.reserve(ctx, half, 256<<10) }()
	waitFor(t, func() bool { return b.waiting() == 1 })
	if err := b.reserve(ctx, half, 256<<10); !errors.Is(err, ErrBusy) {
		t.Fatalf("the reader completing the wait cycle: %v, want ErrBusy", err)
	}
	b.release(half) // what the failed reader does
	if err := <-first; err != nil {
		t.Fatalf("the other reader did not get the room: %v", err)
	}
}

// waiting counts the readers waiting for room.
func (b *ResultBudget) waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.waiters
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBoundedRoundTripperRefusesLargeBodies runs a real HTTP server that
// answers with bodies over the limit: with a Content-Length (refused before
// it is read) and chunked (refused once the limit is passed). Both fail
// the round trip with a *recovery.Error wrapping ErrMessageTooLarge, and
// the budget is whole again; a body within the limit arrives intact and
// keeps its bytes reserved until the request's context ends.
func TestBoundedRoundTripperRefusesLargeBodies(t *testing.T) {
	const limit = 64 << 10
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("length") == "1" {
			w.Header().Set("Content-Length", strconv.Itoa(n))
		}
		io.WriteString(w, strings.Repeat("x", n))
	}))
	defer srv.Close()
	budget := NewResultBudget(1 << 20)
	client := &http.Client{Transport: &boundedRoundTripper{
		base: srv.Client().Transport, server: "big", limit: limit, budget: budget, logger: hclog.NewNullLogger(),
	}}
	get := func(ctx context.Context, n int, length bool) (string, error) {
		url := srv.URL + "/?n=" + strconv.Itoa(n)
		if length {
			url += "&length=1"
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("{}"))
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	for _, length := range []bool{true, false} {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		_, err := get(ctx, 4*limit, length)
		var re *recovery.Error
		if !errors.Is(err, ErrMessageTooLarge) || !errors.As(err, &re) || re.Server != "big" || !strings.Contains(err.Error(), "max_message_size (64KiB)") {
			t.Errorf("a %d-byte body (Content-Length %v) over a %d-byte limit: %v", 4*limit, length, limit, err)
		}
		if n := budget.InUse(); n != 0 {
			t.Errorf("after a refused body (Content-Length %v), %d bytes are still reserved", length, n)
		}

		body, err := get(ctx, limit, length)
		if err != nil || len(body) != limit {
			t.Errorf("a body at the limit (Content-Length %v): %d bytes, %v", length, len(body), err)
		}
		if n := budget.InUse(); n != limit {
			t.Errorf("while its call is on, a body at the limit holds %d bytes of the budget, want %d", n, limit)
		}
		cancel()
		waitFor(t, func() bool { return budget.InUse() == 0 })
	}
}

// TestEventLimitBody reads streams through the event bound one byte at a
// time and whole: events within the limit pass unchanged (LF and CRLF
// line ends); a result event over it becomes an event answering its call
// with the refusal, keeping its id; a notification over it is dropped; a
// stream that ends inside an oversized event answers the stream's call.
func TestEventLimitBody(t *testing.T) {
	const limit = 1 << 10
	big := strings.Repeat("y", 4*limit)
	small := "event: message\nid: 1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n"
	refused := func(id string) string {
		return "event: message\nid: 2\ndata: {\"jsonrpc\":\"2.0\",\"id\":" + id + ",\"error\":{\"code\":-32010,\"message\":\"server \\\"big\\\": the server's response (more than 1KiB) is larger than its max_message_size (1KiB); the call failed and the server stays connected. If results this large are expected, raise max_message_size in the server block: upstream response larger than max_message_size\",\"data\":{\"kind\":\"application\",\"limit\":\"max_message_size\",\"server\":\"big\"}}}\n\n"
	}
	for _, tc := range []struct {
		name, in, want string
		callID         string
	}{
		{"within the limit", small + strings.ReplaceAll(small, "\n", "\r\n"), small + strings.ReplaceAll(small, "\n", "\r\n"), ""},
		{"result over the limit", small + "event: message\nid: 2\ndata: {\"result\":{\"text\":\"" + big + "\"},\"jsonrpc\":\"2.0\",\"id\":7}\n\n" + small, small + refused("7") + small, ""},
		{"notification over the limit", "id: 2\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"data\":\"" + big + "\"}}\n\n" + small, small, ""},
		{"stream ends inside an oversized event", small + "event: message\nid: 2\ndata: " + big, small + refused("3"), "3"},
	} {
		for _, oneByte := range []bool{false, true} {
			var r io.Reader = strings.NewReader(tc.in)
			if oneByte {
				r = iotest.OneByteReader(r)
			}
			rt := &boundedRoundTripper{server: "big", limit: limit, logger: hclog.NewNullLogger()}
			req, _ := http.NewRequest(http.MethodGet, "http://upstream/mcp", nil)
			b := newEventLimitBody(io.NopCloser(r), limit, func() json.RawMessage {
				if tc.callID == "" {
					return nil
				}
				return json.RawMessage(tc.callID)
			}, func() *recovery.Error { return rt.tooLarge(req, -1) }, hclog.NewNullLogger())
			got, err := io.ReadAll(b)
			if err != nil || string(got) != tc.want {
				t.Errorf("%s (one byte at a time: %v): read %v\n%q\nwant\n%q", tc.name, oneByte, err, got, tc.want)
			}
		}
	}
}
