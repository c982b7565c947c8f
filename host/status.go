package host

import (
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/status"
)

// ServerStatus is one server's status (Host.Status, GET /status, the
// WithStatusHandler callback). It is defined in package status, shared with
// the supervisor that fills it.
type ServerStatus = status.Server

// Client is a connected downstream client (Host.Clients, GET /status).
type Client = status.Client

// Clients lists the connected downstream clients (HTTP sessions and stdio),
// oldest first, with what each said it is in initialize.
func (h *Host) Clients() []Client { return h.gateway.Clients() }

// HTTPURL is the streamable HTTP endpoint this host serves, as a client on
// this machine reaches it ("http://127.0.0.1:8811/mcp"); "" before Serve
// has a TCP listener.
func (h *Host) HTTPURL() string {
	if u := h.httpURL.Load(); u != nil {
		return *u
	}
	return ""
}

// State is a server's lifecycle state (ServerStatus.State).
type State = status.State

// The states of ServerStatus.State.
const (
	StateStarting     = status.Starting
	StateReady        = status.Ready
	StateReconnecting = status.Reconnecting
	StateParked       = status.Parked
	StateStopped      = status.Stopped
	StateNeedsLogin   = status.NeedsLogin
	StateNeedsConfig  = status.NeedsConfig
	// StateIdle is a stdio server stopped after its idle_timeout without
	// a call: its tools stay listed and the next call starts it.
	StateIdle = status.Idle
	// StateSuspect is a ready server whose calls are timing out with no
	// answer: ready again at its next answer, or replaced as unresponsive.
	StateSuspect = status.Suspect
	// StateDisabled is the state Status gives a server block with
	// enabled = false: validated, never started.
	StateDisabled = status.Disabled
)

// serverStatus completes the status a supervisor reports with what the
// host knows: the exposed tools, the catalog flag and the call counts.
func (h *Host) serverStatus(st ServerStatus) ServerStatus {
	st.CatalogTruncated = st.CatalogTruncatedReason != ""
	if h.registry != nil {
		for _, t := range h.registry.Tools() {
			if t.Server == st.Name {
				st.ExposedTools++
			}
		}
	}
	if h.telemetry != nil && !h.opts.noMetrics {
		cs := h.telemetry.Stats(st.Name)
		st.Calls, st.Errors, st.LastCallError, st.LastCallErrorAt = cs.Calls, cs.Errors, cs.LastError, cs.LastErrorAt
	}
	return st
}

// Tool is one exposed tool.
type Tool struct {
	// Tool is the upstream's tool definition under its exposed Name.
	Tool *mcp.Tool
	// Server is the server block that offers it.
	Server string
	// Original is the tool's name on that server.
	Original string
}
