package cli

// The run command, and the hosts the one-shot commands start.

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcpvisor/mcpvisor/host"
	"github.com/mcpvisor/mcpvisor/host/config"
)

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
	setMemoryLimit(cfg.Host, logger)

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
	// The local operator credential (operator.go): what makes the CLI,
	// and never a server, the operator.
	if dir, err := makeRuntimeDir(); err != nil {
		logger.Warn("no local operator credential: the CLI cannot operate this host over its control socket, nor open the console without a token", "error", err)
	} else if tok, err := ensureOperatorToken(dir); err != nil {
		logger.Warn("no local operator credential: the CLI cannot operate this host over its control socket, nor open the console without a token", "error", err)
	} else {
		opts = append(opts, host.WithLocalOperator(host.LocalOperator{Token: tok, OtherHosts: func() []int { return hostPids(dir) }}))
	}
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
		printConsoleLogin(stdio.Stderr, h, ln.Addr().String())
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
		"restarted", res.Restarted, "unchanged", len(res.Unchanged), "policies_changed", res.PoliciesChanged,
		"discovery_changed", res.DiscoveryChanged)
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
		if st.State != host.StateReady && st.State != host.StateDisabled && st.State != host.StateIdle {
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
