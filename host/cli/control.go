package cli

// The revive and restart commands.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/mcpvisor/mcpvisor/host"
)

// controlCmd is `revive NAME` and `restart NAME`: the action on every
// running host serving the config.
func controlCmd(action string, args []string, stdio IO) int {
	fs, path, addr, token := newControlFlags(action, stdio)
	name, ok := parseOneArg(fs, args, stdio, commands[action].synopsis)
	if !ok {
		return ExitUsage
	}
	if *addr == "" {
		paths, code := runningConfigs(action, *path, fs, false, stdio)
		if paths == nil {
			return code
		}
		*path = paths[0]
	}
	ts, code := findTargets(action, *path, *addr, *token, fs, stdio)
	if ts == nil {
		return code
	}
	code = ExitOK
	for _, t := range ts {
		ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
		resp, err := t.do(ctx, http.MethodPost, "/control/"+action+"?server="+url.QueryEscape(name))
		if err != nil {
			cancel()
			fmt.Fprintf(stdio.Stderr, "mcpvisor %s: no host answering at %s: %v (is `mcpvisor run` running with this config?)\n", action, t.name, err)
			code = ExitRuntime
			continue
		}
		var res host.ControlResult
		derr := json.NewDecoder(resp.Body).Decode(&res)
		resp.Body.Close()
		cancel()
		switch {
		case resp.StatusCode == http.StatusUnauthorized:
			fmt.Fprintf(stdio.Stderr, "mcpvisor %s: %s answered %s%s\n", action, t.name, termSafe(resp.Status), authHint(resp.StatusCode))
			code = ExitRuntime
		case derr != nil:
			fmt.Fprintf(stdio.Stderr, "mcpvisor %s: unreadable answer from %s (%s): %s\n", action, t.name, termSafe(resp.Status), termSafeErr(derr))
			code = ExitRuntime
		case res.Error != "":
			fmt.Fprintf(stdio.Stderr, "mcpvisor %s: %s: %s\n", action, t.name, termSafe(res.Error))
			code = ExitRuntime
		default:
			st := res.Server
			fmt.Fprintf(stdio.Stdout, "%s: %s %s: %s (generation %d)\n", t.name, termSafe(name), pastTense(action), termSafe(st.State), st.Generation)
		}
	}
	return code
}

func pastTense(action string) string {
	if action == "revive" {
		return "revived"
	}
	return "restarted"
}
