package shared_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/mcpvisor/mcpvisor/shared"
)

// pipeTransport opens connections to an in-memory "server": each Open
// gives the plugin one end of a net.Pipe and the test the other.
type pipeTransport struct {
	mu      sync.Mutex
	config  string
	openErr error
	servers chan net.Conn
}

func (p *pipeTransport) Configure(_ context.Context, config []byte) error {
	if strings.Contains(string(config), "bad") {
		return errors.New("config needs a good value")
	}
	p.mu.Lock()
	p.config = string(config)
	p.mu.Unlock()
	return nil
}

func (p *pipeTransport) Open(context.Context) (shared.Conn, error) {
	if p.openErr != nil {
		return nil, p.openErr
	}
	a, b := net.Pipe()
	p.servers <- b
	return shared.NewLineConn(a), nil
}

// dispense serves impl in-process over a real gRPC connection and returns
// the host's client for it.
func dispense(t *testing.T, impl shared.Transport) *shared.GRPCClient {
	t.Helper()
	client, _ := plugin.TestPluginGRPCConn(t, false, map[string]plugin.Plugin{
		shared.PluginName: &shared.TransportPlugin{Impl: impl},
	})
	t.Cleanup(func() { client.Close() })
	raw, err := client.Dispense(shared.PluginName)
	if err != nil {
		t.Fatal(err)
	}
	return raw.(*shared.GRPCClient)
}

func TestFramesBothWays(t *testing.T) {
	impl := &pipeTransport{servers: make(chan net.Conn, 1)}
	tc := dispense(t, impl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if err := tc.Configure(ctx, []byte(`{"socket":"/x"}`)); err != nil {
		t.Fatal(err)
	}
	if impl.config != `{"socket":"/x"}` {
		t.Errorf("plugin got config %q", impl.config)
	}
	conn, err := tc.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv := <-impl.servers

	// host → server: one frame is one line; a pretty-printed frame is
	// compacted onto one line.
	go func() {
		conn.Send(ctx, []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		conn.Send(ctx, []byte("{\n  \"jsonrpc\": \"2.0\",\n  \"method\": \"x\"\n}"))
	}()
	buf := make([]byte, 0, 256)
	for strings.Count(string(buf), "\n") < 2 {
		b := make([]byte, 256)
		n, err := srv.Read(b)
		if err != nil {
			t.Fatal(err)
		}
		buf = append(buf, b[:n]...)
	}
	if want := "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n"; string(buf) != want {
		t.Errorf("server read %q, want %q", buf, want)
	}

	// server → host: blank lines are skipped.
	go srv.Write([]byte("\n{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n"))
	frame, err := conn.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(frame) != `{"jsonrpc":"2.0","id":1,"result":{}}` {
		t.Errorf("host got %q", frame)
	}

	// The server closing its end is a clean end: io.EOF.
	srv.Close()
	if _, err := conn.Recv(ctx); !errors.Is(err, io.EOF) {
		t.Errorf("Recv after the server closed = %v, want io.EOF", err)
	}
	conn.Close()
	if err := conn.Send(ctx, []byte(`{}`)); !errors.Is(err, shared.ErrConnClosed) {
		t.Errorf("Send after Close = %v, want ErrConnClosed", err)
	}
}

func TestHostCloseEndsServerConnection(t *testing.T) {
	impl := &pipeTransport{servers: make(chan net.Conn, 1)}
	tc := dispense(t, impl)
	ctx := context.Background()
	conn, err := tc.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv := <-impl.servers
	recvDone := make(chan error, 1)
	go func() { _, err := conn.Recv(ctx); recvDone <- err }()
	conn.Close()
	if err := <-recvDone; !errors.Is(err, shared.ErrConnClosed) {
		t.Errorf("blocked Recv after Close = %v, want ErrConnClosed", err)
	}
	// The plugin closes its connection to the server.
	srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := srv.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("server read after host Close = %v, want the pipe closed", err)
	}
}

func TestConfigureAndOpenErrors(t *testing.T) {
	impl := &pipeTransport{servers: make(chan net.Conn, 1), openErr: errors.New("dial unix /x: connection refused")}
	tc := dispense(t, impl)
	ctx := context.Background()
	err := tc.Configure(ctx, []byte(`{"socket":"bad"}`))
	if !errors.Is(err, shared.ErrConfigRejected) || !strings.HasSuffix(err.Error(), ": config needs a good value") {
		t.Errorf("Configure = %v, want ErrConfigRejected with the plugin's text", err)
	}
	_, err = tc.Open(ctx)
	if err == nil || err.Error() != "dial unix /x: connection refused" {
		t.Errorf("Open = %v, want the plugin's error text", err)
	}
}
