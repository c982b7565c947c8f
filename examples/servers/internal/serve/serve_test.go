package serve

import (
	"bufio"
	"context"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// With -unix, two clients connect to the socket at once, each with a
// session of its own; cancelling Run ends both and returns nil.
func TestRunUnix(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	server := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "hi"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello"}}}, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	logR, logW := io.Pipe()
	defer logW.Close()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(logR)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, server, &Flags{Unix: sock}, logW) }()
	select {
	case line := <-lines:
		if line != "listening on unix:"+sock {
			t.Fatalf("first log line %q, want the listening line", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no listening line")
	}
	var sessions []*mcp.ClientSession
	for range 2 {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).
			Connect(ctx, &mcp.IOTransport{Reader: conn, Writer: conn}, nil)
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, cs)
	}
	for i, cs := range sessions {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "hi"})
		if err != nil || res.Content[0].(*mcp.TextContent).Text != "hello" {
			t.Fatalf("client %d: %v %v", i, res, err)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	for _, cs := range sessions {
		cs.Close()
	}
}

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
		{Flags{Unix: "/tmp/s.sock"}, true},
		{Flags{Unix: "/tmp/s.sock", HTTP: ":0"}, false},
		{Flags{Unix: "/tmp/s.sock", SSE: ":0"}, false},
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
