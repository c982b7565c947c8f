package serve

import (
	"net"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		flags Flags
		ok    bool
	}{
		{Flags{}, true},
		{Flags{HTTP: ":0", SessionTTL: time.Second, ForgetSessionsSignal: true, ToolsSuffix: "_v2.a-b"}, true},
		{Flags{HTTP: ":0", Stateless: true, ForgetSessionsSignal: true}, true},
		{Flags{SSE: ":0", ForgetSessionsSignal: true}, true},
		{Flags{HTTP: ":0", SSE: ":0"}, false},
		{Flags{SessionTTL: time.Second}, false},
		{Flags{SSE: ":0", SessionTTL: time.Second}, false},
		{Flags{HTTP: ":0", SessionTTL: -time.Second}, false},
		{Flags{HTTP: ":0", Stateless: true, SessionTTL: time.Second}, false},
		{Flags{Stateless: true}, false},
		{Flags{ForgetSessionsSignal: true}, false},
		{Flags{ToolsSuffix: "a b"}, false},
		{Flags{ToolsSuffix: "ä"}, false},
	}
	for _, tt := range tests {
		if err := tt.flags.Validate(); (err == nil) != tt.ok {
			t.Errorf("%+v: Validate() = %v, want ok=%v", tt.flags, err, tt.ok)
		}
	}
}

func TestURL(t *testing.T) {
	tests := []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8811}, "http://127.0.0.1:8811/mcp"},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 1}, "http://127.0.0.1:1/mcp"},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 2}, "http://127.0.0.1:2/mcp"},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 3}, "http://[::1]:3/mcp"},
	}
	for _, tt := range tests {
		if got := URL(tt.addr, StreamablePath); got != tt.want {
			t.Errorf("URL(%v) = %q, want %q", tt.addr, got, tt.want)
		}
	}
}
