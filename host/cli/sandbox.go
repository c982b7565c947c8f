package cli

// The sandbox command: a server's effective sandbox rules, without
// starting anything (docs/sandbox.md).

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/resources"
	"github.com/mcpvisor/mcpvisor/host/internal/sandbox"
	"github.com/mcpvisor/mcpvisor/host/internal/transport"
)

func sandboxCmd(args []string, stdio IO) int {
	fs, path := newFlags("sandbox", stdio)
	name, ok := parseOneArg(fs, args, stdio, commands["sandbox"].synopsis)
	if !ok {
		return ExitUsage
	}
	cfg, ok := loadConfig(*path, stdio)
	if !ok {
		return ExitUsage
	}
	var srv *config.Server
	var names []string
	for i := range cfg.Servers {
		names = append(names, cfg.Servers[i].Name)
		if cfg.Servers[i].Name == name {
			srv = cfg.Servers[i]
		}
	}
	if srv == nil {
		msg := fmt.Sprintf("mcpvisor sandbox: %s has no server %q", *path, termSafe(name))
		if s := suggest(name, names); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		fmt.Fprintln(stdio.Stderr, msg)
		return ExitUsage
	}
	w := stdio.Stdout
	if srv.Sandbox == nil {
		fmt.Fprintf(w, "server %q: no sandbox block; it runs with the rights of mcpvisor's user.\n", srv.Name)
		printLimits(w, srv.Limits)
		printLayers(w, srv)
		return ExitOK
	}
	if runtime.GOOS != "linux" {
		// validate refuses the block first; kept for Go-built configs.
		fmt.Fprintf(stdio.Stderr, "mcpvisor sandbox: server %q: %v\n", srv.Name, sandbox.ErrUnsupported)
		return ExitRuntime
	}
	resolved, err := exec.LookPath(srv.Command)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor sandbox: server %q: command %q not found (%v); the defaults depend on where it is installed\n", srv.Name, termSafe(srv.Command), err)
		return ExitRuntime
	}
	r, err := sandbox.Effective(srv.Sandbox, srv.Name, srv.Command, resolved, transport.ChildEnv(srv.Env), srv.Cwd)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor sandbox: %s\n", termSafeErr(err))
		return ExitRuntime
	}
	have, need := sandbox.ABI(), sandbox.NeededABI(len(r.Connect) > 0)
	kernel := fmt.Sprintf("this kernel has Landlock ABI %d, the rules need %d", have, need)
	switch {
	case have == 0:
		kernel = fmt.Sprintf("this kernel has no Landlock, the rules need ABI %d", need)
	}
	if have < need {
		if r.BestEffort {
			kernel += ": best_effort, so it starts with what the kernel can enforce"
		} else {
			kernel += ": it would refuse to start (set best_effort = true, or upgrade the kernel)"
		}
	}
	fmt.Fprintf(w, "server %q: %s (%s)\n", srv.Name, sandbox.Summary(srv.Sandbox), kernel)
	fmt.Fprintf(w, "command: %s\n", termSafe(resolved))
	fmt.Fprintln(w, "read (read and execute):")
	for _, p := range r.Read {
		fmt.Fprintf(w, "  %s\n", termSafe(p))
	}
	fmt.Fprintln(w, "write (read, write, create, remove):")
	for _, p := range r.Write {
		note := ""
		if slices.Contains(r.Caches, p) {
			if _, err := os.Stat(p); err != nil {
				note = "  (created at start)"
			}
		}
		fmt.Fprintf(w, "  %s%s\n", termSafe(p), note)
	}
	fmt.Fprintln(w, "  a private temporary directory, new at each start, as TMPDIR")
	fmt.Fprintln(w, "view: only the paths above exist for the server (a mount and a pid namespace of its own, its own /proc); hidden even where a path above would show them:")
	for _, p := range sandbox.HiddenPaths() {
		fmt.Fprintf(w, "  %s\n", termSafe(p))
	}
	if r.Network == config.NetworkNone {
		fmt.Fprintln(w, "network: none (a network namespace of its own: only its own loopback)")
	} else {
		fmt.Fprintln(w, "network: any (the host's network)")
	}
	if len(r.Connect) > 0 {
		ports := make([]string, len(r.Connect))
		for i, p := range r.Connect {
			ports[i] = strconv.Itoa(p)
		}
		fmt.Fprintf(w, "connect: TCP ports %s only\n", strings.Join(ports, ", "))
	} else if r.Network != config.NetworkNone {
		fmt.Fprintln(w, "connect: any TCP port")
	}
	if len(r.ConnectUnix) > 0 {
		fmt.Fprintln(w, "connect_unix (Unix sockets it may connect to):")
		for _, p := range r.ConnectUnix {
			fmt.Fprintf(w, "  %s\n", termSafe(p))
		}
	}
	if runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64" {
		fmt.Fprintln(w, "system calls (seccomp; a refused call fails with EPERM, a socket with EACCES):")
	} else {
		fmt.Fprintf(w, "system calls (seccomp): none on %s; it would refuse to start unless best_effort = true\n", runtime.GOARCH)
	}
	for _, l := range r.Seccomp.Describe() {
		fmt.Fprintf(w, "  %s\n", l)
	}
	fmt.Fprintln(w, "capabilities: none, in every set (bounding, ambient, inheritable, permitted, effective), also as root")
	if srv.Sandbox.User == "" {
		fmt.Fprintf(w, "user: mcpvisor's own (uid %d)\n", os.Geteuid())
	} else if c, err := sandbox.ResolveUser(srv.Sandbox, srv.Name); err != nil {
		fmt.Fprintf(w, "user: %s: %s\n", termSafe(srv.Sandbox.User), termSafeErr(err))
	} else {
		fmt.Fprintf(w, "user: %s (uid %d, gid %d, no supplementary groups)\n", termSafe(srv.Sandbox.User), c.UID, c.GID)
	}
	printLimits(w, srv.Limits)
	printLayers(w, srv)
	return ExitOK
}

// printLayers prints each containment layer of docs/sandbox.md's table
// and whether this kernel, as this user, enforces it for srv: what a
// start here would do (the same decisions: sandbox.ABI against
// sandbox.NeededABI, resources.PlanLimits).
func printLayers(w io.Writer, srv *config.Server) {
	fmt.Fprintln(w, "layers on this machine, as this user:")
	line := func(layer, how string) { fmt.Fprintf(w, "  %-19s %s\n", layer+":", how) }
	sb := srv.Sandbox
	if sb == nil || runtime.GOOS != "linux" {
		line("landlock fs", "not applied (no sandbox block)")
		line("landlock net", "not applied (no sandbox block)")
		line("network namespace", "no: the host's network")
	} else {
		have := sandbox.ABI()
		for _, l := range []struct {
			name    string
			need    int
			applies bool
		}{{"landlock fs", sandbox.NeededABI(false), true}, {"landlock net", sandbox.NeededABI(true), len(sb.Connect) > 0}} {
			switch {
			case !l.applies:
				line(l.name, "not applied (no connect list)")
			case have >= l.need:
				line(l.name, fmt.Sprintf("enforced (Landlock ABI %d found, %d needed)", have, l.need))
			case sb.BestEffort:
				line(l.name, fmt.Sprintf("NOT enforced: Landlock ABI %d found, %d needed; best_effort starts it with what the kernel can enforce", have, l.need))
			default:
				line(l.name, fmt.Sprintf("NOT enforceable: Landlock ABI %d found, %d needed; the start is refused (set best_effort = true, or upgrade the kernel)", have, l.need))
			}
		}
		if sb.Network == config.NetworkNone {
			line("network namespace", "yes: a network namespace of its own, only its own loopback")
		} else {
			line("network namespace", "no: the host's network")
		}
	}
	switch {
	case sb == nil || runtime.GOOS != "linux":
		line("seccomp", "not applied (no sandbox block)")
		line("capabilities", "not applied (no sandbox block)")
		line("mount namespace", "not applied (no sandbox block)")
		line("pid namespace", "not applied (no sandbox block)")
	default:
		switch arch := runtime.GOARCH; {
		case arch == "amd64" || arch == "arm64":
			line("seccomp", "enforced (the refused calls are listed above)")
		case sb.BestEffort:
			line("seccomp", "NOT enforced: no filter for "+arch+"; best_effort starts the server without one")
		default:
			line("seccomp", "NOT enforceable: no filter for "+arch+"; the start is refused (set best_effort = true)")
		}
		line("capabilities", "none, in every set")
		line("mount namespace", "yes: only the granted paths exist (the view above)")
		line("pid namespace", "yes: its own /proc; every process in it dies with the server")
	}

	l := srv.Limits
	plan := resources.PlanLimits(srv.Name, l)
	or := func(s, none string) string {
		if s == "" {
			return none
		}
		return s
	}
	line("cgroup memory", or(plan.Memory, "no memory limit"))
	line("cgroup pids", or(plan.Processes, "no processes limit"))
	line("rlimits", or(plan.OpenFiles, "none"))
	if l.IsZero() {
		line("kill on stop", "process group only (no limits block: no cgroup; a process that leaves the group, setsid, outlives the server)")
	} else {
		line("kill on stop", plan.Kill)
	}
	for _, err := range plan.Unenforceable {
		if l.BestEffort {
			fmt.Fprintf(w, "best_effort: %s\n", err)
		} else {
			fmt.Fprintf(w, "it would refuse to start: %s\n", err)
		}
	}
}

// printLimits prints a limits block, if the server has one.
func printLimits(w io.Writer, l config.Limits) {
	if l.IsZero() {
		return
	}
	var parts []string
	if l.Memory > 0 {
		parts = append(parts, "memory "+config.FormatSize(l.Memory))
	}
	if l.Processes > 0 {
		parts = append(parts, fmt.Sprintf("processes %d", l.Processes))
	}
	if l.OpenFiles > 0 {
		parts = append(parts, fmt.Sprintf("open files %d", l.OpenFiles))
	}
	fmt.Fprintf(w, "limits: %s\n", strings.Join(parts, ", "))
}
