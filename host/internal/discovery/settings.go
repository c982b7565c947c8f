package discovery

import (
	"path"
	"slices"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// Names of the meta-tools tools/list shows in search mode.
const (
	SearchToolName = "mcpvisor__search_tools"
	CallToolName   = "mcpvisor__call_tool"
)

// Settings are the configuration's discovery blocks, compiled: which
// servers' tools are found by search, and which tools stay listed anyway.
type Settings struct {
	hostPins []string          // globs over exposed names
	servers  map[string]server // by server block
	search   bool              // whether any server is in search mode
}

type server struct {
	search bool
	pins   []string // globs over the upstream's tool names
}

// New compiles cfg's discovery blocks. It returns nil when no server's
// tools are found by search: tools/list lists every tool, as without the
// feature.
func New(cfg *config.Config) *Settings {
	s := &Settings{hostPins: cfg.Host.Discovery.Pin, servers: map[string]server{}}
	hostSearch := cfg.Host.Discovery.Mode == config.DiscoverySearch
	for _, srv := range cfg.Servers {
		mode := srv.Discovery.Mode
		on := hostSearch
		if mode != "" {
			on = mode == config.DiscoverySearch
		}
		s.servers[srv.Name] = server{search: on, pins: srv.Discovery.Pin}
		s.search = s.search || on
	}
	if !s.search {
		return nil
	}
	return s
}

// Listed reports whether tools/list shows the tool of server (exposed
// under exposed, named original upstream): its server lists its tools, or
// a pin names it.
func (s *Settings) Listed(srv, exposed, original string) bool {
	if s == nil {
		return true
	}
	c, ok := s.servers[srv]
	if !ok || !c.search {
		return true
	}
	return matchAny(s.hostPins, exposed) || matchAny(c.pins, original)
}

// Same reports whether s and o list the same tools.
func (s *Settings) Same(o *Settings) bool {
	if s == nil || o == nil {
		return s == o
	}
	if !slices.Equal(s.hostPins, o.hostPins) || len(s.servers) != len(o.servers) {
		return false
	}
	for name, c := range s.servers {
		d, ok := o.servers[name]
		if !ok || c.search != d.search || !slices.Equal(c.pins, d.pins) {
			return false
		}
	}
	return true
}

func matchAny(globs []string, name string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}
