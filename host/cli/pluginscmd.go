package cli

// The plugins command (plugins lock).

import (
	"fmt"

	"github.com/mcpvisor/mcpvisor/host/config"
)

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
