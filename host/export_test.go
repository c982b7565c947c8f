package host

import "github.com/mcpvisor/mcpvisor/host/internal/registry"

// Forwarded is how many tools/call requests h's gateway forwarded as
// bytes, skipping the go-sdk server.
func Forwarded(h *Host) uint64 { return h.gateway.Forwarded() }

// Collisions are h's current name collisions.
func Collisions(h *Host) []registry.Collision { return h.registry.Collisions() }
