package cli

// The logs command: a server's recent stderr, kept by the running host
// (host/logs.go; docs/operations.md, "Server logs").

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"

	"github.com/mcpvisor/mcpvisor/host"
)

func logsCmd(args []string, stdio IO) int {
	fs, path, addr, token := newControlFlags("logs", stdio)
	follow := fs.Bool("f", false, "follow: print new lines as the server writes them, across its restarts, until interrupted or the host stops")
	fs.BoolVar(follow, "follow", false, "same as -f")
	lines := fs.Int("n", 0, "print the last `N` lines only (default: every kept line, at most 1000)")
	asJSON := fs.Bool("json", false, "print each line as a JSON object (seq, time, kind, text)")
	name, ok := parseOneArg(fs, args, stdio, commands["logs"].synopsis)
	if !ok {
		return ExitUsage
	}
	if *lines < 0 {
		fmt.Fprintln(stdio.Stderr, "mcpvisor logs: -n must be 0 (every kept line) or more")
		return ExitUsage
	}
	if *addr == "" {
		paths, code := runningConfigs("logs", *path, fs, false, stdio)
		if paths == nil {
			return code
		}
		*path = paths[0]
	}
	ts, code := findTargets("logs", *path, *addr, *token, fs, stdio)
	if ts == nil {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	q := url.Values{"server": {name}}
	if *lines > 0 {
		q.Set("lines", strconv.Itoa(*lines))
	}
	if *follow {
		q.Set("follow", "1")
	}
	// Several hosts serving one config run a process each: every host's
	// lines are printed, each line prefixed with its host.
	out := &lineWriter{w: stdio.Stdout}
	results := make([]int, len(ts))
	var wg sync.WaitGroup
	for i, t := range ts {
		prefix := ""
		if len(ts) > 1 {
			prefix = "[" + t.name + "] "
		}
		wg.Go(func() { results[i] = streamLogs(ctx, t, name, q, prefix, *asJSON, out, stdio) })
	}
	wg.Wait()
	for _, c := range results {
		if c != ExitOK {
			return c
		}
	}
	return ExitOK
}

// lineWriter writes whole lines from several goroutines.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) line(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintln(l.w, s)
}

// streamLogs prints what GET /control/logs of t answers, until it ends or
// ctx does.
func streamLogs(ctx context.Context, t target, name string, q url.Values, prefix string, asJSON bool, out *lineWriter, stdio IO) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.base+"/control/logs?"+q.Encode(), nil)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor logs: %v\n", err)
		return ExitRuntime
	}
	if t.token != "" {
		req.Header.Set("Authorization", "Bearer "+t.token)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ExitOK
		}
		fmt.Fprintf(stdio.Stderr, "mcpvisor logs: no host answering at %s: %s (a server's logs are kept by the host that runs it: is `mcpvisor run` running with this config?)\n", t.name, termSafeErr(err))
		return ExitRuntime
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		var res host.ControlResult
		if json.NewDecoder(resp.Body).Decode(&res) != nil || res.Error == "" {
			fmt.Fprintf(stdio.Stderr, "mcpvisor logs: %s answered %s: it has no logs endpoint (an older mcpvisor?)\n", t.name, termSafe(resp.Status))
			return ExitRuntime
		}
		fmt.Fprintf(stdio.Stderr, "mcpvisor logs: %s: %s%s\n", t.name, termSafe(res.Error), serverHint(t, name))
		return ExitUsage
	default:
		var res host.ControlResult
		msg := termSafe(resp.Status)
		if json.NewDecoder(resp.Body).Decode(&res) == nil && res.Error != "" {
			msg += ": " + termSafe(res.Error)
		}
		fmt.Fprintf(stdio.Stderr, "mcpvisor logs: %s answered %s%s\n", t.name, msg, authHint(resp.StatusCode))
		return ExitRuntime
	}
	sc := bufio.NewScanner(resp.Body)
	// A line is at most 8 KiB of text (escaped in JSON, up to six times).
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	ended, gotLine := false, false
	for sc.Scan() {
		gotLine = true
		raw := sc.Bytes()
		var end host.LogEnd
		if json.Unmarshal(raw, &end) == nil && end.End != "" {
			fmt.Fprintf(stdio.Stderr, "mcpvisor logs: %s: %s\n", t.name, termSafe(end.End))
			ended = true
			break
		}
		if asJSON {
			out.line(prefix + string(raw))
			continue
		}
		var l host.LogLine
		if err := json.Unmarshal(raw, &l); err != nil {
			fmt.Fprintf(stdio.Stderr, "mcpvisor logs: unreadable answer from %s: %v\n", t.name, err)
			return ExitRuntime
		}
		out.line(prefix + termSafe(l.Text))
	}
	if ended || q.Get("follow") == "" {
		if err := sc.Err(); err != nil && !ended {
			fmt.Fprintf(stdio.Stderr, "mcpvisor logs: reading from %s: %s\n", t.name, termSafeErr(err))
			return ExitRuntime
		}
		if !gotLine {
			fmt.Fprintf(stdio.Stderr, "mcpvisor logs: %s keeps no stderr of %q: a server reached over HTTP has none here, and a stdio one has not started or written any yet\n", t.name, name)
		}
		return ExitOK
	}
	if ctx.Err() != nil || errors.Is(sc.Err(), context.Canceled) {
		return ExitOK // interrupted
	}
	fmt.Fprintf(stdio.Stderr, "mcpvisor logs: the connection to %s ended without a word: the host may have died; see `mcpvisor status`\n", t.name)
	return ExitRuntime
}

// serverHint is "; did you mean …?" for a server name t does not know,
// or the names it does.
func serverHint(t target, name string) string {
	doc, err := fetchStatus(t)
	if err != nil || len(doc.Servers) == 0 {
		return ""
	}
	var names []string
	for _, s := range doc.Servers {
		names = append(names, s.Name)
	}
	if s := suggest(name, names); s != "" {
		return fmt.Sprintf("; did you mean %q? (mcpvisor logs %s)", s, s)
	}
	return fmt.Sprintf("; its servers are %s", termSafe(fmt.Sprint(names)))
}
