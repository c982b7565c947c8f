// Package statedir finds the user's state directory for mcpvisor: where
// `mcpvisor login` keeps its tokens and `mcpvisor secret set` its file
// store (docs/oauth.md, docs/config.md "Secrets").
package statedir

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

// Env names the variable that, when set to an absolute path, is the base
// of the state directory (the XDG Base Directory variable for state data).
const Env = "XDG_STATE_HOME"

// Dir is $XDG_STATE_HOME/mcpvisor, else the user's state directory
// (~/.local/state/mcpvisor on Linux and other Unix systems,
// ~/Library/Application Support/mcpvisor on macOS, %LocalAppData%\mcpvisor
// on Windows).
func Dir() (string, error) {
	if d := os.Getenv(Env); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "mcpvisor"), nil
	}
	switch runtime.GOOS {
	case "windows", "darwin":
		// os.UserConfigDir is %AppData% and ~/Library/Application Support;
		// on Windows the cache dir is %LocalAppData%, the non-roaming one.
		base, err := os.UserCacheDir()
		if runtime.GOOS == "darwin" {
			base, err = os.UserConfigDir()
		}
		if err != nil {
			return "", err
		}
		return filepath.Join(base, "mcpvisor"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("set %s or HOME: %w", Env, err)
	}
	return filepath.Join(home, ".local", "state", "mcpvisor"), nil
}
