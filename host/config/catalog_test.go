package config_test

import (
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// TestCatalogBlock checks the server's catalog block: its attributes are
// read, unset ones take their defaults, and a negative bound is refused
// with a message naming the attribute and the server.
func TestCatalogBlock(t *testing.T) {
	cfg, err := config.Parse([]byte(`server "fs" {
  command = "npx"
  catalog {
    max_tools = 50
    max_bytes = 4 * 1024 * 1024
    max_pages = 7
  }
}
`), "config.hcl")
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.Servers[0].Catalog
	if got != (config.Catalog{MaxTools: 50, MaxBytes: 4 << 20, MaxPages: 7}) {
		t.Errorf("Catalog = %+v", got)
	}
	want := config.Catalog{MaxTools: 50, MaxResources: config.DefaultMaxResources,
		MaxPrompts: config.DefaultMaxPrompts, MaxBytes: 4 << 20, MaxPages: 7}
	if d := got.WithDefaults(); d != want {
		t.Errorf("WithDefaults() = %+v, want %+v", d, want)
	}

	_, err = config.Parse([]byte(`server "fs" {
  command = "npx"
  catalog {
    max_prompts = -1
  }
}
`), "config.hcl")
	if err == nil || !strings.Contains(err.Error(), "max_prompts") || !strings.Contains(err.Error(), `"fs"`) {
		t.Errorf("negative max_prompts: err = %v, want a refusal naming max_prompts and the server", err)
	}
}

// TestMetricsBlock checks the host's metrics block, and that a bound of 0
// written in the file is refused rather than taken as the default.
func TestMetricsBlock(t *testing.T) {
	cfg, err := config.Parse([]byte("host {\n  metrics {\n    max_names_per_server = 20\n    max_names = 100\n  }\n}\n"), "config.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Host.Metrics; got != (config.Metrics{MaxNamesPerServer: 20, MaxNames: 100}) {
		t.Errorf("Metrics = %+v", got)
	}
	for _, src := range []string{
		"host {\n  metrics {\n    max_names = 0\n  }\n}\n",
		"server \"fs\" {\n  command = \"npx\"\n  catalog {\n    max_tools = 0\n  }\n}\n",
	} {
		if _, err := config.Parse([]byte(src), "config.hcl"); err == nil || !strings.Contains(err.Error(), "must be 1 or more") {
			t.Errorf("a written 0 is not refused: err = %v\n%s", err, src)
		}
	}
}
