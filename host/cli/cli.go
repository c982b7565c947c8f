// Package cli is the mcpvisor command line: run, validate, tools, call,
// status and version. It is a thin layer over package host.
package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcpvisor/mcpvisor/host"
	"github.com/mcpvisor/mcpvisor/host/config"
)

// Exit codes (DESIGN.md §11).
const (
	ExitOK      = 0
	ExitRuntime = 1
	ExitUsage   = 2
)

const (
	// defaultConfigFile is read when -config is not given.
	defaultConfigFile = "config.hcl"

	// shutdownGrace bounds a graceful shutdown: HTTP drain plus stopping
	// every server's process group (each takes at most ~2.5 s).
	shutdownGrace = 10 * time.Second

	// startupSettle bounds how long `run` waits for servers to connect
	// before it starts answering clients.
	startupSettle = 10 * time.Second

	// settleTimeout bounds how long one-shot commands (tools, call) wait
	// for servers to finish starting.
	settleTimeout = 90 * time.Second
)

// IO is where a command reads and writes.
type IO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

const usage = `Usage: mcpvisor <command> [options]

Commands:
  run       start the host and serve the servers' tools (HTTP at /mcp, or --stdio)
  validate  check a configuration file
  tools     list the tools the configured servers expose
  call      call one tool: mcpvisor call TOOL '{"arg": "value"}'
  status    show server states from a running host
  login     log in to an OAuth server: mcpvisor login NAME
  logout    forget an OAuth server's tokens: mcpvisor logout NAME
  version   print the version

Run "mcpvisor <command> -h" for a command's options.
`

// Run runs the CLI with args (without the program name) and returns the
// process exit code.
func Run(args []string, stdio IO) int {
	if len(args) == 0 {
		fmt.Fprint(stdio.Stderr, usage)
		return ExitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return runCmd(rest, stdio)
	case "validate":
		return validateCmd(rest, stdio)
	case "tools":
		return toolsCmd(rest, stdio)
	case "call":
		return callCmd(rest, stdio)
	case "status":
		return statusCmd(rest, stdio)
	case "login":
		return loginCmd(rest, stdio)
	case "logout":
		return logoutCmd(rest, stdio)
	case "version", "-version", "--version":
		fmt.Fprintf(stdio.Stdout, "mcpvisor %s\n", host.Version)
		return ExitOK
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdio.Stdout, usage)
		return ExitOK
	default:
		fmt.Fprintf(stdio.Stderr, "mcpvisor: unknown command %q\n\n%s", cmd, usage)
		return ExitUsage
	}
}

func newFlags(name string, stdio IO) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stdio.Stderr)
	cfg := fs.String("config", defaultConfigFile, "configuration `file`")
	return fs, cfg
}

// loadConfig loads the file, printing diagnostics as HCL renders them.
func loadConfig(path string, stdio IO) (*config.Config, bool) {
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor: invalid configuration:\n%s\n", strings.TrimRight(err.Error(), "\n"))
		return nil, false
	}
	return cfg, true
}

func newLogger(cfg *config.Config, w io.Writer) hclog.Logger {
	level := hclog.LevelFromString(cfg.Host.LogLevel)
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:       "mcpvisor",
		Level:      level,
		Output:     w,
		JSONFormat: cfg.Host.LogFormat == "json",
	})
}

func validateCmd(args []string, stdio IO) int {
	fs, path := newFlags("validate", stdio)
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	cfg, ok := loadConfig(*path, stdio)
	if !ok {
		return ExitUsage
	}
	fmt.Fprintf(stdio.Stdout, "%s: valid (%d server(s))\n", *path, len(cfg.Servers))
	return ExitOK
}

func runCmd(args []string, stdio IO) int {
	fs, path := newFlags("run", stdio)
	stdioMode := fs.Bool("stdio", false, "serve MCP over stdin/stdout (for Claude Desktop, Cursor, …)")
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stdio.Stderr, "mcpvisor run: unexpected argument %q\n", fs.Arg(0))
		return ExitUsage
	}
	cfg, ok := loadConfig(*path, stdio)
	if !ok {
		return ExitUsage
	}
	logger := newLogger(cfg, stdio.Stderr)

	listen := cfg.Host.Listen
	if listen == "" && !*stdioMode {
		listen = config.DefaultListen
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// SIGTERM (an orchestrator stopping the replica) drains first; SIGINT
	// (a person at a terminal) does not.
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	defer signal.Stop(term)
	// Taken before anything is served: SIGHUP's default action would kill
	// the process if a reload request arrived before the handler existed.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	opts := []host.Option{host.WithLogger(logger)}
	tp, shutdownTracing, err := host.TracerProviderFromEnv(ctx)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor: tracing: %v\n", err)
		return ExitUsage
	}
	if tp != nil {
		logger.Info("tracing to OTLP/HTTP as configured by OTEL_EXPORTER_OTLP_*")
		opts = append(opts, host.WithTracerProvider(tp))
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
			defer cancel()
			if err := shutdownTracing(sctx); err != nil {
				logger.Warn("flushing traces failed", "error", err)
			}
		}()
	}
	h, err := host.New(cfg, opts...)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor: %v\n", err)
		return ExitUsage
	}
	logger = logger.With("replica", h.Replica())

	// Bind before starting servers so a taken port fails fast and clearly.
	var ln net.Listener
	if listen != "" {
		ln, err = net.Listen("tcp", listen)
		if err != nil {
			fmt.Fprintf(stdio.Stderr, "mcpvisor: cannot listen on %s: %v (is another mcpvisor running? change host.listen)\n", listen, err)
			return ExitRuntime
		}
	}

	if err := h.Start(ctx); err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor: %v\n", err)
		return ExitRuntime
	}

	// Give the servers a moment to come up before the first client lists
	// tools: a one-shot client (or a desktop agent that lists once) would
	// otherwise see an empty catalog. Slow servers join later through
	// list_changed; the wait is bounded so one never holds up the rest.
	settleCtx, settleCancel := context.WithTimeout(ctx, startupSettle)
	if err := h.WaitSettled(settleCtx); err != nil && ctx.Err() == nil {
		logger.Warn("some servers are still starting; serving anyway", "waited", startupSettle)
	}
	settleCancel()

	serveCtx, stopServing := context.WithCancel(context.Background())
	defer stopServing()
	errc := make(chan error, 1)
	httpDone := make(chan struct{})
	if ln != nil {
		logger.Info("serving streamable HTTP", "url", "http://"+ln.Addr().String()+"/mcp")
		go func() {
			defer close(httpDone)
			if err := h.Serve(serveCtx, ln); err != nil {
				errc <- err
			}
		}()
	} else {
		close(httpDone)
	}
	stdioDone := make(chan struct{})
	if *stdioMode {
		go func() {
			defer close(stdioDone)
			if err := h.ServeStdio(serveCtx); err != nil && serveCtx.Err() == nil {
				logger.Debug("stdio session ended", "error", err)
			}
		}()
		logger.Info("serving MCP over stdio")
	}

	code := ExitOK
wait:
	for {
		select {
		case <-hup:
			// Rotation first: it must happen even when the new file is
			// invalid and the reload changes nothing.
			if err := h.ReopenAuditLog(); err != nil {
				logger.Error("reopening the audit log failed", "error", err)
			}
			reload(ctx, h, *path, logger)
		case <-ctx.Done():
			logger.Info("shutting down")
			break wait
		case <-stdioDone:
			logger.Info("stdio client disconnected; shutting down")
			break wait
		case err := <-errc:
			logger.Error("fatal", "error", err)
			code = ExitRuntime
			break wait
		}
	}
	stop()

	if len(term) > 0 && ln != nil {
		// Leave the load balancers' rotation before stopping; a second
		// SIGTERM or SIGINT cuts the drain short.
		dctx, dstop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		if err := h.Drain(dctx); err != nil {
			logger.Warn("drain cut short by a second signal")
		}
		dstop()
	}
	stopServing()
	<-httpDone
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := h.Close(sctx); err != nil {
		logger.Error("shutdown incomplete", "error", err)
		code = ExitRuntime
	}
	return code
}

// reload re-reads the configuration on SIGHUP. An invalid file changes
// nothing: the host keeps running what it has and says why.
func reload(ctx context.Context, h *host.Host, path string, logger hclog.Logger) {
	cfg, err := config.Load(path)
	if err != nil {
		logger.Error("reload: configuration invalid; keeping the running one", "file", path, "error", err.Error())
		return
	}
	rctx, cancel := context.WithTimeout(ctx, shutdownGrace)
	defer cancel()
	res, err := h.Reload(rctx, cfg)
	if err != nil {
		logger.Error("reload incomplete", "error", err)
	}
	logger.Info("configuration reloaded", "added", res.Added, "removed", res.Removed,
		"restarted", res.Restarted, "unchanged", len(res.Unchanged))
	if res.HostChanged {
		logger.Warn("the host block changed; listen, auth and logging apply after a restart")
	}
}

// startOneShot starts a host for a one-shot command and waits for its
// servers to settle, reporting servers that are not ready.
func startOneShot(path string, stdio IO) (*host.Host, int) {
	cfg, ok := loadConfig(path, stdio)
	if !ok {
		return nil, ExitUsage
	}
	// One-shot commands only show warnings; their output is the result.
	if cfg.Host.LogLevel == "info" {
		cfg.Host.LogLevel = "warn"
	}
	h, err := host.New(cfg, host.WithLogger(newLogger(cfg, stdio.Stderr)))
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor: %v\n", err)
		return nil, ExitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	h.Start(ctx)
	if err := h.WaitSettled(ctx); err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor: servers still starting after %s\n", settleTimeout)
	}
	for _, st := range h.Status() {
		if st.State != "ready" {
			msg := st.LastError
			if msg == "" {
				msg = "not ready"
			}
			fmt.Fprintf(stdio.Stderr, "mcpvisor: server %q is %s: %s\n", st.Name, st.State, msg)
		}
	}
	return h, ExitOK
}

func closeHost(h *host.Host) {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	h.Close(ctx)
}

func toolsCmd(args []string, stdio IO) int {
	fs, path := newFlags("tools", stdio)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	h, code := startOneShot(*path, stdio)
	if h == nil {
		return code
	}
	defer closeHost(h)
	tools := h.Tools()
	if *asJSON {
		type row struct {
			Name        string `json:"name"`
			Server      string `json:"server"`
			Original    string `json:"original"`
			Description string `json:"description,omitempty"`
		}
		rows := []row{}
		for _, t := range tools {
			rows = append(rows, row{t.Tool.Name, t.Server, t.Original, t.Tool.Description})
		}
		enc := json.NewEncoder(stdio.Stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rows)
		return ExitOK
	}
	tw := tabwriter.NewWriter(stdio.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tSERVER\tDESCRIPTION")
	for _, t := range tools {
		desc, _, _ := strings.Cut(t.Tool.Description, "\n")
		fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Tool.Name, t.Server, desc)
	}
	tw.Flush()
	return ExitOK
}

func callCmd(args []string, stdio IO) int {
	fs, path := newFlags("call", stdio)
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		fmt.Fprintln(stdio.Stderr, `usage: mcpvisor call [-config FILE] TOOL ['{"arg": "value"}']`)
		return ExitUsage
	}
	tool := fs.Arg(0)
	var raw json.RawMessage
	if fs.NArg() == 2 {
		raw = json.RawMessage(fs.Arg(1))
		var obj map[string]any
		if err := json.Unmarshal(raw, &obj); err != nil {
			fmt.Fprintf(stdio.Stderr, "mcpvisor call: arguments must be a JSON object: %v\n", err)
			return ExitUsage
		}
	}
	h, code := startOneShot(*path, stdio)
	if h == nil {
		return code
	}
	defer closeHost(h)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := h.CallTool(ctx, tool, raw)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor call: %v\n", err)
		return ExitRuntime
	}
	enc := json.NewEncoder(stdio.Stdout)
	enc.SetIndent("", "  ")
	enc.Encode(res)
	if res.IsError {
		return ExitRuntime
	}
	return ExitOK
}

func statusCmd(args []string, stdio IO) int {
	fs, path := newFlags("status", stdio)
	addr := fs.String("addr", "", "address of the running host (default: host.listen from the config)")
	asJSON := fs.Bool("json", false, "print JSON")
	watch := fs.Bool("watch", false, "refresh the table until interrupted")
	interval := fs.Duration("interval", defaultWatchInterval, "refresh `period` with -watch")
	if err := fs.Parse(args); err != nil {
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
	cfg, ok := loadConfig(*path, stdio)
	if !ok {
		return ExitUsage
	}
	a := *addr
	if a == "" {
		a = cfg.Host.Listen
		if a == "" {
			a = config.DefaultListen
		}
	}
	if !*watch {
		doc, err := fetchStatus(a, cfg.Host.BearerToken)
		if err != nil {
			fmt.Fprintf(stdio.Stderr, "mcpvisor status: %v\n", err)
			return ExitRuntime
		}
		if *asJSON {
			enc := json.NewEncoder(stdio.Stdout)
			enc.SetIndent("", "  ")
			enc.Encode(doc)
			return ExitOK
		}
		printStatus(stdio.Stdout, doc)
		return ExitOK
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	t := time.NewTicker(*interval)
	defer t.Stop()
	for {
		// Home and clear: the table is redrawn in place.
		fmt.Fprint(stdio.Stdout, "\x1b[H\x1b[2J")
		fmt.Fprintf(stdio.Stdout, "mcpvisor at %s — %s (every %s; Ctrl-C to stop)\n\n", a, time.Now().Format(time.TimeOnly), *interval)
		if doc, err := fetchStatus(a, cfg.Host.BearerToken); err != nil {
			fmt.Fprintf(stdio.Stdout, "%v\n", err)
		} else {
			printStatus(stdio.Stdout, doc)
		}
		select {
		case <-ctx.Done():
			return ExitOK
		case <-t.C:
		}
	}
}

// defaultWatchInterval is how often `status -watch` refreshes.
const defaultWatchInterval = 2 * time.Second

// fetchStatus reads /status from the host at addr.
func fetchStatus(addr, token string) (*host.StatusReport, error) {
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/status", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("no host answering at %s: %v (is `mcpvisor run` running with this config?)", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", addr, resp.Status)
	}
	var doc host.StatusReport
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return nil, fmt.Errorf("unreadable answer from %s: %v", addr, err)
	}
	return &doc, nil
}

// printStatus prints the status table. LAST ERROR is the most recent of
// the server's connection error and its last failed call.
func printStatus(w io.Writer, doc *host.StatusReport) {
	sort.SliceStable(doc.Servers, func(i, j int) bool { return doc.Servers[i].Name < doc.Servers[j].Name })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tSTATE\tSINCE\tGEN\tRETRIES\tBREAKER\tTOOLS\tCALLS\tERRORS\tLAST ERROR")
	for _, s := range doc.Servers {
		last := s.LastError
		if s.LastCallError != "" && s.LastCallErrorAt.After(s.LastErrorAt) {
			last = s.LastCallError
		}
		if s.Action != "" {
			last = s.Action + ": " + last
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d of %d\t%s\t%d\t%d\t%d\t%s\n", s.Name, s.State,
			s.Since.Local().Format(time.TimeOnly), s.Generation, s.Retries, s.MaxRetries,
			s.Breaker, s.Tools, s.Calls, s.Errors, last)
	}
	tw.Flush()
}
