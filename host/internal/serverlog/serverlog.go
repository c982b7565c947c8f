// Package serverlog keeps the recent stderr of each server a host runs,
// for `mcpvisor logs` and Host.Logs (docs/design.md §15; docs/operations.md,
// "Server logs").
//
// Design note. One Log per server name, owned by the host and kept across
// the server's processes (a respawn, a restart, a reload that replaces its
// supervisor), so a follower sees the lines of the next process after
// those of the last one. A Log is bounded twice: at most MaxLines lines
// and at most MaxBytes bytes of text; the oldest lines go first. What the
// stderr rate limits of package transport drop (docs/security.md, "Summary
// of limits") never reaches the Log: a line saying how many lines and
// bytes were dropped stands in their place, so a reader knows there is a
// gap. Every line has a sequence number, growing by one per line for the
// life of the Log, so a follower asks for "the lines after N" and a line
// that fell off the front is seen as a gap, never read twice.
//
// Lock story: mu guards every field; wake is closed and replaced under mu
// on every append, so a follower waits for the next line without polling.
package serverlog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

const (
	// MaxLines bounds the lines a Log keeps per server.
	MaxLines = 1000
	// MaxBytes bounds the bytes of text a Log keeps per server: with a
	// line of at most 8 KiB (transport's maxStderrLine) it still holds 32
	// of the longest lines.
	MaxBytes = 256 << 10
)

// Kind says what a Line records.
type Kind string

// The kinds of line.
const (
	// KindStderr is a line the server wrote to its stderr.
	KindStderr Kind = "stderr"
	// KindDropped stands for stderr lines the rate limits dropped; its
	// text says how many.
	KindDropped Kind = "dropped"
	// KindStarted marks the start of a new process of the server.
	KindStarted Kind = "started"
)

// Line is one kept line.
type Line struct {
	// Seq numbers the line within its Log, from 1.
	Seq uint64
	// Time is when the line was read.
	Time time.Time
	// Kind says what the line records.
	Kind Kind
	// Text is the line, without its newline.
	Text string
}

// ErrClosed is returned to a follower of a Log that was closed: its
// server was removed, or its host closed.
var ErrClosed = errors.New("the server's log was closed")

// Log is one server's recent stderr; see the design note above. The zero
// value is not usable: use New.
type Log struct {
	mu     sync.Mutex
	lines  []Line // oldest first
	bytes  int    // len of every kept line's Text
	next   uint64 // Seq of the next line
	wake   chan struct{}
	closed bool
}

// New returns an empty Log.
func New() *Log { return &Log{next: 1, wake: make(chan struct{})} }

// Line keeps one stderr line.
func (l *Log) Line(text string) { l.append(KindStderr, text) }

// Dropped records that the rate limits dropped lines (bytes of them,
// newlines included) since the last kept line.
func (l *Log) Dropped(lines, bytes int) {
	l.append(KindDropped, fmt.Sprintf("… %d stderr line(s) (%d bytes) dropped here: the server wrote faster than the stderr limits take", lines, bytes))
}

// Started marks the start of the server's process pid.
func (l *Log) Started(pid int) {
	l.append(KindStarted, fmt.Sprintf("— process %d started", pid))
}

func (l *Log) append(kind Kind, text string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.lines = append(l.lines, Line{Seq: l.next, Time: time.Now(), Kind: kind, Text: text})
	l.next++
	l.bytes += len(text)
	drop := 0
	for len(l.lines)-drop > MaxLines || (l.bytes > MaxBytes && len(l.lines)-drop > 1) {
		l.bytes -= len(l.lines[drop].Text)
		drop++
	}
	// Slicing off the front shrinks the capacity too: the next append
	// that needs room copies the kept lines into a new array.
	l.lines = l.lines[drop:]
	close(l.wake)
	l.wake = make(chan struct{})
}

// Tail returns the last n kept lines (every kept line for n <= 0), oldest
// first.
func (l *Log) Tail(n int) []Line {
	lines, _ := l.tail(n)
	return lines
}

// tail is Tail, and the Seq of the last line appended so far.
func (l *Log) tail(n int) ([]Line, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := l.lines
	if n > 0 && len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return append([]Line(nil), lines...), l.next - 1
}

// after returns the kept lines with a Seq above seq, a channel closed when
// the next line is appended, and whether the Log is closed.
func (l *Log) after(seq uint64) ([]Line, <-chan struct{}, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := len(l.lines)
	for i > 0 && l.lines[i-1].Seq > seq {
		i--
	}
	return append([]Line(nil), l.lines[i:]...), l.wake, l.closed
}

// Follow calls fn with the last n kept lines (every kept line for n <= 0)
// and then with each new line as it comes, until ctx ends (it returns
// ctx's error), fn fails (its error), or the Log is closed (ErrClosed).
// Lines that fell off the front while fn was slow are skipped, never
// repeated.
func (l *Log) Follow(ctx context.Context, n int, fn func(Line) error) error {
	// seq is the last line handed to fn, or skipped: the tail and the
	// point to follow from are read under one lock, so no line falls
	// between them.
	lines, seq := l.tail(n)
	if len(lines) > 0 {
		seq = lines[0].Seq - 1
	}
	for {
		for _, line := range lines {
			if err := fn(line); err != nil {
				return err
			}
			seq = line.Seq
		}
		var wake <-chan struct{}
		var closed bool
		lines, wake, closed = l.after(seq)
		if len(lines) > 0 {
			continue
		}
		if closed {
			return ErrClosed
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		}
		lines, _, _ = l.after(seq)
	}
}

// Close ends every Follow (ErrClosed) and keeps no more lines; what was
// kept can still be read with Tail.
func (l *Log) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.wake)
	}
}
