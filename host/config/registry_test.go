package config_test

import (
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// TestRegistryBlock checks the host's registry block (docs/config.md,
// "registry"): a base URL is kept, anything but an http(s) base URL is
// refused at its line, and without the block the URL is empty (the
// official registry).
func TestRegistryBlock(t *testing.T) {
	cfg, err := config.Parse([]byte("host {\n  registry {\n    url = \"http://127.0.0.1:8080\"\n  }\n}\n"), "config.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Host.Registry; got != (config.Registry{URL: "http://127.0.0.1:8080"}) {
		t.Errorf("Registry = %+v", got)
	}
	if cfg, err := config.Parse([]byte("host {}\n"), "config.hcl"); err != nil || cfg.Host.Registry.URL != "" {
		t.Errorf("without the block: %+v, %v", cfg.Host.Registry, err)
	}
	for _, bad := range []string{"", "registry.modelcontextprotocol.io", "ftp://registry.example", "https://registry.example/?q=1", "https://user:pw@registry.example"} {
		src := "host {\n  registry {\n    url = \"" + bad + "\"\n  }\n}\n"
		_, err := config.Parse([]byte(src), "config.hcl")
		if err == nil || !strings.Contains(err.Error(), "Invalid registry URL") || !strings.Contains(err.Error(), "line 3") {
			t.Errorf("url = %q: err = %v, want Invalid registry URL at line 3", bad, err)
		}
	}
}
