package cli

// The validate command.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/mcpvisor/mcpvisor/host/config"
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
	fmt.Fprintf(stdio.Stdout, "%s: valid (%d server(s))\n", *path, len(cfg.Servers))
	return ExitOK
}
