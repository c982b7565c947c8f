package cli

/*
Design note: which config a command uses (docs/config.md, "Which file").

Without -config a command reads ./config.hcl when the folder has one, and
otherwise the user's own, $XDG_CONFIG_HOME/mcpvisor/config.hcl (default
~/.config/mcpvisor/config.hcl; %AppData%\mcpvisor\config.hcl on Windows),
which the first `add` creates, its folder private (0700).

The commands that talk to running hosts (status, tools, call, logs, revive,
restart, ui) go one step further when -config is not given and the folder has
no config.hcl: the user's hosts are found through their control sockets
(instances.go), whichever config they serve, so a command works from any
folder while `mcpvisor run` serves a project's config.hcl elsewhere. One
config served: that one, said on stderr. Several: the user's own config
when it is among them; otherwise `status` shows them all and the others
refuse, listing them and how to pick one (-config). None: the user's
config, as above.
*/

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/mcpvisor/mcpvisor/host"
)

// userConfigPath is the user's own config file: $XDG_CONFIG_HOME (when
// absolute, as the XDG spec asks), else ~/.config, else on Windows
// %AppData%, then mcpvisor/config.hcl. "" when there is no home.
func userConfigPath() string {
	dir := os.Getenv("XDG_CONFIG_HOME")
	if !filepath.IsAbs(dir) {
		dir = ""
	}
	if dir == "" && runtime.GOOS == "windows" {
		dir, _ = os.UserConfigDir()
	}
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil || home == "" {
			return ""
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "mcpvisor", defaultConfigFile)
}

// defaultConfigPath is the file a command reads without -config:
// ./config.hcl when the folder has one, else the user's (userConfigPath).
func defaultConfigPath() string {
	if _, err := os.Lstat(defaultConfigFile); err == nil {
		return defaultConfigFile
	}
	return cmp.Or(userConfigPath(), defaultConfigFile)
}

// isUserConfig reports whether path is the user's own config file.
func isUserConfig(path string) bool {
	u := userConfigPath()
	return u != "" && absPath(path) == absPath(u)
}

// missingConfig is the error of a command whose config file is missing,
// saying where it looked and how to make one.
func missingConfig(path string) string {
	if isUserConfig(path) {
		return fmt.Sprintf("no %s in this folder and no user config at %s: create it with `mcpvisor add NAME -- COMMAND [ARGS…]` (or `mcpvisor add NAME URL`), or pass -config FILE", defaultConfigFile, path)
	}
	return fmt.Sprintf("no file at %s: pass -config FILE, or create it with `mcpvisor add -config %s NAME -- COMMAND [ARGS…]`", path, path)
}

// userConfigMissing reports whether path is the user's config and there
// is no file there yet.
func userConfigMissing(path string) bool {
	if !isUserConfig(path) {
		return false
	}
	_, err := os.Stat(path)
	return errors.Is(err, fs.ErrNotExist)
}

// configGiven reports whether -config was on the command line.
func configGiven(fs *flag.FlagSet) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "config" })
	return given
}

// makeUserConfigDir creates the folder of the user's config, private
// (0700), when path is that config and the folder is missing; `add`
// calls it before writing the file.
func makeUserConfigDir(path string, stdio IO) error {
	if !isUserConfig(path) {
		return nil
	}
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cannot create the folder of your config, %s: %v", dir, plainErr(err))
	}
	fmt.Fprintf(stdio.Stderr, "no %s in this folder: creating your user config, %s\n", defaultConfigFile, path)
	return nil
}

// servedConfig is a config that running hosts of this user serve.
type servedConfig struct {
	path string   // absolute, as its hosts report it
	pids []string // their names ("pid 1234")
}

// servedConfigs asks every running host of this user which config it
// serves, through the control sockets: one GET /status per config key.
// A host that does not answer is left out.
func servedConfigs() ([]servedConfig, error) {
	ts, err := runningHostsOf("*", "")
	if err != nil {
		return nil, err
	}
	byKey := map[string]*servedConfig{}
	var out []*servedConfig
	for _, t := range ts {
		if sc, ok := byKey[t.key]; ok {
			sc.pids = append(sc.pids, t.name)
			continue
		}
		path := reportedConfig(t)
		if path == "" {
			continue
		}
		sc := &servedConfig{path: path, pids: []string{t.name}}
		byKey[t.key] = sc
		out = append(out, sc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	res := make([]servedConfig, len(out))
	for i, sc := range out {
		res[i] = *sc
	}
	return res, nil
}

// reportedConfig is the config file the host t serves, "" when it does
// not answer or say.
func reportedConfig(t target) string {
	doc, _ := statusReport(t)
	return doc.Config
}

// statusReport is GET /status of the host t, decoded; false when it does
// not answer with one.
func statusReport(t target) (host.StatusReport, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var doc host.StatusReport
	resp, err := t.do(ctx, http.MethodGet, "/status")
	if err != nil {
		return doc, false
	}
	defer resp.Body.Close()
	ok := resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&doc) == nil
	return doc, ok
}

// runningConfigs resolves the config files a command that talks to
// running hosts uses; see the design note above. all allows several
// (status). It returns nil and an exit code when the choice is the
// user's to make.
func runningConfigs(cmd, path string, flags *flag.FlagSet, all bool, stdio IO) ([]string, int) {
	if configGiven(flags) || path == defaultConfigFile {
		return []string{path}, ExitOK
	}
	served, err := servedConfigs()
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor %s: %v\n", cmd, err)
		return nil, ExitRuntime
	}
	list := func(except string) string {
		var b strings.Builder
		for _, sc := range served {
			if sc.path == except {
				continue
			}
			fmt.Fprintf(&b, "  %s (%s)\n", termSafe(sc.path), strings.Join(sc.pids, ", "))
		}
		return b.String()
	}
	switch {
	case len(served) == 0:
		return []string{path}, ExitOK
	case len(served) == 1:
		// tools and call name the host they use themselves (runningHost).
		if !isUserConfig(served[0].path) && cmd != "tools" && cmd != "call" {
			fmt.Fprintf(stdio.Stderr, "mcpvisor %s: no %s in this folder; using the running host of %s (%s)\n", cmd, defaultConfigFile, termSafe(served[0].path), strings.Join(served[0].pids, ", "))
		}
		return []string{served[0].path}, ExitOK
	}
	for _, sc := range served {
		if isUserConfig(sc.path) {
			fmt.Fprintf(stdio.Stderr, "mcpvisor %s: no %s in this folder; using your user config %s. Hosts of other configs run too (pick one with -config FILE):\n%s", cmd, defaultConfigFile, termSafe(sc.path), list(sc.path))
			return []string{sc.path}, ExitOK
		}
	}
	if all {
		fmt.Fprintf(stdio.Stderr, "mcpvisor %s: no %s in this folder; showing the hosts of every config of yours that runs (pick one with -config FILE):\n%s", cmd, defaultConfigFile, list(""))
		paths := make([]string, len(served))
		for i, sc := range served {
			paths[i] = sc.path
		}
		return paths, ExitOK
	}
	fmt.Fprintf(stdio.Stderr, "mcpvisor %s: no %s in this folder, and hosts of %d configs of yours run:\n%spick one with -config FILE, or run the command in that config's folder\n", cmd, defaultConfigFile, len(served), list(""))
	return nil, ExitUsage
}
