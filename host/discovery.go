package host

// Tool search (docs/discovery.md, docs/design.md §21): the discovery
// settings in force, swapped whole on reload like the policies, and the
// gateway's tool index, built the first time a configuration turns search
// mode on.

import (
	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/discovery"
)

// setDiscovery puts cfg's discovery settings in force and reports whether
// they list other tools than the ones in force before.
func (h *Host) setDiscovery(cfg *config.Config) bool {
	next := discovery.New(cfg)
	if next != nil {
		if err := h.gateway.EnableSearch(); err != nil {
			h.logger.Error("tool search unavailable; tools/list shows the meta-tools, which say so", "error", err)
		}
	}
	old := h.discovery.Swap(next)
	return !old.Same(next)
}

// discoverySettings is the discovery settings in force (nil: every tool
// listed).
func (h *Host) discoverySettings() *discovery.Settings { return h.discovery.Load() }
