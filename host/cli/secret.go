package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"

	"github.com/mcpvisor/mcpvisor/host/internal/secrets"
	"github.com/mcpvisor/mcpvisor/host/internal/statedir"
)

// secretUsage is `mcpvisor secret` without a subcommand.
const secretUsage = `Usage: mcpvisor secret set|list|rm [options] [NAME]
Run "mcpvisor help secret" for the options and examples.
`

// secretCmd is `mcpvisor secret set|list|rm` (docs/config.md, "Secrets"):
// the values env("NAME") falls back to. A value is read from a prompt
// without echo or from standard input, never from the command line, where
// it would sit in the shell's history and in every process listing.
func secretCmd(args []string, stdio IO) int {
	if len(args) == 0 || wantsHelp(args[:1]) {
		if len(args) > 0 {
			writeHelp(stdio.Stdout, "secret", nil)
			return ExitOK
		}
		fmt.Fprint(stdio.Stderr, secretUsage)
		return ExitUsage
	}
	sub, args := args[0], args[1:]
	fs, path := newFlags("secret "+sub, stdio)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return ExitUsage
	}
	store, err := openSecrets()
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor secret: %s\n", termSafeErr(err))
		return ExitRuntime
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stdio.Stderr, "mcpvisor secret %s: "+format+"\n", append([]any{sub}, a...)...)
		return code
	}
	switch sub {
	case "list", "ls":
		if len(pos) != 0 {
			return fail(ExitUsage, "takes no arguments (it lists names, never values)")
		}
		names, err := store.Names()
		if err != nil {
			return fail(ExitRuntime, "%s", termSafeErr(err))
		}
		fmt.Fprintf(stdio.Stderr, "secrets in %s:\n", store.Backend())
		for _, n := range names {
			fmt.Fprintln(stdio.Stdout, n)
		}
		return ExitOK
	case "set", "rm", "remove", "delete":
	default:
		hint := ""
		if s := suggest(sub, []string{"set", "list", "rm"}); s != "" {
			hint = fmt.Sprintf("; did you mean %q?", s)
		}
		fmt.Fprintf(stdio.Stderr, "mcpvisor secret: unknown subcommand %q%s (it is set, list or rm)\n\n%s", termSafe(sub), hint, secretUsage)
		return ExitUsage
	}
	if len(pos) != 1 {
		return fail(ExitUsage, "want one secret NAME, got %d argument(s)", len(pos))
	}
	name, value, hasValue := strings.Cut(pos[0], "=")
	if !secrets.NameRE.MatchString(name) {
		return fail(ExitUsage, "secret name %q: use letters, digits and _, not starting with a digit (it is what env(%q) reads)", termSafe(name), termSafe(name))
	}
	if sub != "set" {
		removed, err := store.Delete(name)
		if err != nil {
			return fail(ExitRuntime, "%s", termSafeErr(err))
		}
		if !removed {
			return fail(ExitRuntime, "no secret %s in %s; `mcpvisor secret list` lists them", name, store.Backend())
		}
		fmt.Fprintf(stdio.Stdout, "removed secret %s from %s\n", name, store.Backend())
		return reloadForSecret(*path, stdio)
	}
	if hasValue {
		_ = value // never echoed
		return fail(ExitUsage, "the value of %s is not taken from the command line, where it would stay in the shell's history and show in process listings;\n"+
			"run `mcpvisor secret set %s` and type it at the prompt, or pipe it in: printf %%s \"$VALUE\" | mcpvisor secret set %s", name, name, name)
	}
	value, err = readSecret(name, stdio)
	if err != nil {
		return fail(ExitRuntime, "%s", termSafeErr(err))
	}
	if err := store.Set(name, value); err != nil {
		return fail(ExitRuntime, "%s", termSafeErr(err))
	}
	fmt.Fprintf(stdio.Stdout, "stored secret %s in %s; env(%q) reads it where %s is not in mcpvisor's environment\n", name, store.Backend(), name, name)
	return reloadForSecret(*path, stdio)
}

// openSecrets opens the user's secret store.
func openSecrets() (*secrets.Store, error) {
	dir, err := statedir.Dir()
	if err != nil {
		return nil, fmt.Errorf("finding the secret store: %w", err)
	}
	return secrets.Open(dir), nil
}

// readSecret reads a value: at a prompt without echo when standard input
// is a terminal, else all of standard input less one trailing newline.
func readSecret(name string, stdio IO) (string, error) {
	if f, ok := stdio.Stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintf(stdio.Stderr, "value of %s (not shown): ", name)
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(stdio.Stderr)
		if err != nil {
			return "", fmt.Errorf("reading the value: %w", err)
		}
		if len(b) == 0 {
			return "", errors.New("no value typed; nothing stored")
		}
		return string(b), nil
	}
	if stdio.Stdin == nil {
		return "", errors.New("no value on standard input; pipe it in: printf %s \"$VALUE\" | mcpvisor secret set NAME")
	}
	b, err := io.ReadAll(io.LimitReader(bufio.NewReader(stdio.Stdin), 64<<10+2))
	if err != nil {
		return "", fmt.Errorf("reading the value from standard input: %w", err)
	}
	v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if v == "" {
		return "", errors.New("standard input was empty; nothing stored (pipe the value in: printf %s \"$VALUE\" | mcpvisor secret set NAME)")
	}
	return v, nil
}

// reloadForSecret asks the running hosts of the config at path, if any, to
// reload it, so that a server held in needs_config for the secret starts.
// Without a config file there, or without a running host, it says nothing
// more: the next start reads the store.
func reloadForSecret(path string, stdio IO) int {
	if _, err := os.Stat(path); err != nil {
		return ExitOK
	}
	return reloadHosts(path, "", false, stdio)
}
