package cli

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/host"
)

const (
	// progressQuiet is how long a wait stays silent: a startup faster than
	// that needs no progress line.
	progressQuiet = time.Second
	// progressEvery is how often the progress line is recomputed; it is
	// printed only when it changes.
	progressEvery = 250 * time.Millisecond
)

// isTerminal reports whether w is a terminal a person watches: a character
// device other than /dev/null. Progress goes only there, so that the logs
// of a service (a pipe, a file, journald) stay clean.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	if null, err := os.Stat(os.DevNull); err == nil && os.SameFile(fi, null) {
		return false
	}
	return true
}

// showStartup prints, on a terminal, how the servers of h come up while
// `run` waits for them: nothing for the first progressQuiet, then a line
// each time the counts change, and the final counts when stop is called.
// Elsewhere it does nothing.
func showStartup(w io.Writer, h *host.Host) (stop func()) {
	if !isTerminal(w) {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	var printed string // guarded by wg: written by the goroutine, read after Wait
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-done:
			return
		case <-time.After(progressQuiet):
		}
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			if line := startupLine(h.Status(), false); line != printed {
				fmt.Fprintln(w, line)
				printed = line
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		if printed == "" {
			return // came up within progressQuiet: no news
		}
		if line := startupLine(h.Status(), true); line != printed {
			fmt.Fprintln(w, line)
		}
	}
}

// startupLine renders the servers' startup: "starting 3 servers… 2 ready,
// 1 failed (notes: …)"; final says the wait is over.
func startupLine(sts []host.ServerStatus, final bool) string {
	var total, ready, failed int
	var notes []string
	for _, s := range sts {
		switch s.State {
		case host.StateDisabled:
			continue
		case host.StateReady, host.StateIdle:
			ready++
		case host.StateStarting:
		default: // reconnecting, parked, needs_login, needs_config, stopped
			failed++
			notes = append(notes, fmt.Sprintf("%s %s: %s", s.Name, s.State, firstLine(cmp.Or(s.Action, s.LastError, "no error given"))))
		}
		total++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "starting %d server%s… %d ready", total, plural(total), ready)
	if failed > 0 {
		fmt.Fprintf(&b, ", %d failed", failed)
	}
	if starting := total - ready - failed; starting > 0 {
		if final {
			fmt.Fprintf(&b, ", %d still starting (serving anyway; they join when ready)", starting)
		} else {
			fmt.Fprintf(&b, ", %d starting", starting)
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(&b, " (notes: %s)", strings.Join(notes, "; "))
	}
	return termSafe(b.String())
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// firstLine is s up to its first line break, at most 200 bytes: a note,
// not the whole error.
func firstLine(s string) string {
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = strings.ToValidUTF8(s[:200], "") + "…"
	}
	return s
}
