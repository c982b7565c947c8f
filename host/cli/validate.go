package cli

// The validate command.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/resources"
	"github.com/mcpvisor/mcpvisor/host/internal/sandbox"
)

func validateCmd(args []string, stdio IO) int {
	fs, path := newFlags("validate", stdio)
	if !parseNoArgs(fs, args, stdio) {
		return ExitUsage
	}
	// Loaded as `run` loads it, so the two agree: a server whose env()
	// reads a variable that is set nowhere is held in needs_config by run,
	// and is a warning here, not an error.
	cfg, ok := loadWith(config.LoadForRun, *path, stdio)
	if !ok {
		return ExitUsage
	}
	for _, s := range cfg.Servers {
		if len(s.MissingEnv) == 0 {
			continue
		}
		sets := make([]string, len(s.MissingEnv))
		for i, m := range s.MissingEnv {
			sets[i] = "`mcpvisor secret set " + m + "`"
		}
		fmt.Fprintf(stdio.Stderr, "Warning: server %q: env() reads %s, which is neither in the environment nor in the secret store; `run` holds the server in needs_config (the others run) until %s, or until it is exported for mcpvisor\n",
			s.Name, strings.Join(s.MissingEnv, ", "), strings.Join(sets, " and "))
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
		// Likewise a sandbox path that is missing here (docs/sandbox.md).
		if sb := s.Sandbox; sb != nil {
			for _, p := range append(append([]string(nil), sb.Read...), sb.Write...) {
				if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
					fmt.Fprintf(stdio.Stderr, "Warning: server %q: sandbox path %s does not exist; the server will park at start until it does\n", s.Name, termSafe(p))
				}
			}
			// And a user it could not switch to here.
			if _, err := sandbox.ResolveUser(sb, s.Name); err != nil {
				fmt.Fprintf(stdio.Stderr, "Warning: server %q: %s; the server will park at start\n", s.Name, termSafeErr(err))
			}
		}
	}
	// A rule this kernel (as this user) cannot enforce: an error where a
	// start here would refuse it, a warning where best_effort starts it
	// with less — the start's own decision (docs/sandbox.md).
	var refused bool
	for _, s := range cfg.Servers {
		if s.Transport != config.TransportStdio || s.Command == "" {
			continue
		}
		for _, u := range unenforceable(s) {
			if u.bestEffort {
				fmt.Fprintf(stdio.Stderr, "Warning: server %q: %s; best_effort starts it with what this kernel can enforce\n", s.Name, u.err)
			} else {
				refused = true
				fmt.Fprintf(stdio.Stderr, "Error: server %q: %s; a start here is refused\n", s.Name, u.err)
			}
		}
	}
	if refused {
		fmt.Fprintf(stdio.Stderr, "mcpvisor: %s: this machine cannot enforce some containment rules (above), as this user\n", *path)
		return ExitUsage
	}
	fmt.Fprintf(stdio.Stdout, "%s: valid (%d server(s))\n", *path, len(cfg.Servers))
	return ExitOK
}

// unenforceableRule is a containment rule this kernel cannot enforce.
type unenforceableRule struct {
	err        error
	bestEffort bool // the block says best_effort: started with less
}

// unenforceable lists the rules of s this kernel, as this user, cannot
// enforce: the Landlock ABI its sandbox needs, a limit without its cgroup.
func unenforceable(s *config.Server) []unenforceableRule {
	var out []unenforceableRule
	if sb := s.Sandbox; sb != nil && runtime.GOOS == "linux" {
		have, need := sandbox.ABI(), sandbox.NeededABI(len(sb.Connect) > 0)
		if have < need {
			out = append(out, unenforceableRule{fmt.Errorf("this kernel has Landlock ABI %d and the sandbox needs ABI %d", have, need), sb.BestEffort})
		}
	}
	if !s.Limits.IsZero() && runtime.GOOS == "linux" {
		for _, err := range resources.PlanLimits(s.Name, s.Limits).Unenforceable {
			out = append(out, unenforceableRule{err, s.Limits.BestEffort})
		}
	}
	return out
}
