// Package plugin runs transport plugins: it launches a plugin binary with
// HashiCorp go-plugin, configures it, opens its connection and hands the
// result to the supervisor as a transport.Link, so a plugin server gets the
// same supervision, breaker and recovery as a stdio server.
//
// The host enables plugin server blocks with
//
//	host.WithPluginDialer(plugin.NewDialer)
//
// The contract a plugin implements lives in package shared.
package plugin

/*
Design note: one plugin process per connection, and how its death is seen.

Every Dial starts a fresh go-plugin Client, so a respawn after a crash is a
new process with a new handshake, a new mTLS certificate and a new
Configure — nothing of the dead process is reused. Close (and every failed
Dial) pairs the Client with Kill.

Death detection is event-driven. go-plugin reaps the plugin in a goroutine
of its own (cmd.Wait) and then cancels the context it handed to the
dispensed plugin's GRPCClient; shared.GRPCClient.Exited exposes that
context's Done channel, and Link.Done is that channel. So the supervisor
learns of a plugin's death the moment go-plugin reaps it. Client.Exited()
would only have offered a boolean to poll. (When a plugin dies, its gRPC
stream also breaks at once, which ends the MCP session; the supervisor then
takes the exit from Done to say why.)

The process is started by mcpvisor's own runner (runner.go): stdin on
/dev/null, a process group of its own, the same kind a stdio server gets
(transport.ProcessGroup: on Linux led by a keeper that kills the group if
mcpvisor dies, even by SIGKILL; Pdeathsig on the plugin), so the host's
terminal signals do not reach it and Close can remove anything the plugin
itself started, and the binary's SHA-256 checked against the block's
sha256 or its lock file entry just before exec. go-plugin's Kill stops the
plugin politely over gRPC, then has the runner kill the group after 2 s;
Close then kills whatever is left in the group and releases its keeper. A
failed Dial does the same.

A plugin that has not completed the go-plugin handshake when the dial's
context ends (connect_timeout, or the supervisor stopping) is killed with
its group, and the dial fails: a failed attempt like any other.

The child's environment is the same small safe set as a stdio server's
(transport.ChildEnv) plus the server block's env: go-plugin's SkipHostEnv
keeps the host's secrets out of plugins too.
*/

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os/exec"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	pluginrunner "github.com/hashicorp/go-plugin/runner"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/transport"
	"github.com/mcpvisor/mcpvisor/shared"
)

const (
	// defaultStartTimeout bounds the go-plugin handshake when the dial's
	// context has no deadline (the supervisor always gives one:
	// connect_timeout).
	defaultStartTimeout = time.Minute

	// exitGrace is how long a failed Configure or Open waits for the plugin
	// process to be reaped before deciding it did not crash. The plugin's
	// gRPC connection breaks as it dies, so the reap follows within
	// milliseconds when it did crash.
	exitGrace = 100 * time.Millisecond
)

// Dialer starts one plugin process per Dial for a server block with a
// plugin block. It implements transport.Dialer.
type Dialer struct {
	server string
	plugin string         // the plugin block's label
	block  *config.Plugin // the binary, and the hash it must have
	args   []string
	config []byte
	env    []string
	dir    string
	logger hclog.Logger

	// limiter bounds the plugin's output in the log, across all of this
	// server's plugin processes.
	limiter *transport.OutputLimiter
	// warnedUnlocked is set once the unlocked plugin has been warned about.
	warnedUnlocked atomic.Bool
	// maxMessage is the server's max_message_size: a larger frame that
	// answers a call fails that call.
	maxMessage int64
}

var _ transport.Dialer = (*Dialer)(nil)

// NewDialer returns the Dialer for srv's plugin block. Its signature is
// transport.PluginDialerFunc. It fails only for a block that cannot work at
// all; a missing binary or a wrong checksum is reported by Dial, so the
// supervisor retries and parks the server while the rest of the host runs.
func NewDialer(srv *config.Server, logger hclog.Logger) (transport.Dialer, error) {
	p := srv.Plugin
	if p == nil {
		return nil, fmt.Errorf("server %q: transport %q needs a plugin block", srv.Name, srv.Transport)
	}
	if p.Command == "" {
		return nil, fmt.Errorf("server %q: plugin %q: no command", srv.Name, p.Name)
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	d := &Dialer{
		server:  srv.Name,
		plugin:  p.Name,
		block:   p,
		args:    p.Args,
		config:  p.Config,
		env:     transport.ChildEnv(srv.Env),
		dir:     srv.Cwd,
		logger:  logger,
		limiter: transport.NewOutputLimiter(logger),

		maxMessage: srv.MaxMessageSize,
	}
	if d.maxMessage <= 0 {
		d.maxMessage = config.DefaultMaxMessageSize
	}
	if len(d.config) == 0 {
		d.config = []byte("{}")
	}
	if p.SHA256 != "" {
		if sum, err := hex.DecodeString(p.SHA256); err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("server %q: plugin %q: sha256 %q is not 64 hexadecimal digits", srv.Name, p.Name, p.SHA256)
		}
	}
	return d, nil
}

// Dial checks the plugin binary's hash, starts it, waits for its
// handshake, configures it and opens its connection. Every failure is one
// line naming the server and wraps one of this package's Err values (or
// shared.ErrConfigRejected).
func (d *Dialer) Dial(ctx context.Context) (transport.Link, error) {
	path, err := d.block.Binary()
	if err != nil {
		return nil, d.errorf(ErrBinaryNotFound, "%v", err)
	}
	startTimeout := defaultStartTimeout
	if dl, ok := ctx.Deadline(); ok {
		startTimeout = time.Until(dl)
		if startTimeout <= 0 {
			return nil, d.errorf(ErrHandshake, "no time left to start the plugin: %v", context.DeadlineExceeded)
		}
	}

	group := transport.NewProcessGroup(d.logger)
	dialed := false
	defer func() {
		if !dialed {
			group.Signal(syscall.SIGKILL)
			group.Release()
		}
	}()
	want := d.block.WantSHA256()
	if want == "" {
		d.warnUnlocked(path)
	}

	out := newOutput(d.logger, d.limiter)
	// handshook ends the runner's watch of ctx: once go-plugin's start has
	// returned, ctx no longer bounds the process's life.
	handshook := make(chan struct{})
	var r *runner
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig: shared.Handshake,
		Plugins:         shared.PluginMap,
		RunnerFunc: func(_ hclog.Logger, spec *exec.Cmd, socketDir string) (pluginrunner.Runner, error) {
			var err error
			r, err = d.newRunner(spec, socketDir, path, want, group, out, ctx.Done(), handshook)
			return r, err
		},
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		AutoMTLS:         true,
		SkipHostEnv:      true,
		StartTimeout:     startTimeout,
		Logger:           d.logger,
		SyncStdout:       out.stdout,
		SyncStderr:       out.stderr,
	})

	rpc, err := client.Client()
	close(handshook)
	if err != nil {
		// Kill reaps the process and drains its stderr, so the error can
		// quote the plugin's last words.
		client.Kill()
		return nil, d.startError(ctx, err, path, startTimeout, r, out)
	}
	raw, err := rpc.Dispense(shared.PluginName)
	if err != nil {
		client.Kill()
		return nil, d.errorf(ErrHandshake, "dispensing %q: %v", shared.PluginName, err)
	}
	tc, ok := raw.(*shared.GRPCClient)
	if !ok {
		client.Kill()
		return nil, d.errorf(ErrHandshake, "dispensed %T, not a transport", raw)
	}
	cmd, pid := r.cmd, r.pid

	if err := tc.Configure(ctx, d.config); err != nil {
		return nil, d.stepError("configuring", err, client, tc, cmd, out)
	}
	conn, err := tc.Open(ctx)
	if err != nil {
		return nil, d.stepError("opening the connection", err, client, tc, cmd, out)
	}
	d.logger.Debug("plugin connected", "plugin", d.plugin, "pid", pid)
	l := &Link{
		server: d.server,
		plugin: d.plugin,
		client: client,
		cmd:    cmd,
		pid:    pid,
		group:  group,
		conn:   conn,
		exited: tc.Exited(),
		out:    out,
		logger: d.logger,
	}
	l.transport = &mcpTransport{conn: conn, server: d.server, maxMessage: d.maxMessage, logger: d.logger}
	dialed = true
	return l, nil
}

// warnUnlocked warns, once per server block, that its plugin binary is
// run without a hash to check: neither sha256 nor a lock file entry.
func (d *Dialer) warnUnlocked(path string) {
	if d.warnedUnlocked.Swap(true) {
		return
	}
	sum, err := config.FileSHA256(path)
	if err != nil {
		sum = "unknown: " + err.Error()
	}
	d.logger.Warn("plugin not locked: any binary at its path is run; record its hash with `mcpvisor plugins lock` and commit "+config.LockFileName,
		"plugin", d.plugin, "path", path, "sha256", sum, "command", d.block.LockCommand())
}
