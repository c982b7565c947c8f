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
a request with a token is authenticated as over TCP. Reaching the socket
proves nothing — a server mcpvisor started runs as the user too — so the
CLI sends the local operator credential (operator.go) unless a token was
given, and the host refuses a peer that is a server's process whatever
it sends (host/localsock.go).

Local trust (docs/security.md, "Local trust"): $TMPDIR is shared, so
another local user can create mcpvisor-<uid> before we do and plant a
socket in it that collects the bearer token and answers with a forged
status. As ssh-agent and tmux do, the directory is trusted only when
lstat shows a real directory (not a symlink) owned by our effective uid
with no group or other permission bits; otherwise the host serves no
control socket there and the CLI refuses to talk through it, both saying
what is wrong and how to fix it. Each socket must itself be a socket
owned by us, and on Linux the process that accepts the connection must
run as our uid (SO_PEERCRED) before a request, and so the token, is sent.
*/

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host"
	"github.com/mcpvisor/mcpvisor/host/internal/peercred"
	"github.com/mcpvisor/mcpvisor/host/internal/wire"
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
	// key is the config key of its control socket (configKey), "" for
	// a TCP target.
	key string
}

// runtimeDir is the directory of the control sockets.
func runtimeDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "mcpvisor")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("mcpvisor-%d", os.Getuid()))
}

// untrustedError is the refusal of a control socket directory or socket
// that another user could have made or could write to.
type untrustedError struct {
	path    string
	problem string // what is wrong, e.g. "it is a symbolic link"
	fix     string // what to do
}

func (e *untrustedError) Error() string {
	return fmt.Sprintf("refusing the control socket path %s: %s; %s", e.path, e.problem, e.fix)
}

// checkRuntimeDir verifies that dir is a directory of ours that no one
// else can write to or read: not a symlink, owned by the effective uid, no
// group or other permission bits.
func checkRuntimeDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	fix := fmt.Sprintf("another local user may have created it to intercept mcpvisor's token. Remove it (rm -r %s) and run mcpvisor again, which creates it private (0700), or set XDG_RUNTIME_DIR to a private directory", dir)
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return &untrustedError{dir, "it is a symbolic link", fix}
	case !fi.IsDir():
		return &untrustedError{dir, "it is not a directory", fix}
	}
	if uid, ok := fileOwner(fi); ok && uid != os.Geteuid() {
		return &untrustedError{dir, fmt.Sprintf("it is owned by uid %d, not by you (uid %d)", uid, os.Geteuid()), fix}
	}
	if perm := fi.Mode().Perm(); permBitsArePrivate && perm&0o077 != 0 {
		return &untrustedError{dir, fmt.Sprintf("it is accessible by group or others (mode %04o, want 0700)", perm),
			fmt.Sprintf("if it is yours, run chmod 700 %s; if you did not make it, another local user may have, to intercept mcpvisor's token: remove it (rm -r %s) and run mcpvisor again", dir, dir)}
	}
	return nil
}

// checkSocket verifies that sock is a socket owned by the effective uid.
func checkSocket(sock string) error {
	fi, err := os.Lstat(sock)
	if err != nil {
		return err
	}
	fix := fmt.Sprintf("it was not made by your mcpvisor; remove it (rm %s)", sock)
	if fi.Mode().Type() != fs.ModeSocket {
		return &untrustedError{sock, "it is not a unix socket", fix}
	}
	if uid, ok := fileOwner(fi); ok && uid != os.Geteuid() {
		return &untrustedError{sock, fmt.Sprintf("it is owned by uid %d, not by you (uid %d)", uid, os.Geteuid()), fix}
	}
	return nil
}

// makeRuntimeDir creates the control socket directory 0700 when it is
// missing and verifies it (checkRuntimeDir) either way.
func makeRuntimeDir() (string, error) {
	dir := runtimeDir()
	// The parent ($XDG_RUNTIME_DIR or $TMPDIR) is normally there already;
	// only a missing one is created, private.
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return "", err
	}
	// Mkdir, not MkdirAll: an existing path is never followed or trusted
	// before checkRuntimeDir has looked at it with lstat.
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	return dir, checkRuntimeDir(dir)
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
	dir, err := makeRuntimeDir()
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, fmt.Sprintf("%s-%d.sock", configKey(path), os.Getpid()))
	os.Remove(sock) // a stale one of a process with our pid, long gone
	return net.Listen("unix", sock)
}

// runningHosts returns the hosts serving the config at path through their
// control sockets, oldest pid first, removing stale sockets on the way. It
// fails, and nothing is sent anywhere, when the directory of the sockets
// is not private to the user (checkRuntimeDir); a socket that is not ours
// (checkSocket) is left out.
func runningHosts(path, token string) ([]target, error) {
	return runningHostsOf(configKey(path), token)
}

// runningHostsOf is runningHosts for the config key key, or "*" for the
// hosts of every config.
func runningHostsOf(key, token string) ([]target, error) {
	dir := runtimeDir()
	if err := checkRuntimeDir(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil // no host has run yet
		}
		return nil, err
	}
	socks, _ := filepath.Glob(filepath.Join(dir, key+"-*.sock"))
	type found struct {
		pid  int
		sock string
		key  string
	}
	var alive []found
	for _, sock := range socks {
		base := strings.TrimSuffix(filepath.Base(sock), ".sock")
		dash := strings.LastIndexByte(base, '-')
		if dash < 0 {
			continue
		}
		pid, err := strconv.Atoi(base[dash+1:])
		if err != nil {
			continue
		}
		if checkSocket(sock) != nil {
			continue
		}
		if !processAlive(pid) {
			os.Remove(sock)
			continue
		}
		alive = append(alive, found{pid, sock, base[:dash]})
	}
	sort.Slice(alive, func(i, j int) bool { return alive[i].pid < alive[j].pid })
	// Over the control socket the CLI proves it is the operator with the
	// local credential (operator.go); a token given or configured goes
	// instead, as over TCP.
	if token == "" && len(alive) > 0 {
		tok, err := readOperatorToken(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		token = tok
	}
	var out []target
	for _, f := range alive {
		out = append(out, target{
			name:   fmt.Sprintf("pid %d", f.pid),
			base:   "http://mcpvisor",
			client: unixClient(f.sock),
			token:  token,
			key:    f.key,
		})
	}
	return out, nil
}

// unixClient is an HTTP client whose every request goes to sock, over a
// connection whose peer runs as our uid where that can be checked
// (checkPeer), so that no request, and no token, reaches a process of
// another user.
func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", sock)
			if err != nil {
				return nil, err
			}
			if err := checkPeer(c.(*net.UnixConn)); err != nil {
				c.Close()
				return nil, &untrustedError{sock, err.Error(), fmt.Sprintf("it was not made by your mcpvisor; remove it (rm %s)", sock)}
			}
			return c, nil
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
		&mcp.ClientSessionOptions{ProtocolVersion: wire.DefaultUpstream})
	if err != nil {
		return nil, fmt.Errorf("connecting to the running host (%s): %w", t.name, err)
	}
	return cs, nil
}

// checkPeer verifies that the process at the other end of c runs as our
// effective uid: a socket file could be ours while the process that
// listens on it is not. Where the platform cannot tell (Windows), the
// directory and socket checks (checkRuntimeDir, checkSocket) stand alone.
func checkPeer(c *net.UnixConn) error {
	uid, err := peercred.UID(c)
	switch {
	case errors.Is(err, peercred.ErrUnsupported):
		return nil
	case err != nil:
		return fmt.Errorf("cannot tell who listens on it: %w", err)
	case uid != os.Geteuid():
		return fmt.Errorf("the process listening on it runs as uid %d, not as you (uid %d)", uid, os.Geteuid())
	}
	return nil
}
