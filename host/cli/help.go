package cli

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// command is one `mcpvisor` command as its help describes it.
type command struct {
	// summary is the one line `mcpvisor help` shows.
	summary string
	// synopsis is the usage line, without "Usage: ".
	synopsis string
	// args explains the positional arguments, one "NAME  meaning" per line;
	// empty for a command that takes none.
	args string
	// about says more than the summary: when to use it, what it needs.
	about string
	// examples are command lines a newcomer can paste.
	examples []string
}

// commandOrder is the order `mcpvisor help` lists the commands in.
var commandOrder = []string{"run", "validate", "tools", "call", "status", "logs", "revive", "restart", "ui", "search", "add", "remove", "import", "client", "login", "logout", "secret", "sandbox", "plugins", "policy", "completion", "version", "help"}

// commands describes every command; Run dispatches them.
var commands = map[string]command{
	"run": {
		summary:  "start the host and serve the servers' tools (HTTP at /mcp, or --stdio)",
		synopsis: "mcpvisor run [-config FILE] [-stdio [-http]]",
		about: "Starts every server block of the configuration, supervises them (respawn, backoff, parking)\n" +
			"and serves their tools, resources and prompts as one MCP server. SIGHUP reloads the file;\n" +
			"SIGINT or SIGTERM stop it and every server process.",
		examples: []string{"mcpvisor run", "mcpvisor run -config ~/mcp/config.hcl -stdio"},
	},
	"validate": {
		summary:  "check a configuration file",
		synopsis: "mcpvisor validate [-config FILE]",
		about:    "Reads the file as `run` would and reports every error with its line; warns about commands\nthat are not installed. Exit code 2 when the file is invalid.",
		examples: []string{"mcpvisor validate -config config.hcl"},
	},
	"tools": {
		summary:  "list the tools the configured servers expose",
		synopsis: "mcpvisor tools [-config FILE] [-json]",
		about:    "Asks the running host serving the config, or starts the servers for the command when none\ndoes. SERVER is the server block a tool comes from.",
		examples: []string{"mcpvisor tools", "mcpvisor tools -json"},
	},
	"call": {
		summary:  "call one tool with JSON arguments",
		synopsis: "mcpvisor call [-config FILE] TOOL ['JSON']",
		args: "TOOL  the exposed tool name, as `mcpvisor tools` lists it (SERVER__TOOL)\n" +
			"JSON  the arguments, a JSON object (default {}); quote it for the shell",
		about:    "Prints the tool's result as JSON. Exit code 1 when the call fails or the tool answers isError.",
		examples: []string{`mcpvisor call echo__echo '{"text": "hello"}'`, "mcpvisor call -config my.hcl github__search_repositories '{\"query\": \"mcp\"}'"},
	},
	"status": {
		summary:  "show the server states of the running host(s) of a config",
		synopsis: "mcpvisor status [-config FILE] [-addr HOST:PORT] [-token TOKEN] [-json | -watch [-interval PERIOD]]",
		about: "Shows every host serving the config (found through their control sockets), each named by\n" +
			"pid or address and config file. Without one it asks host.listen, and says so when the host\n" +
			"answering there serves another config.",
		examples: []string{"mcpvisor status", "mcpvisor status -watch", "mcpvisor status -addr 127.0.0.1:8080 -json"},
	},
	"logs": {
		summary:  "print a server's recent stderr, kept by the running host",
		synopsis: "mcpvisor logs [-config FILE] [-addr HOST:PORT] [-token TOKEN] [-f] [-n N] [-json] SERVER",
		args:     "SERVER  the server block's name, as `mcpvisor status` lists it",
		about: "The running host keeps each server's last 1000 stderr lines (at most 256 KiB) across its\n" +
			"restarts; lines the stderr rate limits dropped are marked where they were. -f prints new lines\n" +
			"as they come, through restarts of the server, until Ctrl-C or the host stops. Operators only:\n" +
			"the CLI sends the local operator credential over the control socket.",
		examples: []string{"mcpvisor logs github", "mcpvisor logs -f -n 20 github", "mcpvisor logs -json github"},
	},
	"revive": {
		summary:  "ask a parked server to try again now",
		synopsis: "mcpvisor revive [-config FILE] [-addr HOST:PORT] [-token TOKEN] SERVER",
		args:     "SERVER  the server block's name, as `mcpvisor status` lists it",
		examples: []string{"mcpvisor revive github"},
	},
	"restart": {
		summary:  "replace a server with a fresh process",
		synopsis: "mcpvisor restart [-config FILE] [-addr HOST:PORT] [-token TOKEN] SERVER",
		args:     "SERVER  the server block's name, as `mcpvisor status` lists it",
		about:    "The new process starts beside the old one, which finishes its calls in flight.",
		examples: []string{"mcpvisor restart github"},
	},
	"ui": {
		summary:  "open the web console of the running host, logged in",
		synopsis: "mcpvisor ui [-config FILE] [-print]",
		about: "Asks the host serving the config, over its control socket, for a one-time login address of\n" +
			"its console (/ui on host.listen) and opens it in the browser, or prints it when there is no\n" +
			"browser to open or with -print. The address works once, for five minutes; the browser keeps\n" +
			"a console session (an HttpOnly, SameSite=Strict cookie) for twelve hours.",
		examples: []string{"mcpvisor ui", "mcpvisor ui -print"},
	},
	"add": {
		summary:  "add a server to the configuration and to the running hosts",
		synopsis: "mcpvisor add [-config FILE] NAME [-env NAME]… -- COMMAND [ARGS…]\n       mcpvisor add [-config FILE] NAME URL [-header 'Name: value']… [-oauth] [-transport sse]\n       mcpvisor add [-config FILE] NAME -registry SERVER_NAME[@VERSION] [-use npm|pypi|oci|remote] [-oauth]",
		args: "NAME         the server block's name (its tools are exposed as NAME__TOOL)\n" +
			"COMMAND      the server to run over stdio, after \"--\", with its arguments\n" +
			"URL          the http:// or https:// address of a remote server\n" +
			"SERVER_NAME  a server of the MCP registry, as `mcpvisor search` lists it (latest version by default)",
		about: "Appends a server block to the file (created when missing), keeping the rest byte for byte,\n" +
			"checks the result and replaces the file only when it is valid, then asks every running host\n" +
			"serving it to reload and waits for the server to be ready. Secrets stay out of the file:\n" +
			"-env NAME writes env(\"NAME\") (a value, -env NAME=VALUE, is refused), and a header value\n" +
			"names variables as $VAR or ${VAR}; a credential header with a literal value is refused.\n" +
			"With -registry the block comes from the registry's server.json (npx, uvx or docker run, or\n" +
			"its remote); the secrets it asks for are prompted for on a terminal and kept in the secret store.",
		examples: []string{
			"mcpvisor add airtable -registry io.github.domdomegg/airtable-mcp-server",
			"mcpvisor add time -registry io.github.domdomegg/time-mcp-pypi@1.0.6 -use pypi",
			"mcpvisor add fs -- npx -y @modelcontextprotocol/server-filesystem ~/src",
			"mcpvisor add github -env GITHUB_PERSONAL_ACCESS_TOKEN -- npx -y @modelcontextprotocol/server-github",
			"mcpvisor add notion https://mcp.notion.com/mcp -oauth",
			"mcpvisor add api https://api.example.com/mcp -header 'Authorization: Bearer ${API_TOKEN}'",
		},
	},
	"search": {
		summary:  "find servers in the MCP registry",
		synopsis: "mcpvisor search [-config FILE] [-limit N] QUERY\n       mcpvisor search [-config FILE] -versions SERVER_NAME",
		args:     "QUERY        a part of the server names to find (3 characters or more)\nSERVER_NAME  with -versions, the server whose versions to list",
		about: "Asks the MCP registry of the host block's registry { url } (default the official\n" +
			"https://registry.modelcontextprotocol.io) and lists the latest version of each matching\n" +
			"server, with what it offers (npm, pypi, oci packages, remotes). `mcpvisor add NAME -registry\n" +
			"SERVER_NAME` adds one.",
		examples: []string{"mcpvisor search filesystem", "mcpvisor search -versions io.github.domdomegg/airtable-mcp-server"},
	},
	"remove": {
		summary:  "remove a server from the configuration and from the running hosts",
		synopsis: "mcpvisor remove [-config FILE] NAME",
		args:     "NAME  the server block's name",
		about:    "Deletes the block (and the comment lines just above it), keeping the rest of the file byte\nfor byte, then asks every running host serving it to reload: the server stops.",
		examples: []string{"mcpvisor remove github"},
	},
	"import": {
		summary:  "turn a Claude Desktop / .mcp.json / Cursor config into config.hcl",
		synopsis: "mcpvisor import FILE",
		args:     "FILE  claude_desktop_config.json, .mcp.json or Cursor's mcp.json",
		about: "Prints the HCL on stdout. Secrets become env() references: the variables to set are\n" +
			"listed on stderr, with renamed and disabled servers.",
		examples: []string{`mcpvisor import ~/Library/Application\ Support/Claude/claude_desktop_config.json > config.hcl`},
	},
	"client": {
		summary:  "install mcpvisor into (or uninstall it from) a desktop client's MCP config",
		synopsis: "mcpvisor client install|uninstall [-config FILE] [-http] [-name NAME] [-project DIR | -file FILE] [-print] CLIENT",
		args:     "CLIENT  claude-desktop, claude-code, cursor, vscode or windsurf",
		about: "install adds an entry (named mcpvisor) that runs this executable as `mcpvisor run --stdio\n" +
			"-config FILE`, both as absolute paths, keeping every other entry and key of the client's file;\n" +
			"the previous file is kept as FILE.bak. uninstall removes that entry only. A file that is not\n" +
			"valid JSON is never rewritten. With -http (claude-code, cursor, vscode, windsurf) the entry\n" +
			"points at the running host's streamable HTTP endpoint instead, with its bearer token as a\n" +
			"header when it has one, so every client shares one host. Where each client's file is: docs/clients.md.",
		examples: []string{"mcpvisor client install -config ~/mcp/config.hcl claude-desktop", "mcpvisor client install -http -config ~/mcp/config.hcl cursor", "mcpvisor client install -print cursor", "mcpvisor client install -project . vscode", "mcpvisor client uninstall claude-desktop"},
	},
	"login": {
		summary:  "log in to an OAuth server",
		synopsis: "mcpvisor login [-config FILE] [-no-browser] SERVER",
		args:     "SERVER  a server block with an oauth block",
		examples: []string{"mcpvisor login notion"},
	},
	"logout": {
		summary:  "forget an OAuth server's tokens",
		synopsis: "mcpvisor logout [-config FILE] SERVER",
		args:     "SERVER  a server block with an oauth block",
		examples: []string{"mcpvisor logout notion"},
	},
	"sandbox": {
		summary:  "print a server's effective sandbox rules without starting it",
		synopsis: "mcpvisor sandbox [-config FILE] SERVER",
		args:     "SERVER  the server block's name",
		about: "Lists what the server may read and write — its sandbox block and the runtime defaults\n" +
			"(system directories, its command's installation, the npx/uvx caches) — its network, the\n" +
			"TCP ports it may connect to, and its limits, as a start on this machine would apply them.\n" +
			"Then every containment layer (Landlock, namespaces, cgroups, rlimits) and whether this kernel,\n" +
			"as this user, enforces it. Linux only. docs/sandbox.md.",
		examples: []string{"mcpvisor sandbox notes", "mcpvisor sandbox -config ~/mcp/config.hcl github"},
	},
	"plugins": {
		summary:  "plugins lock: record each plugin binary's SHA-256 in mcpvisor.lock.hcl",
		synopsis: "mcpvisor plugins lock [-config FILE]",
		about:    "Hashes every plugin binary the configuration runs; mcpvisor then refuses a plugin whose\nbinary has another hash. Run it again after a deliberate upgrade, and commit the file.",
		examples: []string{"mcpvisor plugins lock"},
	},
	"policy": {
		summary:  "policy check: explain what the policies decide for a caller and a tool",
		synopsis: "mcpvisor policy check [-config FILE] [-prompt | -resource] SUBJECT... NAME\n       mcpvisor policy check [-config FILE] -operator SUBJECT...",
		args: "SUBJECT  the caller: sub:ID, email:ADDRESS, group:NAME (any number) and client:ID\n" +
			"         together describe one token's claims; or token, local or anonymous alone\n" +
			"NAME     the exposed tool name (SERVER__TOOL), prompt name (-prompt) or resource URI (-resource)",
		about: "Reads the configuration file only (no running host needed) and prints allow or deny, the rule\n" +
			"that decided, the policies that apply to the caller, the rate limits a call would count\n" +
			"against, and whether the caller is an operator. With -operator and no NAME it decides only\n" +
			"that: may the caller use the operator endpoints (/control/*, the console /ui; an OIDC\n" +
			"subject needs a policy with operator = true). Exit code 0 allowed, 1 denied, 2 bad usage or\n" +
			"invalid configuration (docs/auth.md).",
		examples: []string{"mcpvisor policy check group:analysts github__delete_repo", "mcpvisor policy check sub:alice email:alice@example.com group:analysts notes__read", "mcpvisor policy check -resource local 'file:///home/alice/notes.md'", "mcpvisor policy check -operator sub:alice group:oncall"},
	},
	"secret": {
		summary:  "secret set|list|rm: keep the values env(\"NAME\") reads, outside config.hcl",
		synopsis: "mcpvisor secret set [-config FILE] NAME\n       mcpvisor secret list\n       mcpvisor secret rm [-config FILE] NAME",
		args:     "NAME  the variable env(\"NAME\") reads: letters, digits and _",
		about: "env(\"NAME\") in the configuration reads mcpvisor's environment first, then this store: the OS\n" +
			"keyring (macOS Keychain, Windows Credential Manager, a desktop's Secret Service), else a 0600 file\n" +
			"in the user's state directory (headless Linux; MCPVISOR_SECRETS=file chooses it anywhere).\n" +
			"set reads the value at a prompt without echo, or from standard input; never from the command\n" +
			"line. set and rm then reload the running hosts of the configuration (-config, default\n" +
			"./config.hcl), so a server held in needs_config for the value starts at once. list prints\n" +
			"names only (docs/config.md, \"Secrets\").",
		examples: []string{"mcpvisor secret set GITHUB_PERSONAL_ACCESS_TOKEN", "printf %s \"$TOKEN\" | mcpvisor secret set GITHUB_PERSONAL_ACCESS_TOKEN", "mcpvisor secret list", "mcpvisor secret rm GITHUB_PERSONAL_ACCESS_TOKEN"},
	},
	"completion": {
		summary:  "print a shell completion script (bash, zsh or fish)",
		synopsis: "mcpvisor completion bash|zsh|fish",
		args:     "SHELL  bash, zsh or fish",
		examples: []string{"mcpvisor completion bash > ~/.local/share/bash-completion/completions/mcpvisor", "source <(mcpvisor completion bash)", "mcpvisor completion zsh > \"${fpath[1]}/_mcpvisor\"", "mcpvisor completion fish > ~/.config/fish/completions/mcpvisor.fish"},
	},
	"version": {
		summary:  "print the version, commit and Go version",
		synopsis: "mcpvisor version",
		examples: []string{"mcpvisor version"},
	},
	"help": {
		summary:  "show the help of a command",
		synopsis: "mcpvisor help [COMMAND]",
		args:     "COMMAND  one of the commands above",
		examples: []string{"mcpvisor help call"},
	},
}

// usage is `mcpvisor help`.
func usage() string {
	var b strings.Builder
	b.WriteString("Usage: mcpvisor <command> [options] [arguments]\n\nCommands:\n")
	for _, name := range commandOrder {
		fmt.Fprintf(&b, "  %-10s  %s\n", name, commands[name].summary)
	}
	b.WriteString("\nRun \"mcpvisor help <command>\" (or \"mcpvisor <command> -h\") for a command's arguments,\noptions and examples. Exit codes: 0 ok, 1 runtime error, 2 bad usage or invalid configuration.\n")
	return b.String()
}

// writeHelp prints the help of cmd, with fs's flags when it has any.
func writeHelp(w io.Writer, name string, fs *flag.FlagSet) {
	c, ok := commands[name]
	if !ok {
		// A subcommand ("plugins lock") is described by its parent.
		c = commands[strings.Fields(name)[0]]
	}
	fmt.Fprintf(w, "Usage: %s\n\n%s.\n", c.synopsis, upperFirst(c.summary))
	if c.about != "" {
		fmt.Fprintf(w, "%s\n", c.about)
	}
	if c.args != "" {
		fmt.Fprintf(w, "\nArguments:\n")
		for _, line := range strings.Split(c.args, "\n") {
			fmt.Fprintf(w, "  %s\n", line)
		}
	}
	if fs != nil {
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintf(w, "\nOptions (-flag or --flag):\n")
			out := fs.Output()
			fs.SetOutput(w)
			fs.PrintDefaults()
			fs.SetOutput(out)
		}
	}
	if len(c.examples) > 0 {
		fmt.Fprintf(w, "\nExamples:\n")
		for _, e := range c.examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// isHelpFlag reports whether arg asks for help.
func isHelpFlag(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "--h"
}

// wantsHelp reports whether args ask for the command's help (a help flag
// before any "--").
func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if isHelpFlag(a) {
			return true
		}
	}
	return false
}

// suggest returns the candidate closest to got, or "" when none is close
// enough to be what was meant: at most one edit per three letters (two at
// most), or got a prefix of exactly one candidate.
func suggest(got string, candidates []string) string {
	best, bestDist := "", 0
	for _, c := range candidates {
		d := editDistance(strings.ToLower(got), strings.ToLower(c))
		if best == "" || d < bestDist {
			best, bestDist = c, d
		}
	}
	if best != "" && bestDist <= min(2, max(1, len(got)/3)) {
		return best
	}
	var prefixed []string
	for _, c := range candidates {
		if len(got) >= 3 && strings.HasPrefix(c, got) {
			prefixed = append(prefixed, c)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	return ""
}

// editDistance is the Damerau–Levenshtein distance (adjacent
// transpositions count one) between a and b, in bytes.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// undefinedFlag is how package flag names a flag it does not know.
var undefinedFlag = regexp.MustCompile(`^flag provided but not defined: -+(.+)$`)

// flagHint says which defined flag an undefined one probably meant.
func flagHint(fs *flag.FlagSet, err error) string {
	m := undefinedFlag.FindStringSubmatch(err.Error())
	if m == nil {
		return ""
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if s := suggest(m[1], names); s != "" {
		return fmt.Sprintf("mcpvisor %s: -%s is not an option; did you mean -%s?", fs.Name(), m[1], s)
	}
	return fmt.Sprintf("mcpvisor %s: -%s is not an option; run \"mcpvisor help %s\" for the options", fs.Name(), m[1], strings.Fields(fs.Name())[0])
}

// flagsOf returns the flags of a command, as its help prints them.
func flagsOf(name string) []string {
	var out bytes.Buffer
	args := []string{name, "-h"}
	if name == "plugins" {
		args = []string{"plugins", "lock", "-h"}
	}
	if name == "policy" {
		args = []string{"policy", "check", "-h"}
	}
	if name == "client" {
		args = []string{"client", "install", "-h"}
	}
	Run(args, IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: io.Discard})
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z][a-z-]*)`).FindAllStringSubmatch(out.String(), -1) {
		flags = append(flags, "-"+m[1])
	}
	sort.Strings(flags)
	return flags
}
