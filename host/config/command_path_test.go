package config_test

import (
	"testing"

	"github.com/mcpvisor/mcpvisor/host/config"
)

func TestCommandPathResolution(t *testing.T) {
	src := []byte(`
server "local" {
  command = "./bin/echo"
}
server "onpath" {
  command = "npx"
}
server "absolute" {
  command = "/usr/bin/env"
}
`)
	cfg, err := config.Parse(src, "/srv/mcp/config.hcl")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"local":    "/srv/mcp/bin/echo", // relative to the config file, not the working directory
		"onpath":   "npx",               // looked up in PATH at spawn time
		"absolute": "/usr/bin/env",
	}
	for _, s := range cfg.Servers {
		if s.Command != want[s.Name] {
			t.Errorf("server %q: command %q, want %q", s.Name, s.Command, want[s.Name])
		}
	}
}
