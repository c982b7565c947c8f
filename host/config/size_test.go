package config_test

import (
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/host/config"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"16MiB": 16 << 20, "512 KiB": 512 << 10, "1gib": 1 << 30, "1048576": 1 << 20, "100B": 100,
	} {
		got, err := config.ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "16MB", "-1", "1.5MiB", "MiB", "99999999999GiB"} {
		if _, err := config.ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) succeeded", in)
		}
	}
}

func TestSizeSettings(t *testing.T) {
	cfg, err := config.Parse([]byte(`
host { max_inflight_bytes = "64MiB" }
server "a" {
  url = "http://127.0.0.1:1/mcp"
  max_message_size = 1048576
}
server "b" { command = "true" }
`), "t.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host.MaxInflightBytes != 64<<20 || cfg.Servers[0].MaxMessageSize != 1<<20 || cfg.Servers[1].MaxMessageSize != config.DefaultMaxMessageSize {
		t.Fatalf("inflight %d, sizes %d %d", cfg.Host.MaxInflightBytes, cfg.Servers[0].MaxMessageSize, cfg.Servers[1].MaxMessageSize)
	}
	for src, want := range map[string]string{
		`server "a" {
  command = "true"
  max_message_size = "16MB"
}`: "not a size",
		`server "a" {
  command = "true"
  max_message_size = 0
}`: "must be between 64KiB and 1GiB",
		`host { max_inflight_bytes = "8MiB" }
server "a" { command = "true" }`: "more than max_inflight_bytes",
	} {
		_, err := config.Parse([]byte(src), "t.hcl")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s): %v; want an error saying %q", src, err, want)
		}
	}
}
