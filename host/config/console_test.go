package config_test

import (
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// TestConsoleBlock checks the host's console block, and that a bound of 0
// or past MaxConsoleRecentCalls written in the file is refused.
func TestConsoleBlock(t *testing.T) {
	cfg, err := config.Parse([]byte("host {\n  console {\n    max_streams = 4\n    recent_calls = 200\n  }\n}\n"), "config.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Host.Console; got != (config.Console{MaxStreams: 4, RecentCalls: 200}) {
		t.Errorf("Console = %+v", got)
	}
	for src, want := range map[string]string{
		"host {\n  console {\n    max_streams = 0\n  }\n}\n":       "max_streams in the host block's console block is 0; it must be 1 or more",
		"host {\n  console {\n    recent_calls = -1\n  }\n}\n":     "recent_calls in the host block's console block is -1; it must be 1 to 1000",
		"host {\n  console {\n    recent_calls = 100000\n  }\n}\n": "recent_calls in the host block's console block is 100000; it must be 1 to 1000",
	} {
		if _, err := config.Parse([]byte(src), "config.hcl"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q\n%s", err, want, src)
		}
	}
}
