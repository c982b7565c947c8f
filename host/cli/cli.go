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
//	logs        print a server's recent stderr, kept by the running host
//	import      turn a Claude Desktop / .mcp.json / Cursor config into HCL
//	add         add a server block to the config and reload running hosts
//	remove      remove a server block and reload running hosts
//	search      find servers in the MCP registry (add them with add -registry)
//	client      install mcpvisor into a desktop client's MCP config
//	login       log in to an OAuth server
//	logout      forget an OAuth server's tokens
//	sandbox     print a server's effective sandbox rules
//	plugins     plugins lock: record each plugin binary's SHA-256
//	policy      policy check: explain what the policies decide for a caller
//	completion  print a bash, zsh or fish completion script
//	version     print the version
//	help        show the help of a command
//
// Every command has a synopsis, arguments, options and examples in
// help.go: `mcpvisor help CMD` and `mcpvisor CMD -h` print them.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// Exit codes (docs/design.md §11).
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
	case "logs":
		return logsCmd(rest, stdio)
	case "import":
		return importCmd(rest, stdio)
	case "add":
		return addCmd(rest, stdio)
	case "remove":
		return removeCmd(rest, stdio)
	case "search":
		return searchCmd(rest, stdio)
	case "client":
		return clientCmd(rest, stdio)
	case "ui":
		return uiCmd(rest, stdio)
	case "login":
		return loginCmd(rest, stdio)
	case "logout":
		return logoutCmd(rest, stdio)
	case "secret":
		return secretCmd(rest, stdio)
	case "sandbox":
		return sandboxCmd(rest, stdio)
	case "plugins":
		return pluginsCmd(rest, stdio)
	case "policy":
		return policyCmd(rest, stdio)
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
	cfg := fs.String("config", defaultConfigPath(), "configuration `file` (default ./config.hcl, else your user config $XDG_CONFIG_HOME/mcpvisor/config.hcl, ~/.config/mcpvisor/config.hcl by default)")
	// The default depends on the folder (userconfig.go); the usage says
	// it in words, the same wherever the help is printed.
	fs.Lookup("config").DefValue = ""
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
	if userConfigMissing(path) {
		fmt.Fprintf(stdio.Stderr, "mcpvisor: %s\n", missingConfig(path))
		return nil, false
	}
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
