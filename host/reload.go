package host

// Reloading a running host: Reload, Restart and the diff between two
// configurations (docs/design.md §2).

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/hashicorp/hcl/v2"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/upstream"
)

// ReloadResult says what a Reload changed.
type ReloadResult struct {
	Added, Removed, Restarted, Unchanged []string
	// HostChanged is set when the host block changed; its settings
	// (listen, auth, logging) apply only after a restart. stdio_subject
	// is not among them: it goes with the policies.
	HostChanged bool
	// PoliciesChanged is set when the policy blocks (or stdio_subject)
	// changed; the new ones are in force when Reload returns, and every
	// client is told its lists changed.
	PoliciesChanged bool
	// DiscoveryChanged is set when the discovery blocks changed which
	// tools tools/list shows (docs/discovery.md); in force when Reload
	// returns, and every client is told its tool list changed. A server
	// whose block changed only there keeps running.
	DiscoveryChanged bool
}

// Reload applies a new configuration, touching only the server blocks that
// changed: new blocks start, removed ones stop (their tools deregistered),
// changed ones restart, and unchanged ones keep running untouched, with
// their sessions. A changed server's new process starts and becomes ready
// before the old one stops; the old one finishes its calls in flight (up
// to ctx), so calls never meet a gap. Naming and filters are re-applied to
// all, and the policy blocks (with the host block's stdio_subject) are put
// in force, without restarting anything. The rest of the host block is
// not reloaded.
// A plugin block whose lock file entry changed (after `mcpvisor plugins
// lock`) counts as changed; an unchanged one whose binary no longer has
// the required hash keeps running the process that was checked when it
// started, with a warning that its next start will be refused.
func (h *Host) Reload(ctx context.Context, cfg *config.Config) (ReloadResult, error) {
	if err := cfg.Validate(); err != nil {
		return ReloadResult{}, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ReloadResult{}, errors.New("host: Reload after Close")
	}
	return h.reload(ctx, cfg, "", "restarted by reload")
}

// Restart replaces the named server with a fresh process (or connection)
// and a fresh retry budget, whatever its state: the new one starts and gets
// ready beside the old one, which finishes its calls in flight and stops
// (calls that still meet it are told "restarted by request"). It returns
// when the swap is done or ctx ends: nil when the new one is ready, or the
// error of its first connect attempt (it then goes on as any server whose
// attempt failed: reconnecting, or parked). An unknown name is an error
// wrapping ErrUnknownServer.
func (h *Host) Restart(ctx context.Context, name string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return errors.New("host: Restart after Close")
	}
	if _, err := h.sup(name); err != nil {
		return err
	}
	_, err := h.reload(ctx, h.servers.Load().cfg, name, "restarted by request")
	return err
}

// reload swaps in cfg's servers (see Reload); the server named restart is
// replaced even when its block is unchanged. Servers that stay and are
// parked are revived: a reload is a person saying "try again". h.mu must
// be held.
func (h *Host) reload(ctx context.Context, cfg *config.Config, restart, reason string) (ReloadResult, error) {
	var res ReloadResult
	old := h.servers.Load()
	oldHost, newHost := old.cfg.Host, cfg.Host
	oldHost.StdioSubject, newHost.StdioSubject = "", ""
	oldHost.Discovery, newHost.Discovery = config.Discovery{}, config.Discovery{}
	res.HostChanged = !reflect.DeepEqual(oldHost, newHost)

	next := &serverSet{cfg: cfg, sups: map[string]*upstream.Supervisor{}}
	var toStart []*upstream.Supervisor
	oldBlocks := map[string]*config.Server{}
	for _, srv := range enabledServers(old.cfg) {
		oldBlocks[srv.Name] = srv
	}
	for _, srv := range enabledServers(cfg) {
		next.order = append(next.order, srv.Name)
		if prev, ok := oldBlocks[srv.Name]; ok && sameServer(prev, srv) && srv.Name != restart {
			next.sups[srv.Name] = old.sups[srv.Name]
			res.Unchanged = append(res.Unchanged, srv.Name)
			h.warnChangedPlugin(srv)
			continue
		}
		sup, err := h.newSupervisor(srv)
		if err != nil {
			return ReloadResult{}, err
		}
		next.sups[srv.Name] = sup
		toStart = append(toStart, sup)
		if _, ok := oldBlocks[srv.Name]; ok {
			res.Restarted = append(res.Restarted, srv.Name)
		} else {
			res.Added = append(res.Added, srv.Name)
		}
	}
	for _, name := range old.order {
		if _, ok := next.sups[name]; !ok {
			res.Removed = append(res.Removed, name)
		}
	}

	// A changed server's new process starts beside the old one, which
	// keeps serving until the new one is ready (or ctx ends): calls never
	// meet a gap. Then the new set takes over, the new servers' catalogs
	// are published, and the old processes finish their calls in flight
	// and stop.
	h.rootsMu.Lock()
	for _, sup := range toStart {
		sup.SetRoots(h.roots)
	}
	h.rootsMu.Unlock()
	// startErr is the first attempt's error of the server named restart.
	var startErr error
	if h.started {
		first := map[string]<-chan error{}
		for _, sup := range toStart {
			first[sup.Name()] = sup.Start()
		}
		for _, name := range res.Restarted {
			select {
			case err := <-first[name]:
				if err != nil && name == restart {
					startErr = err
				}
			case <-ctx.Done():
				h.logger.Warn("reload: restarted server not ready in time; switching to it anyway", "server", name)
				if name == restart {
					startErr = fmt.Errorf("server %q: restarted, but its first attempt had no outcome yet (see `mcpvisor status`): %w", name, ctx.Err())
				}
			}
		}
	}
	for _, name := range res.Removed {
		h.registry.Update(name, nil)
	}
	h.registry.SetSpecs(specsOf(cfg))
	h.servers.Store(next)
	h.setShares(cfg)
	for _, sup := range toStart {
		h.registry.Update(sup.Name(), sup.Catalog())
	}
	for _, name := range res.Unchanged {
		if next.sups[name].Status().State == upstream.StateParked {
			next.sups[name].Revive()
		}
	}
	// The policies change with the servers; the servers' processes do not
	// care. Clients see what they may use now on their next list.
	if res.PoliciesChanged = h.setPolicies(cfg); res.PoliciesChanged {
		h.logger.Info("reload: policies changed", "policies", len(cfg.Policies))
		h.registry.Republish()
	}
	if res.DiscoveryChanged = h.setDiscovery(cfg); res.DiscoveryChanged {
		h.logger.Info("reload: discovery changed")
		h.registry.Republish()
	}
	err := retire(ctx, old.sups, res.Restarted, reason)
	err = errors.Join(startErr, err, retire(ctx, old.sups, res.Removed, "removed by reload"))
	for _, name := range res.Removed {
		h.stderrLogs.remove(name) // ends its followers (logs.go)
	}
	return res, err
}

// warnChangedPlugin warns when the plugin binary of a server that keeps
// running no longer has the hash its block requires: the running process
// was checked when it started, but its next start (a respawn) will be
// refused until the binary is relocked.
func (h *Host) warnChangedPlugin(srv *config.Server) {
	p := srv.Plugin
	if p == nil {
		return
	}
	want := p.WantSHA256()
	if want == "" {
		return
	}
	path, err := p.Binary()
	if err != nil {
		return
	}
	if got, err := config.FileSHA256(path); err == nil && got != want {
		h.logger.Warn("reload: plugin binary changed on disk; the running plugin keeps running, but its next start will be refused until the binary is locked with `mcpvisor plugins lock`",
			"server", srv.Name, "path", path, "sha256", got, "want", want, "command", p.LockCommand())
	}
}

// sameServer reports whether two server blocks describe the same server
// (where in the file they are does not matter).
func sameServer(a, b *config.Server) bool {
	x, y := *a, *b
	x.DeclRange, y.DeclRange = hcl.Range{}, hcl.Range{}
	// Which tools tools/list shows is the gateway's business, not the
	// server's (setDiscovery).
	x.Discovery, y.Discovery = config.Discovery{}, config.Discovery{}
	return reflect.DeepEqual(x, y)
}
