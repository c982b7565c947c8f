package host

// Each server's recent stderr (docs/operations.md, "Server logs"): kept
// per server name across its processes (host/internal/serverlog), read by
// Logs and FollowLogs and by `mcpvisor logs` through GET /control/logs,
// which answers operators only (operator.go): a server's stderr can carry
// what its callers sent it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/host/internal/serverlog"
)

// Bounds of the stderr kept per server (docs/security.md, "Summary of
// limits"): the oldest lines go first.
const (
	// MaxLogLines is how many lines of a server's stderr are kept.
	MaxLogLines = serverlog.MaxLines
	// MaxLogBytes is how many bytes of them are kept.
	MaxLogBytes = serverlog.MaxBytes
)

// The kinds of LogLine.
const (
	// LogStderr is a line the server wrote to its stderr.
	LogStderr = string(serverlog.KindStderr)
	// LogDropped stands for stderr lines the rate limits dropped (its
	// text says how many); the host's log has none of them either.
	LogDropped = string(serverlog.KindDropped)
	// LogStarted marks the start of a new process of the server.
	LogStarted = string(serverlog.KindStarted)
)

// LogLine is one line of a server's recent stderr, as Logs returns it and
// GET /control/logs streams it (one JSON object a line).
type LogLine struct {
	// Seq numbers the server's lines since the host started (or since the
	// server was added): a gap means lines that fell off the front.
	Seq uint64 `json:"seq"`
	// Time is when the host read the line.
	Time time.Time `json:"time"`
	// Kind is LogStderr, LogDropped or LogStarted.
	Kind string `json:"kind"`
	// Text is the line, without its newline; a line over 8 KiB is cut
	// and says so.
	Text string `json:"text"`
}

// LogEnd is the last line of a followed GET /control/logs stream that
// ended from the host's side.
type LogEnd struct {
	// End says why: the host is shutting down, or the server was removed.
	End string `json:"end"`
}

// Logs returns the last n kept lines of the named server's stderr (every
// kept line for n <= 0), oldest first. A server reached over HTTP has
// none. An unknown name is an error wrapping ErrUnknownServer.
func (h *Host) Logs(name string, n int) ([]LogLine, error) {
	if _, err := h.sup(name); err != nil {
		return nil, err
	}
	lines := h.stderrLogs.of(name).Tail(n)
	out := make([]LogLine, len(lines))
	for i, l := range lines {
		out[i] = logLine(l)
	}
	return out, nil
}

// FollowLogs calls fn with the last n kept lines of the named server's
// stderr (every kept line for n <= 0), then with each new line as the
// server, or its next process after a restart, writes it. It returns when
// ctx ends (ctx's error), fn fails (its error), the host closes or the
// server is removed by a reload (ErrLogClosed).
func (h *Host) FollowLogs(ctx context.Context, name string, n int, fn func(LogLine) error) error {
	if _, err := h.sup(name); err != nil {
		return err
	}
	err := h.stderrLogs.of(name).Follow(ctx, n, func(l serverlog.Line) error { return fn(logLine(l)) })
	if errors.Is(err, serverlog.ErrClosed) {
		return ErrLogClosed
	}
	return err
}

// ErrLogClosed is FollowLogs' error when the host closed or the server
// was removed.
var ErrLogClosed = errors.New("the server's log was closed: the host closed or the server was removed")

func logLine(l serverlog.Line) LogLine {
	return LogLine{Seq: l.Seq, Time: l.Time, Kind: string(l.Kind), Text: l.Text}
}

// serverLogs is the host's Log of each server name.
type serverLogs struct {
	mu     sync.Mutex
	logs   map[string]*serverlog.Log // guarded by mu
	closed bool                      // guarded by mu; set by closeAll
}

// of returns name's Log, made on first use.
func (s *serverLogs) of(name string) *serverlog.Log {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.logs == nil {
		s.logs = map[string]*serverlog.Log{}
	}
	l, ok := s.logs[name]
	if !ok {
		l = serverlog.New()
		if s.closed {
			l.Close()
		}
		s.logs[name] = l
	}
	return l
}

// remove closes and forgets name's Log (its server was removed).
func (s *serverLogs) remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.logs[name]; ok {
		l.Close()
		delete(s.logs, name)
	}
}

// closeAll ends every follower (the host closed).
func (s *serverLogs) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, l := range s.logs {
		l.Close()
	}
}

// isClosed reports whether closeAll has run.
func (s *serverLogs) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// serveLogs is GET /control/logs?server=NAME[&lines=N][&follow=1]: the
// kept lines as JSON lines (LogLine), and with follow each new one as it
// comes, until the client goes, the server is removed or the host stops
// (a last LogEnd line says which of the last two). An unknown server is a
// 404 with a ControlResult error.
func (h *Host) serveLogs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	name := q.Get("server")
	n := 0
	if s := q.Get("lines"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(ControlResult{Error: fmt.Sprintf("lines=%q: want a whole number of lines, 0 for all", s)})
			return
		}
		n = v
	}
	follow := q.Get("follow") == "1" || q.Get("follow") == "true"
	if _, err := h.sup(name); err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		json.NewEncoder(w).Encode(ControlResult{Error: err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	enc := json.NewEncoder(w)
	if !follow {
		lines, _ := h.Logs(name, n)
		for _, l := range lines {
			enc.Encode(l)
		}
		return
	}
	rc := http.NewResponseController(w)
	w.WriteHeader(http.StatusOK)
	rc.Flush()
	// The stream ends when the host begins to stop, with a word saying
	// so, rather than being cut when Serve ends the GET streams.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-h.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	// fn runs on this goroutine only (serverlog.Log.Follow).
	err := h.FollowLogs(ctx, name, n, func(l LogLine) error {
		if err := enc.Encode(l); err != nil {
			return err
		}
		return rc.Flush()
	})
	switch {
	case h.stoppingNow() || h.stderrLogs.isClosed():
		enc.Encode(LogEnd{End: "the host is shutting down"})
	case errors.Is(err, ErrLogClosed):
		enc.Encode(LogEnd{End: fmt.Sprintf("server %q was removed from the configuration", name)})
	default:
		return // the client went away
	}
	rc.Flush()
}
