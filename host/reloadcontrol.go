package host

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// ReloadReport is what POST /control/reload answers: what the reload
// changed, or why the file was not applied.
type ReloadReport struct {
	// Config is the file that was read.
	Config string `json:"config"`
	// Added, Removed, Restarted and Unchanged name the server blocks the
	// reload started, stopped, replaced and left alone.
	Added     []string `json:"added,omitempty"`
	Removed   []string `json:"removed,omitempty"`
	Restarted []string `json:"restarted,omitempty"`
	Unchanged []string `json:"unchanged,omitempty"`
	// HostChanged is set when the host block changed; it applies after a
	// restart of the process.
	HostChanged bool `json:"host_changed,omitempty"`
	// PoliciesChanged is set when the policy blocks (or stdio_subject)
	// changed; the new ones are in force (docs/auth.md).
	PoliciesChanged bool `json:"policies_changed,omitempty"`
	// DiscoveryChanged is set when the discovery blocks changed which
	// tools tools/list shows; in force (docs/discovery.md).
	DiscoveryChanged bool `json:"discovery_changed,omitempty"`
	// Error says why the file was not applied, or what went wrong while
	// applying it; the servers that were running keep running.
	Error string `json:"error,omitempty"`
}

// errNotFromFile is the refusal of a reload of a host whose configuration
// was built in Go: there is no file to read again.
var errNotFromFile = errors.New("this host's configuration was not loaded from a file; there is nothing to reload")

// ReloadFile reads the host's configuration file again, as `mcpvisor run`
// does on SIGHUP (a server reading an unset variable is held, not fatal),
// and applies it with Reload. An invalid file changes nothing.
func (h *Host) ReloadFile(ctx context.Context) (ReloadResult, error) {
	path := h.Config().Filename
	if path == "" {
		return ReloadResult{}, errNotFromFile
	}
	cfg, err := config.LoadForRun(path)
	if err != nil {
		return ReloadResult{}, err
	}
	return h.Reload(ctx, cfg)
}

// serveReload is POST /control/reload: `mcpvisor add` and `remove` ask the
// hosts serving the file they edited to read it again, through the control
// socket and behind the same ingress checks and token as every control
// action (docs/operations.md). It answers when the reload is done: new
// servers are started, not necessarily ready (GET /status says when).
func (h *Host) serveReload(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), controlTimeout)
	defer cancel()
	res, err := h.ReloadFile(ctx)
	rep := ReloadReport{Config: configPath(h.Config().Filename), Added: res.Added, Removed: res.Removed,
		Restarted: res.Restarted, Unchanged: res.Unchanged, HostChanged: res.HostChanged, PoliciesChanged: res.PoliciesChanged,
		DiscoveryChanged: res.DiscoveryChanged}
	status := http.StatusOK
	if err != nil {
		rep.Error = err.Error()
		// Nothing applied (the file is invalid) is the caller's to fix; an
		// error while applying a valid file is reported with what changed.
		if len(res.Added)+len(res.Removed)+len(res.Restarted)+len(res.Unchanged) == 0 {
			status = http.StatusUnprocessableEntity
		}
		h.logger.Error("reload asked through the control endpoint failed; keeping the running configuration", "error", err.Error())
	} else {
		h.logger.Info("configuration reloaded on request", "added", res.Added, "removed", res.Removed,
			"restarted", res.Restarted, "unchanged", len(res.Unchanged), "policies_changed", res.PoliciesChanged)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(rep)
}
