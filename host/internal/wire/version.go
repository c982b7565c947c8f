package wire

// The MCP protocol versions mcpvisor knows, named once. Versions are
// dates, so they order as strings: "v >= Stateless" is how every
// comparison in the host is written.
const (
	Version20250326 = "2025-03-26"
	Version20250618 = "2025-06-18"
	Version20251125 = "2025-11-25"
	Version20260728 = "2026-07-28"

	// Stateless is the first protocol version without sessions
	// (SEP-2575): requests carry version, identity and capabilities in
	// _meta, and server-to-client requests travel as input_required
	// results.
	Stateless = Version20260728

	// DefaultUpstream is the version requested from upstreams whose
	// block sets no protocol_version: the newest that still lets an
	// upstream send sampling, elicitation and roots requests in the
	// middle of a call.
	DefaultUpstream = Version20251125
)

// ProtocolVersions returns the versions above, oldest first (a fresh
// slice each call).
func ProtocolVersions() []string {
	return []string{Version20250326, Version20250618, Version20251125, Version20260728}
}
