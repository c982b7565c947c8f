// Package cli is the mcpvisor command line, a thin layer over package host
// and package config. Its commands:
//
//	run         start the host and serve the servers' tools (HTTP or stdio)
//	validate    check a configuration file
//	tools       list the tools the configured servers expose
//	call        call one tool with JSON arguments
//	status      show the server states of the running hosts of a config
//	revive      ask a parked server to try again now
//	restart     replace a server with a fresh process
//	import      turn a Claude Desktop / .mcp.json / Cursor config into HCL
//	add         add a server block to the config and reload running hosts
//	remove      remove a server block and reload running hosts
//	client      install mcpvisor into a desktop client's MCP config
//	login       log in to an OAuth server
//	logout      forget an OAuth server's tokens
//	plugins     plugins lock: record each plugin binary's SHA-256
//	completion  print a bash, zsh or fish completion script
//	version     print the version
//	help        show the help of a command
//
// Every command has a synopsis, arguments, options and examples in
// help.go: `mcpvisor help CMD` and `mcpvisor CMD -h` print them.
package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

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

// Run runs the CLI with args (without the program name) and returns the
// process exit code.
func Run(args []string, stdio IO) int {
	if len(args) == 0 {
		fmt.Fprint(stdio.Stderr, usage())
		return ExitUsage
	}
	cmd, rest := args[0], args[1:]
	if cmd == "help" && len(rest) > 0 {
		if rest[0] == "help" || isHelpFlag(rest[0]) {
			writeHelp(stdio.Stdout, "help", nil)
			return ExitOK
		}
		if _, ok := commands[rest[0]]; !ok {
			return unknownCommand(rest[0], stdio)
		}
		cmd, rest = rest[0], []string{"-h"}
	}
	if _, ok := commands[cmd]; ok && cmd != "help" && wantsHelp(rest) {
		// The command prints its help (with its flags) where it would
		// print a usage error; asked for, help goes to stdout and is no
		// error.
		dispatch(cmd, rest, IO{Stdin: stdio.Stdin, Stdout: stdio.Stdout, Stderr: stdio.Stdout})
		return ExitOK
	}
	return dispatch(cmd, rest, stdio)
}

// dispatch runs the command cmd with its arguments.
func dispatch(cmd string, rest []string, stdio IO) int {
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
	case "revive", "restart":
		return controlCmd(cmd, rest, stdio)
	case "import":
		return importCmd(rest, stdio)
	case "add":
		return addCmd(rest, stdio)
	case "remove":
		return removeCmd(rest, stdio)
	case "client":
		return clientCmd(rest, stdio)
	case "login":
		return loginCmd(rest, stdio)
	case "logout":
		return logoutCmd(rest, stdio)
	case "plugins":
		return pluginsCmd(rest, stdio)
	case "completion":
		return completionCmd(rest, stdio)
	case "version", "-version", "--version":
		if wantsHelp(rest) {
			writeHelp(stdio.Stdout, "version", nil)
			return ExitOK
		}
		fmt.Fprint(stdio.Stdout, versionLine())
		return ExitOK
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdio.Stdout, usage())
		return ExitOK
	default:
		return unknownCommand(cmd, stdio)
	}
}

// unknownCommand says that cmd is no command, and which one was meant.
func unknownCommand(cmd string, stdio IO) int {
	if s := suggest(cmd, commandOrder); s != "" {
		fmt.Fprintf(stdio.Stderr, "mcpvisor: unknown command %q; did you mean %q?\n\nRun \"mcpvisor help\" for the list of commands.\n", termSafe(cmd), s)
		return ExitUsage
	}
	fmt.Fprintf(stdio.Stderr, "mcpvisor: unknown command %q\n\n%s", termSafe(cmd), usage())
	return ExitUsage
}

func newFlags(name string, stdio IO) (*flag.FlagSet, *string) {
	fs := newBareFlags(name, stdio)
	cfg := fs.String("config", defaultConfigFile, "configuration `file`")
	return fs, cfg
}

// newBareFlags is the flag set of a command that reads no configuration.
func newBareFlags(name string, stdio IO) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stdio.Stderr)
	fs.Usage = func() { writeHelp(fs.Output(), name, fs) }
	return fs
}

// loadConfig loads the file, printing diagnostics as HCL renders them.
func loadConfig(path string, stdio IO) (*config.Config, bool) {
	return loadWith(config.Load, path, stdio)
}

// loadWith is loadConfig with another loader (config.LoadForRun for `run`
// and its reloads: a server that reads an unset variable is held, not
// fatal).
func loadWith(load func(string) (*config.Config, error), path string, stdio IO) (*config.Config, bool) {
	cfg, err := load(path)
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
		Output:     logWriter{w},
		JSONFormat: cfg.Host.LogFormat == "json",
	})
}

func validateCmd(args []string, stdio IO) int {
	fs, path := newFlags("validate", stdio)
	if !parseNoArgs(fs, args, stdio) {
		return ExitUsage
	}
	cfg, ok := loadConfig(*path, stdio)
	if !ok {
		return ExitUsage
	}
	// The plugin binaries on disk against sha256 and the lock file: a
	// mismatch is an error (mcpvisor would refuse to start the plugin), an
	// unlocked plugin a warning.
	rep := cfg.CheckPlugins()
	if len(rep.Diags) > 0 {
		rep.WriteDiagnostics(stdio.Stderr, 0, false)
	}
	if rep.HasErrors() {
		fmt.Fprintf(stdio.Stderr, "mcpvisor: %s: plugin binaries do not match their recorded hashes\n", *path)
		return ExitUsage
	}
	// A command that is not there now would park its server at once; say
	// so, but it is no error: the machine that runs the file may have it.
	for _, s := range cfg.Servers {
		if s.Transport != config.TransportStdio || s.Command == "" {
			continue
		}
		if _, err := exec.LookPath(s.Command); err != nil {
			fmt.Fprintf(stdio.Stderr, "Warning: server %q: command %q not found (%v); the server will park at once until it is installed\n", s.Name, s.Command, err)
		}
	}
	fmt.Fprintf(stdio.Stdout, "%s: valid (%d server(s))\n", *path, len(cfg.Servers))
	return ExitOK
}

const pluginsUsage = `Usage: mcpvisor plugins <command> [options]

Commands:
  lock   hash every plugin binary the configuration runs and record the
         hashes in mcpvisor.lock.hcl beside it; mcpvisor then refuses to
         start a plugin whose binary has another hash. Run it again after a
         deliberate upgrade or rebuild, and commit the file.
`

func pluginsCmd(args []string, stdio IO) int {
	if len(args) == 0 {
		fmt.Fprint(stdio.Stderr, pluginsUsage)
		return ExitUsage
	}
	switch args[0] {
	case "lock":
		return pluginsLockCmd(args[1:], stdio)
	case "help", "-h", "-help", "--help":
		writeHelp(stdio.Stdout, "plugins", nil)
		return ExitOK
	}
	hint := ""
	if s := suggest(args[0], []string{"lock"}); s != "" {
		hint = fmt.Sprintf("; did you mean %q?", s)
	}
	fmt.Fprintf(stdio.Stderr, "mcpvisor plugins: unknown command %q%s\n\n%s", termSafe(args[0]), hint, pluginsUsage)
	return ExitUsage
}

func pluginsLockCmd(args []string, stdio IO) int {
	fs, path := newFlags("plugins lock", stdio)
	if !parseNoArgs(fs, args, stdio) {
		return ExitUsage
	}
	cfg, ok := loadConfig(*path, stdio)
	if !ok {
		return ExitUsage
	}
	lock, rep := cfg.LockPlugins()
	if len(rep.Diags) > 0 {
		rep.WriteDiagnostics(stdio.Stderr, 0, false)
	}
	if lock == nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor plugins lock: %s not written\n", config.LockPath(*path))
		return ExitRuntime
	}
	if len(lock.Plugins) == 0 && cfg.Lock == nil {
		fmt.Fprintf(stdio.Stdout, "%s: no plugin blocks; no lock file needed\n", *path)
		return ExitOK
	}
	if err := lock.Write(); err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor plugins lock: %v\n", err)
		return ExitRuntime
	}
	fmt.Fprintf(stdio.Stdout, "%s: %d plugin(s) locked\n", lock.Filename, len(lock.Plugins))
	for _, e := range lock.Plugins {
		was := "new"
		if old := cfg.Lock.Entry(e.Server); old != nil {
			was = "unchanged"
			if old.SHA256 != e.SHA256 {
				was = "changed from " + old.SHA256
			}
		}
		fmt.Fprintf(stdio.Stdout, "  server %q: plugin %q: %s sha256 %s (%s)\n", e.Server, e.Plugin, e.Path, e.SHA256, was)
	}
	if cfg.Lock != nil {
		for _, old := range cfg.Lock.Plugins {
			if lock.Entry(old.Server) == nil {
				fmt.Fprintf(stdio.Stdout, "  server %q: removed (no plugin block)\n", old.Server)
			}
		}
	}
	fmt.Fprintln(stdio.Stdout, "Commit it with the configuration; a running mcpvisor reads it on reload (SIGHUP).")
	return ExitOK
}

func runCmd(args []string, stdio IO) int {
	fs, path := newFlags("run", stdio)
	stdioMode := fs.Bool("stdio", false, "serve MCP over stdin/stdout (for Claude Desktop, Cursor, …); HTTP only with -http")
	alsoHTTP := fs.Bool("http", false, "with --stdio, also serve streamable HTTP at host.listen")
	if !parseNoArgs(fs, args, stdio) {
		return ExitUsage
	}
	cfg, ok := loadWith(config.LoadForRun, *path, stdio)
	if !ok {
		return ExitUsage
	}
	logger := newLogger(cfg, stdio.Stderr)

	// `run --stdio` serves stdio only, so that several (one per desktop
	// agent) and `run` itself can share a config; -http adds the listener.
	listen := ""
	if !*stdioMode || *alsoHTTP {
		listen = cmp.Or(cfg.Host.Listen, config.DefaultListen)
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

	// The control socket lets `status`, `revive`, `restart`, `tools` and
	// `call` reach this process, stdio or not (instances.go).
	ctl, err := listenControl(*path)
	if err != nil {
		logger.Warn("no control socket: status, revive and restart cannot reach this process except over HTTP", "error", err)
	} else {
		defer ctl.Close()
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
	stopProgress := showStartup(stdio.Stderr, h) // a terminal only (progress.go)
	err = h.WaitSettled(settleCtx)
	stopProgress()
	if err != nil && ctx.Err() == nil {
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
	ctlDone := make(chan struct{})
	if ctl != nil {
		go func() {
			defer close(ctlDone)
			if err := h.Serve(serveCtx, ctl); err != nil {
				logger.Warn("control socket failed", "error", err)
			}
		}()
	} else {
		close(ctlDone)
	}
	go returnMemoryAfterSessions(serveCtx, h, logger)
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
	<-ctlDone
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := h.Close(sctx); err != nil {
		logger.Error("shutdown incomplete", "error", err)
		code = ExitRuntime
	}
	return code
}

const (
	// sessionsCheckEvery is how often `run` looks whether many downstream
	// sessions have closed since the last look.
	sessionsCheckEvery = time.Second
	// sessionsFreedThreshold is how many sessions must have closed for
	// `run` to hand their memory back to the OS at once, when the closing
	// has stopped (no fewer sessions than at the last look).
	sessionsFreedThreshold = 1000
	// sessionsFreedAnyway is how many closed sessions make `run` hand
	// their memory back even while more are still closing.
	sessionsFreedAnyway = 10 * sessionsFreedThreshold
)

// returnMemoryAfterSessions gives the memory of many closed downstream
// sessions (a burst of clients, abandoned sessions reaped after
// session_idle_timeout) back to the OS at once. Go's runtime would return
// it only minutes later, and until then the process looks as big as at
// the burst's peak to an operator or an OOM killer.
func returnMemoryAfterSessions(ctx context.Context, h *host.Host, logger hclog.Logger) {
	t := time.NewTicker(sessionsCheckEvery)
	defer t.Stop()
	peak, prev := 0, 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n := h.Sessions()
		peak = max(peak, n)
		// Once, when a wave of closing is over (reaping abandoned sessions
		// takes a while): freeing in the middle of it would leave the
		// memory of the rest behind until the next wave.
		settled := n >= prev
		prev = n
		if closed := peak - n; closed >= sessionsFreedAnyway || closed >= sessionsFreedThreshold && settled {
			logger.Debug("returning the memory of closed sessions to the OS", "closed", closed, "open", n)
			debug.FreeOSMemory()
			peak = n
		}
	}
}

// reload re-reads the configuration on SIGHUP. An invalid file changes
// nothing: the host keeps running what it has and says why.
func reload(ctx context.Context, h *host.Host, path string, logger hclog.Logger) {
	cfg, err := config.LoadForRun(path)
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

// runningHost returns the running host serving the config at path, for
// `tools` and `call`, saying on stderr which one is used — or that there
// is none, and the command starts the servers itself.
func runningHost(path string, stdio IO) (target, bool) {
	if hb, err := config.LoadHost(path); err == nil {
		ts, err := runningHosts(path, cmp.Or(os.Getenv("MCPVISOR_TOKEN"), hb.BearerToken))
		if err != nil {
			fmt.Fprintf(stdio.Stderr, "mcpvisor: not using running hosts: %v\n", err)
		}
		if len(ts) > 0 {
			fmt.Fprintf(stdio.Stderr, "mcpvisor: using the running host serving %s (%s)\n", path, ts[0].name)
			return ts[0], true
		}
	}
	fmt.Fprintf(stdio.Stderr, "mcpvisor: no running host serves %s; starting its servers for this command\n", path)
	return target{}, false
}

// startOneShot starts a host for a one-shot command and waits for its
// servers to settle, reporting servers that are not ready.
func startOneShot(path string, stdio IO) (*host.Host, int) {
	cfg, ok := loadWith(config.LoadForRun, path, stdio)
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
		if st.State != "ready" && st.State != host.StateDisabled {
			msg := st.LastError
			if msg == "" {
				msg = "not ready"
			}
			fmt.Fprintf(stdio.Stderr, "mcpvisor: server %q is %s: %s\n", st.Name, termSafe(st.State), termSafe(msg))
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
	if !parseNoArgs(fs, args, stdio) {
		return ExitUsage
	}
	var tools []host.Tool
	if t, ok := runningHost(*path, stdio); ok {
		ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		defer cancel()
		if tools, err := fetchTools(ctx, t); err == nil {
			return printTools(stdio, tools, *asJSON)
		} else if !errors.Is(err, errNoToolsEndpoint) {
			fmt.Fprintf(stdio.Stderr, "mcpvisor tools: %s\n", termSafeErr(err))
			return ExitRuntime
		}
		// An older host: tools/list, which names no server.
		cs, err := t.connect(ctx)
		if err != nil {
			fmt.Fprintf(stdio.Stderr, "mcpvisor tools: %s\n", termSafeErr(err))
			return ExitRuntime
		}
		defer cs.Close()
		for tool, err := range cs.Tools(ctx, nil) {
			if err != nil {
				fmt.Fprintf(stdio.Stderr, "mcpvisor tools: listing the tools of %s: %s\n", t.name, termSafeErr(err))
				return ExitRuntime
			}
			tools = append(tools, host.Tool{Tool: tool})
		}
	} else {
		h, code := startOneShot(*path, stdio)
		if h == nil {
			return code
		}
		defer closeHost(h)
		tools = h.Tools()
	}
	return printTools(stdio, tools, *asJSON)
}

// errNoToolsEndpoint is fetchTools' error for a host without GET /tools.
var errNoToolsEndpoint = errors.New("no /tools endpoint")

// fetchTools reads the exposed tools, with their servers, from t.
func fetchTools(ctx context.Context, t target) ([]host.Tool, error) {
	resp, err := t.do(ctx, http.MethodGet, "/tools")
	if err != nil {
		return nil, fmt.Errorf("no host answering at %s: %v", t.name, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
		return nil, errNoToolsEndpoint
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%s answered %s%s", t.name, termSafe(resp.Status), authHint(resp.StatusCode))
	}
	var list []host.ExposedTool
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, fmt.Errorf("unreadable answer from %s: %v", t.name, err)
	}
	tools := make([]host.Tool, 0, len(list))
	for _, e := range list {
		tools = append(tools, host.Tool{Tool: &mcp.Tool{Name: e.Name, Description: e.Description}, Server: e.Server, Original: e.Original})
	}
	return tools, nil
}

// printTools prints the tools as a table or JSON.
func printTools(stdio IO, tools []host.Tool, asJSON bool) int {
	if asJSON {
		type row struct {
			Name        string `json:"name"`
			Server      string `json:"server,omitempty"`
			Original    string `json:"original,omitempty"`
			Description string `json:"description,omitempty"`
		}
		rows := []row{}
		for _, t := range tools {
			rows = append(rows, row{t.Tool.Name, t.Server, t.Original, t.Tool.Description})
		}
		writeJSON(stdio.Stdout, rows)
		return ExitOK
	}
	tw := tabwriter.NewWriter(stdio.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tSERVER\tDESCRIPTION")
	for _, t := range tools {
		desc, _, _ := strings.Cut(t.Tool.Description, "\n")
		fmt.Fprintf(tw, "%s\t%s\t%s\n", termSafe(t.Tool.Name), termSafe(t.Server), termSafe(desc))
	}
	tw.Flush()
	return ExitOK
}

func callCmd(args []string, stdio IO) int {
	fs, path := newFlags("call", stdio)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return ExitUsage
	}
	if len(pos) < 1 || len(pos) > 2 {
		fmt.Fprintf(stdio.Stderr, "usage: %s\n", commands["call"].synopsis)
		if len(pos) > 2 {
			fmt.Fprintf(stdio.Stderr, "mcpvisor call: argument 3 (%q) is one too many: put all arguments in one JSON object, quoted for the shell\n", termSafe(pos[2]))
		}
		return ExitUsage
	}
	tool := pos[0]
	var raw json.RawMessage
	if len(pos) == 2 {
		raw = json.RawMessage(pos[1])
		if msg := checkJSONObject(pos[1]); msg != "" {
			fmt.Fprintf(stdio.Stderr, "mcpvisor call: argument 2 (JSON arguments) must be a JSON object: %s\n", msg)
			return ExitUsage
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var res *mcp.CallToolResult
	if t, ok := runningHost(*path, stdio); ok {
		cs, err := t.connect(ctx)
		if err != nil {
			fmt.Fprintf(stdio.Stderr, "mcpvisor call: %s\n", termSafeErr(err))
			return ExitRuntime
		}
		defer cs.Close()
		var args any
		if raw != nil {
			args = raw
		}
		if res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args}); err != nil {
			fmt.Fprintf(stdio.Stderr, "mcpvisor call: %s\n", termSafeErr(err))
			if strings.Contains(strings.ToLower(err.Error()), "unknown tool") {
				var names []string
				for t, err := range cs.Tools(ctx, nil) {
					if err != nil {
						break
					}
					names = append(names, t.Name)
				}
				fmt.Fprintln(stdio.Stderr, unknownToolHint(tool, names))
			}
			return ExitRuntime
		}
	} else {
		h, code := startOneShot(*path, stdio)
		if h == nil {
			return code
		}
		defer closeHost(h)
		if res, err = h.CallTool(ctx, tool, raw); err != nil {
			fmt.Fprintf(stdio.Stderr, "mcpvisor call: %s\n", termSafeErr(err))
			if errors.Is(err, host.ErrUnknownTool) {
				var names []string
				for _, t := range h.Tools() {
					names = append(names, t.Tool.Name)
				}
				fmt.Fprintln(stdio.Stderr, unknownToolHint(tool, names))
			}
			return ExitRuntime
		}
	}
	writeJSON(stdio.Stdout, res)
	if res.IsError {
		return ExitRuntime
	}
	return ExitOK
}

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
	ts, code := findTargets("status", *path, *addr, *token, fs, stdio)
	if ts == nil {
		return code
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
	configSet := false
	fs.Visit(func(f *flag.Flag) { configSet = configSet || f.Name == "config" })
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := t.do(ctx, http.MethodGet, "/status")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var doc host.StatusReport
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&doc) != nil {
		return ""
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

// controlCmd is `revive NAME` and `restart NAME`: the action on every
// running host serving the config.
func controlCmd(action string, args []string, stdio IO) int {
	fs, path, addr, token := newControlFlags(action, stdio)
	name, ok := parseOneArg(fs, args, stdio, commands[action].synopsis)
	if !ok {
		return ExitUsage
	}
	ts, code := findTargets(action, *path, *addr, *token, fs, stdio)
	if ts == nil {
		return code
	}
	code = ExitOK
	for _, t := range ts {
		ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
		resp, err := t.do(ctx, http.MethodPost, "/control/"+action+"?server="+url.QueryEscape(name))
		if err != nil {
			cancel()
			fmt.Fprintf(stdio.Stderr, "mcpvisor %s: no host answering at %s: %v (is `mcpvisor run` running with this config?)\n", action, t.name, err)
			code = ExitRuntime
			continue
		}
		var res host.ControlResult
		derr := json.NewDecoder(resp.Body).Decode(&res)
		resp.Body.Close()
		cancel()
		switch {
		case resp.StatusCode == http.StatusUnauthorized:
			fmt.Fprintf(stdio.Stderr, "mcpvisor %s: %s answered %s%s\n", action, t.name, termSafe(resp.Status), authHint(resp.StatusCode))
			code = ExitRuntime
		case derr != nil:
			fmt.Fprintf(stdio.Stderr, "mcpvisor %s: unreadable answer from %s (%s): %s\n", action, t.name, termSafe(resp.Status), termSafeErr(derr))
			code = ExitRuntime
		case res.Error != "":
			fmt.Fprintf(stdio.Stderr, "mcpvisor %s: %s: %s\n", action, t.name, termSafe(res.Error))
			code = ExitRuntime
		default:
			st := res.Server
			fmt.Fprintf(stdio.Stdout, "%s: %s %s: %s (generation %d)\n", t.name, termSafe(name), pastTense(action), termSafe(st.State), st.Generation)
		}
	}
	return code
}

func pastTense(action string) string {
	if action == "revive" {
		return "revived"
	}
	return "restarted"
}

// printStatus prints the status table. LAST ERROR is the most recent of
// the server's connection error and its last failed call.
func printStatus(w io.Writer, doc *host.StatusReport) {
	sort.SliceStable(doc.Servers, func(i, j int) bool { return doc.Servers[i].Name < doc.Servers[j].Name })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tSTATE\tSINCE\tNEXT ATTEMPT\tGEN\tRETRIES\tBREAKER\tTOOLS\tCALLS\tERRORS\tLAST ERROR")
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%d\t%d\t%s\n", termSafe(s.Name), termSafe(s.State),
			since, next, s.Generation, retriesColumn(s),
			cmp.Or(termSafe(s.Breaker), "-"), tools, s.Calls, s.Errors, termSafe(last))
	}
	tw.Flush()
}

// parseArgs parses flags wherever they stand among the positional
// arguments (`call TOOL '{…}' -config my.hcl` as well as `call -config
// my.hcl TOOL '{…}'`) and returns the positional ones in order. After "--"
// everything is positional.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for i, a := range args {
		if a == "--" {
			args, rest = args[:i], args[i+1:]
			break
		}
	}
	if !wantsHelp(args) {
		// A usage error is one line and what to do, not the whole help.
		fs.Usage = func() {}
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if hint := flagHint(fs, err); hint != "" {
				fmt.Fprintln(fs.Output(), hint)
			} else if !errors.Is(err, flag.ErrHelp) {
				fmt.Fprintf(fs.Output(), "Run \"mcpvisor help %s\" for its arguments, options and examples.\n", strings.Fields(fs.Name())[0])
			}
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return append(pos, rest...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// parseNoArgs is parseArgs for a command that takes flags only; it says
// which argument was unexpected and reports whether parsing succeeded.
// parseOneArg parses args for a command that takes exactly one argument,
// printing usage otherwise.
func parseOneArg(fs *flag.FlagSet, args []string, stdio IO, usage string) (string, bool) {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return "", false
	}
	if len(pos) != 1 {
		// The synopsis ends with the argument's name (SERVER, FILE, …).
		f := strings.Fields(usage)
		name := f[len(f)-1]
		if len(pos) == 0 {
			fmt.Fprintf(stdio.Stderr, "mcpvisor %s: missing argument 1 (%s)\n", fs.Name(), name)
		} else {
			fmt.Fprintf(stdio.Stderr, "mcpvisor %s: argument 2 (%q) is one too many: it takes one %s\n", fs.Name(), termSafe(pos[1]), name)
		}
		fmt.Fprintln(stdio.Stderr, "usage: "+usage)
		return "", false
	}
	return pos[0], true
}

func parseNoArgs(fs *flag.FlagSet, args []string, stdio IO) bool {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return false
	}
	if len(pos) > 0 {
		fmt.Fprintf(stdio.Stderr, "mcpvisor %s: unexpected argument %q\n", fs.Name(), pos[0])
		return false
	}
	return true
}

// retriesColumn is the RETRIES cell: "1 of 5" while the server works
// through its reconnect budget, "-" when no budget is being spent (a
// parked server waits for NEXT ATTEMPT or a revive, whatever count made it
// park; a disabled one never runs).
func retriesColumn(s host.ServerStatus) string {
	switch s.State {
	case "parked", "disabled", "needs_login", "stopped":
		return "-"
	}
	return fmt.Sprintf("%d of %d", s.Retries, s.MaxRetries)
}

// checkJSONObject says what is wrong with arg as a JSON object, with where
// ("at byte 2") and the text around it; "" when it is one.
func checkJSONObject(arg string) string {
	var obj map[string]any
	err := json.Unmarshal([]byte(arg), &obj)
	if err == nil {
		if obj == nil {
			return "null is not an object; write {} for no arguments"
		}
		return ""
	}
	var offset int64 = -1
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		offset = syn.Offset
	case errors.As(err, &typ):
		return fmt.Sprintf("it is a JSON %s; write an object such as '{\"name\": \"value\"}'", typ.Value)
	}
	msg := err.Error()
	if offset < 0 || offset > int64(len(arg)) {
		return termSafe(msg)
	}
	// offset is just past the byte the decoder choked on.
	at := max(offset-1, 0)
	from := max(at-20, 0)
	to := min(at+20, int64(len(arg)))
	excerpt := termSafe(arg[from:to])
	caret := len(termSafe(arg[from:at]))
	return fmt.Sprintf("%s at byte %d\n  %s\n  %s^", termSafe(msg), at+1, excerpt, strings.Repeat(" ", caret))
}

// unknownToolHint says which tool a call to an unknown one probably meant.
func unknownToolHint(tool string, known []string) string {
	if s := suggest(tool, known); s != "" {
		return fmt.Sprintf("mcpvisor call: did you mean %q?", s)
	}
	return "mcpvisor call: run `mcpvisor tools` for the tool names"
}
