package cli

// The status command, and how the control commands find the running hosts.

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/mcpvisor/mcpvisor/host"
	"github.com/mcpvisor/mcpvisor/host/config"
)

func statusCmd(args []string, stdio IO) int {
	fs, path, addr, token := newControlFlags("status", stdio)
	asJSON := fs.Bool("json", false, "print JSON")
	watch := fs.Bool("watch", false, "refresh the table until interrupted")
	interval := fs.Duration("interval", defaultWatchInterval, "refresh `period` with -watch")
	if !parseNoArgs(fs, args, stdio) {
		return ExitUsage
	}
	if *watch && *asJSON {
		fmt.Fprintln(stdio.Stderr, "mcpvisor status: -watch and -json do not go together")
		return ExitUsage
	}
	if *interval <= 0 {
		fmt.Fprintln(stdio.Stderr, "mcpvisor status: -interval must be greater than zero")
		return ExitUsage
	}
	paths := []string{*path}
	if *addr == "" {
		var code int
		if paths, code = runningConfigs("status", *path, fs, true, stdio); paths == nil {
			return code
		}
	}
	var ts []target
	for _, p := range paths {
		found, code := findTargets("status", p, *addr, *token, fs, stdio)
		if found == nil {
			return code
		}
		ts = append(ts, found...)
	}
	show := func(w io.Writer) int {
		code := ExitOK
		for _, t := range ts {
			doc, err := fetchStatus(t)
			if err != nil {
				fmt.Fprintf(stdio.Stderr, "mcpvisor status: %s\n", termSafeErr(err))
				code = ExitRuntime
				continue
			}
			if *asJSON {
				writeJSON(w, doc)
				continue
			}
			fmt.Fprintf(w, "%s\n", hostHeading(t, doc))
			printStatus(w, doc)
			printClients(w, doc)
		}
		return code
	}
	if !*watch {
		return show(stdio.Stdout)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for {
		// Home and clear: the table is redrawn in place.
		fmt.Fprint(stdio.Stdout, "\x1b[H\x1b[2J")
		fmt.Fprintf(stdio.Stdout, "mcpvisor — %s (every %s; Ctrl-C to stop)\n\n", time.Now().Format(time.TimeOnly), *interval)
		show(stdio.Stdout)
		select {
		case <-ctx.Done():
			return ExitOK
		case <-tick.C:
		}
	}
}

// defaultWatchInterval is how often `status -watch` refreshes.
const defaultWatchInterval = 2 * time.Second

// newControlFlags is newFlags for a command that talks to running hosts:
// -addr and -token beside -config.
func newControlFlags(name string, stdio IO) (fs *flag.FlagSet, path, addr, token *string) {
	fs, path = newFlags(name, stdio)
	addr = fs.String("addr", "", "`host:port` of a running host's HTTP listener (default: every host serving the config, through its control socket, else host.listen)")
	token = fs.String("token", "", "bearer `token` for a host with auth (default: $MCPVISOR_TOKEN, else the config's host block)")
	return fs, path, addr, token
}

// findTargets resolves the running hosts a command talks to: the one at
// addr when given; else every host serving the config at path (their
// control sockets), else the config's host.listen. Only the config's host
// block is read, so server secrets (env(), file()) need not be set. It
// returns nil and an exit code when there is nothing to talk to.
func findTargets(cmd, path, addr, token string, fs *flag.FlagSet, stdio IO) ([]target, int) {
	token = cmp.Or(token, os.Getenv("MCPVISOR_TOKEN"))
	configSet := configGiven(fs)
	if addr == "" && userConfigMissing(path) {
		fmt.Fprintf(stdio.Stderr, "mcpvisor %s: %s\n", cmd, missingConfig(path))
		return nil, ExitUsage
	}
	var hb *config.Host
	if _, err := os.Stat(path); err == nil || configSet || addr == "" {
		h, err := config.LoadHost(path)
		if err != nil {
			fmt.Fprintf(stdio.Stderr, "mcpvisor %s: invalid configuration:\n%s\n", cmd, strings.TrimRight(err.Error(), "\n"))
			return nil, ExitUsage
		}
		hb = h
		token = cmp.Or(token, h.BearerToken)
	}
	if addr != "" {
		return []target{tcpTarget(addr, token)}, ExitOK
	}
	ts, err := runningHosts(path, token)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor %s: %v\n", cmd, err)
		return nil, ExitRuntime
	}
	if len(ts) > 0 {
		return ts, ExitOK
	}
	t := tcpTarget(cmp.Or(hb.Listen, config.DefaultListen), token)
	if other := servesOtherConfig(t, path); other != "" {
		fmt.Fprintf(stdio.Stderr, "mcpvisor %s: no running host serves %s; the host at %s serves %s (pass -config %s to use it, or -addr %s to use it anyway)\n",
			cmd, absPath(path), t.name, termSafe(other), termSafe(other), t.name)
		return nil, ExitRuntime
	}
	return []target{t}, ExitOK
}

// servesOtherConfig returns the config file of the host at t when it
// reports one that is not the file at path: several configs may use one
// host.listen (the default), and the host found there must not be taken
// for this config's. "" when it serves path, does not say, or does not
// answer (the command then reports that).
func servesOtherConfig(t target, path string) string {
	doc, ok := statusReport(t)
	if !ok {
		return ""
	}
	if doc.Config == "" {
		// Over TCP without a credential the host tells no operator
		// detail (docs/security.md, "The operator's door"); a host of
		// this user says which config it serves over its control socket.
		doc.Config = configServedAt(t.name)
	}
	if doc.Config == "" || doc.Config == absPath(path) {
		return ""
	}
	// The same file under another name (a symlink, a bind mount).
	if a, err := os.Stat(doc.Config); err == nil {
		if b, err := os.Stat(path); err == nil && os.SameFile(a, b) {
			return ""
		}
	}
	return doc.Config
}

// configServedAt is the config file of this user's running host whose
// HTTP endpoint is at addr ("" when none of them is), asked through the
// control sockets.
func configServedAt(addr string) string {
	ts, err := runningHostsOf("*", "")
	if err != nil {
		return ""
	}
	for _, t := range ts {
		doc, ok := statusReport(t)
		if u, err := url.Parse(doc.HTTP); ok && err == nil && u.Host == addr {
			return doc.Config
		}
	}
	return ""
}

// absPath is path made absolute, for comparing and showing config files.
func absPath(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// hostHeading names the host a status table comes from: its pid or
// address, and its config file.
func hostHeading(t target, doc *host.StatusReport) string {
	cfg := doc.Config
	if cfg == "" {
		cfg = "not reported"
	}
	s := fmt.Sprintf("mcpvisor %s (config %s", t.name, termSafe(cfg))
	if doc.Replica != "" {
		s += ", replica " + termSafe(doc.Replica)
	}
	if doc.Draining {
		s += ", draining"
	}
	return s + "):"
}

// fetchStatus reads /status from t.
func fetchStatus(t target) (*host.StatusReport, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := t.do(ctx, http.MethodGet, "/status")
	if err != nil {
		return nil, fmt.Errorf("no host answering at %s: %v (is `mcpvisor run` running with this config?)", t.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s%s", t.name, termSafe(resp.Status), authHint(resp.StatusCode))
	}
	var doc host.StatusReport
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return nil, fmt.Errorf("unreadable answer from %s: %v", t.name, err)
	}
	return &doc, nil
}

// authHint says what to do about a 401.
func authHint(status int) string {
	if status == http.StatusUnauthorized {
		return " (pass the host's bearer token with -token or $MCPVISOR_TOKEN)"
	}
	return ""
}

// printStatus prints the status table. LAST ERROR is the most recent of
// the server's connection error and its last failed call.
func printStatus(w io.Writer, doc *host.StatusReport) {
	sort.SliceStable(doc.Servers, func(i, j int) bool { return doc.Servers[i].Name < doc.Servers[j].Name })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tSTATE\tSINCE\tNEXT ATTEMPT\tGEN\tRETRIES\tBREAKER\tTOOLS\tRSS\tCPU\tCALLS\tERRORS\tSANDBOX\tLAST ERROR")
	for _, s := range doc.Servers {
		last := s.LastError
		if s.LastCallError != "" && s.LastCallErrorAt.After(s.LastErrorAt) {
			last = s.LastCallError
		}
		if s.Action != "" {
			last = s.Action + ": " + last
		}
		since := "-"
		if !s.Since.IsZero() {
			since = s.Since.Local().Format(time.TimeOnly)
		}
		next := "-"
		if !s.NextAttempt.IsZero() {
			next = s.NextAttempt.Local().Format(time.TimeOnly)
		}
		// A truncated catalog is marked in TOOLS; -json has the reason.
		tools := fmt.Sprint(s.ExposedTools)
		if s.CatalogTruncated {
			tools += " (truncated)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", termSafe(s.Name), termSafe(s.State),
			since, next, s.Generation, retriesColumn(s),
			cmp.Or(termSafe(s.Breaker), "-"), tools, rssColumn(s), cpuColumn(s), s.Calls, s.Errors, cmp.Or(termSafe(s.Sandbox), "-"), termSafe(last))
	}
	tw.Flush()
}

// printClients lists the clients connected to the host (operators see
// them; an empty list prints nothing but the count).
func printClients(w io.Writer, doc *host.StatusReport) {
	if doc.HTTP != "" {
		fmt.Fprintf(w, "serving %s\n", termSafe(doc.HTTP))
	}
	if len(doc.Clients) == 0 {
		fmt.Fprintln(w, "no clients connected")
		return
	}
	fmt.Fprintf(w, "%d client(s) connected:\n", len(doc.Clients))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  CLIENT\tVERSION\tTRANSPORT\tSESSION\tSINCE")
	for _, c := range doc.Clients {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", cmp.Or(termSafe(c.Name), "(unnamed)"), cmp.Or(termSafe(c.Version), "-"),
			termSafe(c.Transport), cmp.Or(termSafe(c.Session), "-"), c.Since.Local().Format(time.DateTime))
	}
	tw.Flush()
}

// rssColumn is the RSS cell: the process group's resident memory, with
// the memory limit when there is one ("41.5MiB/64MiB"); "-" when not
// measured.
func rssColumn(s host.ServerStatus) string {
	if s.RSSBytes <= 0 {
		return "-"
	}
	rss := fmt.Sprintf("%.1fMiB", float64(s.RSSBytes)/(1<<20))
	if s.MemoryLimit > 0 {
		rss += "/" + config.FormatSize(s.MemoryLimit)
	}
	return rss
}

// cpuColumn is the CPU cell: the process group's CPU time ("1.23s"), "-"
// when not measured.
func cpuColumn(s host.ServerStatus) string {
	if s.RSSBytes <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fs", s.CPUSeconds)
}

// retriesColumn is the RETRIES cell: "1 of 5" while the server works
// through its reconnect budget, "-" when no budget is being spent (a
// parked server waits for NEXT ATTEMPT or a revive, whatever count made it
// park; a disabled one never runs).
func retriesColumn(s host.ServerStatus) string {
	switch s.State {
	case host.StateParked, host.StateDisabled, host.StateNeedsLogin, host.StateStopped:
		return "-"
	}
	return fmt.Sprintf("%d of %d", s.Retries, s.MaxRetries)
}
