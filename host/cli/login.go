package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/mcpvisor/mcpvisor/host"
)

// loginTimeout bounds how long `login` waits for the user to finish in the
// browser.
const loginTimeout = 10 * time.Minute

func loginCmd(args []string, stdio IO) int {
	fs, path := newFlags("login", stdio)
	noBrowser := fs.Bool("no-browser", false, "only print the URL; do not start a browser")
	name, ok := parseOneArg(fs, args, stdio, commands["login"].synopsis)
	if !ok {
		return ExitUsage
	}
	cfg, ok := loadConfig(*path, stdio)
	if !ok {
		return ExitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, loginTimeout)
	defer cancel()

	open := func(_ context.Context, authURL string) error {
		fmt.Fprintf(stdio.Stderr, "Open this URL in a browser to log in to %q:\n\n  %s\n\n", name, termSafe(authURL))
		if !*noBrowser && startBrowser(authURL) {
			fmt.Fprintln(stdio.Stderr, "(a browser was started)")
		}
		fmt.Fprintln(stdio.Stderr, "Waiting for the authorization server's redirect. If the browser runs on another machine, paste the address it ended at (or the code) here and press Enter.")
		return nil
	}
	file, err := host.Login(ctx, cfg, name, host.LoginOptions{Open: open, Paste: stdio.Stdin})
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor login: %s\n", termSafeErr(err))
		return ExitRuntime
	}
	fmt.Fprintf(stdio.Stdout, "logged in to %q; tokens stored in %s (a running host picks them up within seconds)\n", name, file)
	return ExitOK
}

func logoutCmd(args []string, stdio IO) int {
	fs, path := newFlags("logout", stdio)
	name, ok := parseOneArg(fs, args, stdio, commands["logout"].synopsis)
	if !ok {
		return ExitUsage
	}
	cfg, ok := loadConfig(*path, stdio)
	if !ok {
		return ExitUsage
	}
	file, existed, err := host.Logout(cfg, name, "")
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor logout: %s\n", termSafeErr(err))
		return ExitRuntime
	}
	if !existed {
		fmt.Fprintf(stdio.Stdout, "no tokens stored for %q (%s)\n", name, file)
		return ExitOK
	}
	fmt.Fprintf(stdio.Stdout, "logged out of %q; removed %s\n", name, file)
	return ExitOK
}

// startBrowser opens url in the user's browser when there is one to open.
func startBrowser(url string) bool {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", url)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", url)
	default:
		if os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "" {
			return false
		}
		cmd = exec.Command("xdg-open", url)
	}
	if err := cmd.Start(); err != nil {
		return false
	}
	go cmd.Wait()
	return true
}
