package cli

// The ui command: the web console, logged in (host/consolelogin.go).

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"

	"github.com/mcpvisor/mcpvisor/host"
	"github.com/mcpvisor/mcpvisor/host/config"
)

// uiCmd is `mcpvisor ui [-print]`: a one-time login address for the
// console of the host serving the config, opened in the browser or
// printed.
func uiCmd(args []string, stdio IO) int {
	fs, path := newFlags("ui", stdio)
	printOnly := fs.Bool("print", false, "print the one-time login address instead of opening a browser")
	if !parseNoArgs(fs, args, stdio) {
		return ExitUsage
	}
	// From any folder: the config the user's running hosts serve
	// (userconfig.go).
	paths, code := runningConfigs("ui", *path, fs, false, stdio)
	if paths == nil {
		return code
	}
	*path = paths[0]
	hb, err := config.LoadHost(*path)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor ui: invalid configuration:\n%s\n", err)
		return ExitUsage
	}
	// Only over the control socket, with the local operator credential:
	// the code is worth the credential.
	ts, err := runningHosts(*path, "")
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor ui: %v\n", err)
		return ExitRuntime
	}
	if len(ts) == 0 {
		fmt.Fprintf(stdio.Stderr, "mcpvisor ui: no running host serves %s (start it with `mcpvisor run -config %s`); a host elsewhere opens its console with its token: http://HOST/ui?token=TOKEN\n", absPath(*path), *path)
		return ExitRuntime
	}
	login, err := askConsoleLogin(ts[0])
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor ui: %s: %s\n", ts[0].name, termSafeErr(err))
		return ExitRuntime
	}
	url := "http://" + consoleAddr(cmp.Or(hb.Listen, config.DefaultListen)) + login.Path
	if *printOnly || !startBrowser(url) {
		fmt.Fprintln(stdio.Stdout, url)
		if !*printOnly {
			fmt.Fprintln(stdio.Stderr, "mcpvisor ui: no browser to open; open the address above (it works once, for a few minutes)")
		}
	}
	return ExitOK
}

// askConsoleLogin asks t for a one-time console login code.
func askConsoleLogin(t target) (host.ConsoleLogin, error) {
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
	defer cancel()
	resp, err := t.do(ctx, http.MethodPost, "/control/console-login")
	if err != nil {
		return host.ConsoleLogin{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return host.ConsoleLogin{}, fmt.Errorf("answered %s: %s", resp.Status, termSafe(string(b)))
	}
	var login host.ConsoleLogin
	if err := json.NewDecoder(resp.Body).Decode(&login); err != nil {
		return host.ConsoleLogin{}, fmt.Errorf("unreadable answer: %w", err)
	}
	return login, nil
}

// consoleAddr is listen as a browser on this machine reaches it: an
// unspecified address (":8811", "0.0.0.0:8811") as loopback.
func consoleAddr(listen string) string {
	h, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(h); h == "" || ip != nil && ip.IsUnspecified() {
		h = "127.0.0.1"
	}
	return net.JoinHostPort(h, port)
}

// printConsoleLogin prints the console's address for the host serving
// HTTP at addr (`make run`): on a terminal a one-time login address, which
// opens it logged in; elsewhere (a service's log) the plain address and
// how to log in, since a login code in a log file would be worth the
// operator credential to whoever reads the log.
func printConsoleLogin(w io.Writer, h *host.Host, addr string) {
	if os.Getenv("MCPVISOR_NO_CONSOLE_LINK") != "" {
		return
	}
	base := "http://" + consoleAddr(addr)
	if isTerminal(w) {
		if login, err := h.ConsoleLogin(); err == nil {
			fmt.Fprintf(w, "console: %s%s (works once; `mcpvisor ui` opens another)\n", base, login.Path)
			return
		}
	}
	fmt.Fprintf(w, "console: %s/ui (log in with `mcpvisor ui`, or `mcpvisor ui -print` for a one-time address)\n", base)
}
