package cli

/*
Design note: reaching the running hosts of a config.

`status`, `revive`, `restart`, `tools` and `call` talk to the mcpvisor
processes already serving a config instead of starting its servers again.
Several can serve one config at once (a desktop agent's `run --stdio`,
Claude Code's, `make run`), and a stdio one listens on no TCP port. So every
`run` also serves the host's HTTP handler on a unix socket of its own:

	$XDG_RUNTIME_DIR/mcpvisor/<config key>-<pid>.sock
	(or $TMPDIR/mcpvisor-<uid>/… without XDG_RUNTIME_DIR)

The directory is created 0700; the key is a hash of the config file's
absolute path, so the sockets of one config are found by a glob, and the
pid says which process owns each (a socket whose process is gone is stale
and removed). The socket is behind the same ingress as the TCP listener:
the host block's bearer token applies there too.
*/

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host"
)

// controlTimeout bounds one request to a running host (a restart waits
// for the new process to be ready).
const controlTimeout = 3 * time.Minute

// target is a running host a command talks to.
type target struct {
	// name says which one, for output: "pid 1234" or an address.
	name string
	// base is the URL prefix of its HTTP endpoints.
	base string
	// client reaches it (over its unix socket, or TCP).
	client *http.Client
	// token is sent as the bearer token when set.
	token string
}

// runtimeDir is the directory of the control sockets.
func runtimeDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "mcpvisor")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("mcpvisor-%d", os.Getuid()))
}

// configKey names a config file's sockets: a hash of its absolute path.
func configKey(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	sum := sha256.Sum256([]byte(path))
	return hex.EncodeToString(sum[:8])
}

// listenControl opens this process's control socket for the config at
// path. Closing the listener removes the socket file.
func listenControl(path string) (net.Listener, error) {
	dir := runtimeDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, fmt.Sprintf("%s-%d.sock", configKey(path), os.Getpid()))
	os.Remove(sock) // a stale one of a process with our pid, long gone
	return net.Listen("unix", sock)
}

// runningHosts returns the hosts serving the config at path through their
// control sockets, oldest pid first, removing stale sockets on the way.
func runningHosts(path, token string) []target {
	socks, _ := filepath.Glob(filepath.Join(runtimeDir(), configKey(path)+"-*.sock"))
	type found struct {
		pid  int
		sock string
	}
	var alive []found
	for _, sock := range socks {
		base := strings.TrimSuffix(filepath.Base(sock), ".sock")
		pid, err := strconv.Atoi(base[strings.LastIndexByte(base, '-')+1:])
		if err != nil {
			continue
		}
		if syscall.Kill(pid, 0) != nil {
			os.Remove(sock)
			continue
		}
		alive = append(alive, found{pid, sock})
	}
	sort.Slice(alive, func(i, j int) bool { return alive[i].pid < alive[j].pid })
	var out []target
	for _, f := range alive {
		out = append(out, target{
			name:   fmt.Sprintf("pid %d", f.pid),
			base:   "http://mcpvisor",
			client: unixClient(f.sock),
			token:  token,
		})
	}
	return out
}

// unixClient is an HTTP client whose every request goes to sock.
func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
}

// tcpTarget is the host listening at addr.
func tcpTarget(addr, token string) target {
	return target{name: addr, base: "http://" + addr, client: &http.Client{}, token: token}
}

// do sends a request to t's path and returns the response.
func (t target) do(ctx context.Context, method, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, t.base+path, nil)
	if err != nil {
		return nil, err
	}
	if t.token != "" {
		req.Header.Set("Authorization", "Bearer "+t.token)
	}
	return t.client.Do(req)
}

// tokenTransport adds a bearer token to every request.
type tokenTransport struct {
	base  http.RoundTripper
	token string
}

func (t tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.token == "" {
		return t.base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.token)
	return t.base.RoundTrip(r)
}

// mcpClient is t's client for its /mcp endpoint, with the token.
func (t target) mcpClient() *http.Client {
	base := t.client.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	return &http.Client{Transport: tokenTransport{base: base, token: t.token}}
}

// connect opens an MCP client session with t's /mcp endpoint.
func (t target) connect(ctx context.Context) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "mcpvisor-cli", Version: host.Version}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: t.base + "/mcp", HTTPClient: t.mcpClient(), MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		return nil, fmt.Errorf("connecting to the running host (%s): %w", t.name, err)
	}
	return cs, nil
}
