package transport

/*
Design note: a server's own output is rate limited per server.

A server's stderr (and a plugin's forwarded output) is written into
mcpvisor's log line by line. A server that writes megabytes a second — a
debug flag left on, a crash loop printing a stack trace per request — would
otherwise grow the host's log without bound and bury everything else in it.

One OutputLimiter serves one server block for as long as the block runs,
across restarts of its process: a token bucket (golang.org/x/time/rate) of
outputBurst lines refilled at outputRate lines a second. A line that finds
the bucket empty is dropped and counted. The count is logged as one warning
("lines dropped", dropped=N) before the next admitted line, or
outputSummaryDelay after the first drop when nothing is admitted by then, or
when the output ends (Flush) — whichever comes first, so that a burst
followed by silence is still accounted for. Callers keep their own tail of
the output for error messages and feed it before asking the limiter, so the
last words of a server that floods and then crashes still reach the error.
*/

import (
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/time/rate"
)

const (
	// outputRate is how many lines a second a server's output may add to
	// the log once its burst is spent.
	outputRate = 100

	// outputBurst is how many lines a server may write at once before the
	// limit applies, so that a startup banner or one stack trace gets into
	// the log whole.
	outputBurst = 500

	// outputSummaryDelay bounds how long a count of dropped lines waits for
	// the next admitted line before it is logged on its own.
	outputSummaryDelay = time.Second
)

// OutputLimiter decides which lines of one server's output reach the log.
// It is safe for concurrent use by the readers of several streams.
type OutputLimiter struct {
	logger hclog.Logger
	bucket *rate.Limiter

	mu      sync.Mutex
	dropped int
	summary *time.Timer // logs the pending count; nil when nothing is pending
}

// NewOutputLimiter returns a limiter that logs its summaries of dropped
// lines to logger, which should be named for the server.
func NewOutputLimiter(logger hclog.Logger) *OutputLimiter {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &OutputLimiter{logger: logger, bucket: rate.NewLimiter(outputRate, outputBurst)}
}

// Allow reports whether the next line may be logged. When it may and lines
// were dropped before it, the count of those is logged first.
func (l *OutputLimiter) Allow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.bucket.Allow() {
		l.dropped++
		if l.summary == nil {
			l.summary = time.AfterFunc(outputSummaryDelay, l.Flush)
		}
		return false
	}
	l.summarize()
	return true
}

// Flush logs the count of lines dropped since the last summary, if any.
// Call it when a stream ends, so that the count is not held back.
func (l *OutputLimiter) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.summarize()
}

// summarize logs and resets the dropped count. l.mu is held.
func (l *OutputLimiter) summarize() {
	if l.summary != nil {
		l.summary.Stop()
		l.summary = nil
	}
	if l.dropped == 0 {
		return
	}
	l.logger.Warn("output lines dropped: the server writes faster than the log takes",
		"dropped", l.dropped, "lines_per_second", outputRate, "burst", outputBurst)
	l.dropped = 0
}
