package config_test

import (
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// The downstream request bounds of the host block: sizes with a unit or in
// bytes, and unset attributes left zero (the host applies the defaults).
func TestDownstreamRequestBounds(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want config.Host
	}{
		{`body_timeout = "5s"`, config.Host{BodyTimeout: 5 * time.Second}},
		{`max_body_bytes_inflight = "64MiB"`, config.Host{MaxBodyBytesInflight: 64 << 20}},
		{`max_body_bytes_inflight = "2 GiB"`, config.Host{MaxBodyBytesInflight: 2 << 30}},
		{`max_body_bytes_inflight = "512KiB"`, config.Host{MaxBodyBytesInflight: 512 << 10}},
		{`max_body_bytes_inflight = 1048576`, config.Host{MaxBodyBytesInflight: 1 << 20}},
		{`max_body_bytes_inflight = "4096"`, config.Host{MaxBodyBytesInflight: 4096}},
		{`max_inflight = 32`, config.Host{MaxInflight: 32}},
		{``, config.Host{}},
	} {
		cfg, err := config.Parse([]byte("host {\n  "+tc.src+"\n}\n"), "test.hcl")
		if err != nil {
			t.Errorf("%s: %v", tc.src, err)
			continue
		}
		got := cfg.Host
		if got.BodyTimeout != tc.want.BodyTimeout || got.MaxBodyBytesInflight != tc.want.MaxBodyBytesInflight || got.MaxInflight != tc.want.MaxInflight {
			t.Errorf("%s: body_timeout %s, max_body_bytes_inflight %d, max_inflight %d; want %s, %d, %d", tc.src,
				got.BodyTimeout, got.MaxBodyBytesInflight, got.MaxInflight,
				tc.want.BodyTimeout, tc.want.MaxBodyBytesInflight, tc.want.MaxInflight)
		}
	}
}
