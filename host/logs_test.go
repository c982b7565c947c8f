//go:build unix

package host_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host"
	"github.com/mcpvisor/mcpvisor/host/config"
)

// TestLogsAPI is the embedder's view of each server's kept stderr:
// Host.Logs returns the lines in order after a mark for the process, the
// last n of them, a mark where the stderr rate limits dropped lines, and
// an unknown server is ErrUnknownServer; Host.FollowLogs goes on through
// a Restart (the new process's lines after its own mark) and ends with
// ErrLogClosed when a reload removes the server, as it does for every
// follower when the host closes.
func TestLogsAPI(t *testing.T) {
	// "flood" writes 2000 lines at once, past the 500-line burst of the
	// stderr limits, then, once the bucket has refilled a little, one
	// more line that passes.
	src := fmt.Sprintf(`
server "chatty" {
  command = "/bin/sh"
  args    = ["-c", "echo one >&2; echo two >&2; echo three >&2; exec \"$0\"", %[1]q]
}
server "flood" {
  command = "/bin/sh"
  args    = ["-c", "i=0; while [ $i -lt 2000 ]; do echo \"flood $i\" >&2; i=$((i+1)); done; sleep 0.3; echo after >&2; exec \"$0\"", %[1]q]
}
`, bins["echo"])
	h := readyHost(t, src)

	lines, err := h.Logs("chatty", 0)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, l := range lines {
		texts = append(texts, l.Text)
	}
	if len(lines) != 5 || lines[0].Kind != host.LogStarted || !strings.HasPrefix(lines[0].Text, "— process ") ||
		strings.Join(texts[1:4], ",") != "one,two,three" || !strings.HasPrefix(texts[4], "echo server starting pid=") {
		t.Fatalf("Logs(chatty) = %q; want the start mark, one, two, three and the echo server's start line", texts)
	}
	if last, _ := h.Logs("chatty", 2); len(last) != 2 || last[0].Text != "three" || last[1].Seq != lines[4].Seq {
		t.Errorf("Logs(chatty, 2) = %+v; want the last two lines", last)
	}
	if _, err := h.Logs("chaty", 0); !errors.Is(err, host.ErrUnknownServer) {
		t.Errorf("Logs of an unknown server: %v; want ErrUnknownServer", err)
	}
	// Over HTTP the lines are for operators only: a caller without a
	// credential, on a host without auth, is refused.
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/control/logs?server=chatty")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || strings.Contains(string(body), "one") {
		t.Errorf("GET /control/logs without a credential: %s %s; want 403 and no line", resp.Status, body)
	}

	flood, _ := h.Logs("flood", 0)
	dropped, after := -1, -1
	for i, l := range flood {
		switch {
		case l.Kind == host.LogDropped:
			dropped = i
		case l.Text == "after":
			after = i
		}
	}
	if len(flood) > host.MaxLogLines || dropped < 0 || after != dropped+1 || !strings.Contains(flood[dropped].Text, "dropped") {
		t.Errorf("Logs(flood): %d lines, the drop mark at %d, \"after\" at %d; want at most %d lines and the mark just before \"after\"", len(flood), dropped, after, host.MaxLogLines)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	got := make(chan host.LogLine, 100)
	followed := make(chan error, 1)
	go func() {
		followed <- h.FollowLogs(ctx, "chatty", 1, func(l host.LogLine) error { got <- l; return nil })
	}()
	next := func() host.LogLine {
		t.Helper()
		select {
		case l := <-got:
			return l
		case <-ctx.Done():
			t.Fatal("FollowLogs gave no line in time")
		}
		return host.LogLine{}
	}
	if l := next(); l.Seq != lines[4].Seq {
		t.Fatalf("FollowLogs(chatty, 1) began with %+v; want the last kept line", l)
	}
	if err := h.Restart(ctx, "chatty"); err != nil {
		t.Fatal(err)
	}
	var sawMark, sawOne bool
	for !sawOne {
		l := next()
		sawMark = sawMark || l.Kind == host.LogStarted
		sawOne = l.Text == "one"
	}
	if !sawMark {
		t.Error("the restarted process's lines came without its start mark")
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf("server \"flood\" {\n  command = %q\n}\n", bins["echo"])), h.Config().Filename)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Reload(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-followed:
		if !errors.Is(err, host.ErrLogClosed) {
			t.Errorf("FollowLogs of a removed server: %v; want ErrLogClosed", err)
		}
	case <-ctx.Done():
		t.Fatal("FollowLogs went on after its server was removed")
	}

	go func() {
		followed <- h.FollowLogs(ctx, "flood", 0, func(host.LogLine) error { return nil })
	}()
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-followed:
		if !errors.Is(err, host.ErrLogClosed) {
			t.Errorf("FollowLogs when the host closed: %v; want ErrLogClosed", err)
		}
	case <-ctx.Done():
		t.Fatal("FollowLogs went on after the host closed")
	}
}
