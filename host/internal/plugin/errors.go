package plugin

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	goplugin "github.com/hashicorp/go-plugin"

	"github.com/mcpvisor/mcpvisor/host/recovery"
	"github.com/mcpvisor/mcpvisor/shared"
)

// The failures Dial reports. Each Dial error is one line of the form
//
//	server "x": plugin "y": <one of these>: <details>
//
// and wraps one of these errors (or shared.ErrConfigRejected, re-exported
// as ErrConfigRejected); test with errors.Is.
var (
	// ErrBinaryNotFound means the plugin's command does not exist or is
	// not in PATH.
	ErrBinaryNotFound = errors.New("plugin binary not found")

	// ErrChecksumMismatch means the binary's SHA-256 differs from the one
	// its block requires (sha256, else its lock file entry): it was
	// rebuilt, upgraded, replaced or tampered with. It is never started.
	ErrChecksumMismatch = errors.New("checksum mismatch")

	// ErrHandshake means the binary started but did not complete the
	// go-plugin handshake as an mcpvisor transport plugin of this protocol
	// version: wrong magic cookie, wrong protocol version, net/rpc instead
	// of gRPC, not a go-plugin binary, or no handshake within
	// connect_timeout (it is then killed).
	ErrHandshake = errors.New("plugin handshake failed")

	// ErrCrashed means the plugin process exited before it was ready:
	// during the handshake, while configuring, or while opening its
	// connection.
	ErrCrashed = errors.New("plugin exited during startup")

	// ErrConfigRejected means the plugin's Configure refused the block's
	// config; the plugin's own message follows.
	ErrConfigRejected = shared.ErrConfigRejected

	// ErrOpen means the plugin could not open its connection to the MCP
	// server (for example: connection refused); the plugin's message
	// follows.
	ErrOpen = errors.New("plugin could not connect")
)

// errorf builds a Dial error: one line, naming the server and the plugin.
func (d *Dialer) errorf(kind error, format string, args ...any) error {
	detail := oneLine(fmt.Sprintf(format, args...))
	if detail == "" {
		return fmt.Errorf("server %q: plugin %q: %w", d.server, d.plugin, kind)
	}
	return fmt.Errorf("server %q: plugin %q: %w: %s", d.server, d.plugin, kind, detail)
}

// startError classifies a failed go-plugin start. go-plugin reports most
// of these only as text, so this is the one place that reads it. r is nil
// when the process was never prepared.
func (d *Dialer) startError(ctx context.Context, err error, path string, startTimeout time.Duration, r *runner, out *output) error {
	var cmd *exec.Cmd
	if r != nil {
		cmd = r.cmd
	}
	msg := err.Error()
	stderr := out.tail.last(3)
	var ce *checksumError
	switch {
	case errors.As(err, &ce) && ce.err != nil:
		return d.errorf(ErrChecksumMismatch, "%v", ce)
	case errors.As(err, &ce):
		return d.errorf(ErrChecksumMismatch, "%s; mcpvisor refuses to start it. %s",
			d.block.Mismatch(ce.path, ce.got), strings.TrimSuffix(d.block.UpgradeAdvice(ce.got), "."))
	// The runner kills a plugin whose handshake outlives the dial's
	// context, and go-plugin's StartTimeout ends at the same deadline:
	// either way the plugin missed its connect_timeout.
	case errors.Is(ctx.Err(), context.DeadlineExceeded), strings.Contains(msg, "timeout while waiting for plugin to start"):
		return d.errorf(ErrHandshake, "no handshake within connect_timeout (%s); the plugin was killed%s",
			startTimeout.Round(10*time.Millisecond), stderrSuffix(stderr))
	case errors.Is(ctx.Err(), context.Canceled):
		return d.errorf(ErrHandshake, "canceled while waiting for the handshake; the plugin was killed")
	case strings.Contains(stderr, "not meant to be executed directly"):
		return d.errorf(ErrHandshake, "magic cookie mismatch: %s is not an mcpvisor transport plugin (or was built against another handshake)", path)
	case strings.Contains(msg, "incompatible API version"):
		return d.errorf(ErrHandshake, "protocol version mismatch: %s (host speaks %d; rebuild the plugin against this mcpvisor's shared package)",
			strings.TrimPrefix(msg, "incompatible API version with plugin. "), shared.Handshake.ProtocolVersion)
	case strings.Contains(msg, "incompatible core API version"):
		return d.errorf(ErrHandshake, "go-plugin core protocol mismatch (%s); rebuild the plugin against go-plugin v1.x", firstLine(msg))
	case strings.Contains(msg, "unsupported plugin protocol"):
		return d.errorf(ErrHandshake, "the plugin serves %s; mcpvisor accepts only grpc plugins", firstLine(msg))
	case strings.Contains(msg, "plugin exited before we could connect"),
		strings.Contains(msg, "Unrecognized remote plugin message") && exitedOnItsOwn(cmd):
		return d.errorf(ErrCrashed, "exited during the handshake (%s)%s", exitHow(cmd), stderrSuffix(stderr))
	case strings.Contains(msg, "Unrecognized remote plugin message"):
		line := strings.TrimSpace(strings.TrimPrefix(firstLine(msg), "Unrecognized remote plugin message:"))
		return d.errorf(ErrHandshake, "%s is not a go-plugin binary: its first output line was %q, not the handshake", path, line)
	case strings.Contains(msg, "fork/exec"), strings.Contains(msg, "exec format error"), strings.Contains(msg, "permission denied"):
		return d.errorf(ErrBinaryNotFound, "cannot run %s: %s", path, firstLine(msg))
	}
	return d.errorf(ErrHandshake, "%s%s", firstLine(msg), stderrSuffix(stderr))
}

// stepError reports a failed Configure or Open and stops the plugin. A
// plugin that died during the step is reported as a crash with its exit
// status and last stderr lines, not as the gRPC error its death caused.
func (d *Dialer) stepError(step string, err error, client *goplugin.Client, tc *shared.GRPCClient, cmd *exec.Cmd, out *output) error {
	crashed := false
	t := time.NewTimer(exitGrace)
	select {
	case <-tc.Exited():
		crashed = true
	case <-t.C:
	}
	t.Stop()
	client.Kill()
	switch {
	case crashed:
		return d.errorf(ErrCrashed, "exited while %s (%s)%s", step, exitHow(cmd), stderrSuffix(out.tail.last(3)))
	case errors.Is(err, shared.ErrConfigRejected):
		return d.errorf(ErrConfigRejected, "%s", strings.TrimPrefix(err.Error(), shared.ErrConfigRejected.Error()+": "))
	case errors.Is(err, context.DeadlineExceeded):
		return d.errorf(ErrOpen, "no answer while %s within the connect timeout", step)
	case errors.Is(err, context.Canceled):
		return d.errorf(ErrOpen, "canceled while %s", step)
	case step == "configuring":
		return d.errorf(ErrHandshake, "configuring: %v", err)
	}
	return d.errorf(ErrOpen, "%v", err)
}

// exitedOnItsOwn reports whether the process ended other than by the
// SIGKILL go-plugin sends after a failed handshake. It is called after
// Kill, so the process has been reaped.
func exitedOnItsOwn(cmd *exec.Cmd) bool {
	if cmd == nil {
		return false
	}
	ps := cmd.ProcessState
	return ps != nil && ps.Exited()
}

// exitHow says how the plugin process ended, as "exit status 2" or
// "signal: killed". It is called only after the process was reaped.
func exitHow(cmd *exec.Cmd) string {
	if cmd != nil && cmd.ProcessState != nil {
		return cmd.ProcessState.String()
	}
	return "exit status unknown"
}

func stderrSuffix(stderr string) string {
	if stderr == "" {
		return ""
	}
	return "; last stderr: " + recovery.Redact(stderr)
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return strings.TrimSpace(s[:i])
	}
	return s
}

// oneLine folds a multi-line message into one line.
func oneLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	kept := lines[:0]
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, " | ")
}
