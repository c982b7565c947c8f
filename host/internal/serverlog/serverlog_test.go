package serverlog_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/host/internal/serverlog"
)

// TestBounds: the Log keeps at most MaxLines lines and MaxBytes bytes,
// dropping the oldest, and numbers lines for its whole life.
func TestBounds(t *testing.T) {
	l := serverlog.New()
	for i := range serverlog.MaxLines + 50 {
		l.Line(fmt.Sprintf("line %d", i))
	}
	got := l.Tail(0)
	if len(got) != serverlog.MaxLines {
		t.Fatalf("kept %d lines, want %d", len(got), serverlog.MaxLines)
	}
	if got[0].Text != "line 50" || got[0].Seq != 51 || got[len(got)-1].Seq != serverlog.MaxLines+50 {
		t.Errorf("first kept %+v, last seq %d", got[0], got[len(got)-1].Seq)
	}
	if tail := l.Tail(3); len(tail) != 3 || tail[2].Text != fmt.Sprintf("line %d", serverlog.MaxLines+49) {
		t.Errorf("Tail(3) = %+v", tail)
	}

	big := strings.Repeat("x", 8<<10)
	for range 100 {
		l.Line(big)
	}
	total := 0
	for _, line := range l.Tail(0) {
		total += len(line.Text)
	}
	if total > serverlog.MaxBytes || total < serverlog.MaxBytes-len(big) {
		t.Errorf("kept %d bytes, want at most %d and within a line of it", total, serverlog.MaxBytes)
	}
	l.Dropped(7, 700)
	if last := l.Tail(1)[0]; last.Kind != serverlog.KindDropped || !strings.Contains(last.Text, "7 stderr line(s) (700 bytes) dropped") {
		t.Errorf("drop marker = %+v", last)
	}
}

// TestFollow: a follower gets the tail, then each new line, and ends
// with ErrClosed when the Log is closed.
func TestFollow(t *testing.T) {
	l := serverlog.New()
	l.Line("old 1")
	l.Line("old 2")
	got := make(chan serverlog.Line, 10)
	done := make(chan error, 1)
	go func() {
		done <- l.Follow(context.Background(), 1, func(line serverlog.Line) error { got <- line; return nil })
	}()
	if line := <-got; line.Text != "old 2" {
		t.Fatalf("first followed line %q, want the tail \"old 2\"", line.Text)
	}
	l.Started(42)
	l.Line("new")
	if line := <-got; line.Kind != serverlog.KindStarted || line.Text != "— process 42 started" {
		t.Errorf("got %+v, want the start marker", line)
	}
	if line := <-got; line.Text != "new" {
		t.Errorf("got %q, want \"new\"", line.Text)
	}
	l.Close()
	if err := <-done; !errors.Is(err, serverlog.ErrClosed) {
		t.Errorf("Follow after Close = %v, want ErrClosed", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := serverlog.New().Follow(ctx, 0, func(serverlog.Line) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("Follow with a canceled context = %v", err)
	}
}
