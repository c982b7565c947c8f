package config_test

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// required and the audit block decode; a relative audit path is relative
// to the config file, like every other path in it.
func TestRequiredAndAudit(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Parse([]byte(`
host {
  audit {
    path              = "logs/audit.jsonl"
    include_arguments = true
  }
}
server "a" {
  command  = "x"
  required = true
}
server "b" {
  command = "y"
}
`), filepath.Join(dir, "config.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	want := &config.Audit{Path: filepath.Join(dir, "logs", "audit.jsonl"), IncludeArguments: true}
	if diff := cmp.Diff(want, cfg.Host.Audit); diff != "" {
		t.Errorf("audit (-want +got):\n%s", diff)
	}
	if !cfg.Servers[0].Required || cfg.Servers[1].Required {
		t.Errorf("required: a=%v b=%v, want true, false", cfg.Servers[0].Required, cfg.Servers[1].Required)
	}

	// Built in Go, an audit block without a path is an error.
	cfg = &config.Config{Host: config.Host{Audit: &config.Audit{}}}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err == nil {
		t.Error("an empty audit path validated")
	}
}
