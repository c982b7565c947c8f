package cli

import (
	"fmt"
	"io"
	"strings"
)

// completionCmd prints a completion script for bash, zsh or fish: the
// commands, each command's flags, and file names for -config and import.
func completionCmd(args []string, stdio IO) int {
	fs := newBareFlags("completion", stdio)
	shell, ok := parseOneArg(fs, args, stdio, commands["completion"].synopsis)
	if !ok {
		return ExitUsage
	}
	switch shell {
	case "bash":
		writeBashCompletion(stdio.Stdout)
	case "zsh":
		writeZshCompletion(stdio.Stdout)
	case "fish":
		writeFishCompletion(stdio.Stdout)
	default:
		fmt.Fprintf(stdio.Stderr, "mcpvisor completion: argument 1 (SHELL): %q is not bash, zsh or fish\n", termSafe(shell))
		return ExitUsage
	}
	return ExitOK
}

func writeBashCompletion(w io.Writer) {
	fmt.Fprintf(w, `# bash completion for mcpvisor: source <(mcpvisor completion bash)
_mcpvisor() {
    local cur prev cmd
    cur="${COMP_WORDS[COMP_CWORD]}"
    prev="${COMP_WORDS[COMP_CWORD-1]}"
    if [ "$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=($(compgen -W %q -- "$cur"))
        return
    fi
    cmd="${COMP_WORDS[1]}"
    case "$prev" in
        -config|--config) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    esac
    case "$cmd" in
`, strings.Join(commandOrder, " "))
	for _, name := range commandOrder {
		words := flagsOf(name)
		switch name {
		case "help":
			words = commandOrder
		case "completion":
			words = []string{"bash", "zsh", "fish"}
		case "plugins":
			words = append([]string{"lock"}, words...)
		case "policy":
			words = append([]string{"check"}, words...)
		case "secret":
			words = append([]string{"set", "list", "rm"}, words...)
		case "client":
			words = append(append([]string{"install", "uninstall"}, clientNames...), words...)
		}
		files := ""
		if name == "import" {
			files = ` COMPREPLY+=($(compgen -f -- "$cur"));`
		}
		fmt.Fprintf(w, "        %s) COMPREPLY=($(compgen -W %q -- \"$cur\"));%s ;;\n", name, strings.Join(words, " "), files)
	}
	fmt.Fprint(w, `    esac
}
complete -o default -F _mcpvisor mcpvisor
`)
}

func writeZshCompletion(w io.Writer) {
	fmt.Fprint(w, "#compdef mcpvisor\n# zsh completion for mcpvisor: mcpvisor completion zsh > \"${fpath[1]}/_mcpvisor\"\ncompdef _mcpvisor mcpvisor\n_mcpvisor() {\n  local -a cmds\n  cmds=(\n")
	for _, name := range commandOrder {
		fmt.Fprintf(w, "    %s\n", zshQuote(name+":"+commands[name].summary))
	}
	fmt.Fprint(w, "  )\n  if (( CURRENT == 2 )); then\n    _describe 'command' cmds\n    return\n  fi\n  case ${words[2]} in\n")
	for _, name := range commandOrder {
		words := flagsOf(name)
		switch name {
		case "help":
			words = commandOrder
		case "completion":
			words = []string{"bash", "zsh", "fish"}
		case "plugins":
			words = append([]string{"lock"}, words...)
		case "policy":
			words = append([]string{"check"}, words...)
		case "secret":
			words = append([]string{"set", "list", "rm"}, words...)
		case "client":
			words = append(append([]string{"install", "uninstall"}, clientNames...), words...)
		}
		fmt.Fprintf(w, "    %s) compadd -- %s; _files ;;\n", name, strings.Join(words, " "))
	}
	// Autoloaded from fpath, the file is the function's body: run it then,
	// not when the file is sourced.
	fmt.Fprint(w, "  esac\n}\nif [ \"$funcstack[1]\" = \"_mcpvisor\" ]; then\n  _mcpvisor \"$@\"\nfi\n")
}

func writeFishCompletion(w io.Writer) {
	fmt.Fprint(w, "# fish completion for mcpvisor: mcpvisor completion fish > ~/.config/fish/completions/mcpvisor.fish\n")
	for _, name := range commandOrder {
		fmt.Fprintf(w, "complete -c mcpvisor -f -n '__fish_use_subcommand' -a %s -d %s\n", name, fishQuote(commands[name].summary))
	}
	for _, name := range commandOrder {
		for _, f := range flagsOf(name) {
			fmt.Fprintf(w, "complete -c mcpvisor -n '__fish_seen_subcommand_from %s' -o %s\n", name, strings.TrimPrefix(f, "-"))
		}
	}
	fmt.Fprint(w, "complete -c mcpvisor -n '__fish_seen_subcommand_from completion' -f -a 'bash zsh fish'\n")
	fmt.Fprintf(w, "complete -c mcpvisor -n '__fish_seen_subcommand_from help' -f -a %s\n", fishQuote(strings.Join(commandOrder, " ")))
	fmt.Fprint(w, "complete -c mcpvisor -n '__fish_seen_subcommand_from plugins' -f -a lock\n")
	fmt.Fprint(w, "complete -c mcpvisor -n '__fish_seen_subcommand_from policy' -f -a check\n")
	fmt.Fprintf(w, "complete -c mcpvisor -n '__fish_seen_subcommand_from client' -f -a %s\n", fishQuote("install uninstall "+strings.Join(clientNames, " ")))
}

// zshQuote and fishQuote single-quote s for the shell.
func zshQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
func fishQuote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}
