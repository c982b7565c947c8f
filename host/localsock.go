package host

// The operator's door (docs/security.md, "The operator's door"; docs/
// auth.md, "The operator credential"; docs/design.md §18, §19).
//
// `mcpvisor run` serves the host's handler on a unix socket in a
// directory only its user can enter (cli/instances.go) as well as on TCP.
// Neither the socket nor the uid behind it makes anyone the operator: a
// server mcpvisor started runs as the user too, and may find and reach
// the socket. A request is the local user — an operator — only when its
// bearer token is the local operator credential (WithLocalOperator), a
// secret in a 0600 file of the user's runtime directory that the CLI
// reads and no sandboxed server may read. And whatever it sends, a
// request from a process a host started is never an operator:
//
//   - over the unix socket, the kernel tells the peer's pid when Serve
//     accepts the connection (SO_PEERCRED; peercred) and a peer that is a
//     server's process (proctree: its ancestors, process group, session
//     or cgroup lead to a host) is refused outright with 403, logged, on
//     every path;
//   - over TCP, an operator request's connection is looked up in the
//     kernel's socket tables and refused with 403 when a server's process
//     holds its far end (operatorOnly).
//
// A socket peer of another uid that sends no token gets 403 too; one that
// sends a token is authenticated like any caller.

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"

	"github.com/mcpvisor/mcpvisor/host/internal/identity"
	"github.com/mcpvisor/mcpvisor/host/internal/peercred"
	"github.com/mcpvisor/mcpvisor/host/internal/proctree"
)

// peerKey is the context key of a unix socket connection's peer.
type peerKey struct{}

// socketPeer is who is at the other end of a unix socket connection, as
// the kernel said when Serve accepted it.
type socketPeer struct {
	// uid and pid are the peer's when err is nil (pid 0: not told).
	uid, pid int
	// err says why the peer is not known.
	err error
}

// withPeer is Serve's http.Server.ConnContext: for a unix socket
// connection, ctx carrying its peer.
func withPeer(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	p, err := peercred.Of(uc)
	return context.WithValue(ctx, peerKey{}, socketPeer{uid: p.UID, pid: p.PID, err: err})
}

// overUnixSocket reports whether r came over a unix socket.
func overUnixSocket(r *http.Request) bool {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return ok && a != nil && a.Network() == "unix"
}

// peerOf is the peer of r's unix socket connection; ok is false when r
// did not come over a unix socket served by Serve.
func peerOf(r *http.Request) (p socketPeer, ok bool) {
	if !overUnixSocket(r) {
		return socketPeer{}, false
	}
	p, ok = r.Context().Value(peerKey{}).(socketPeer)
	return p, ok
}

// sameUser reports whether uid may act as mcpvisor's own user: it is
// mcpvisor's effective uid, or root's.
func sameUser(uid int) bool { return uid == os.Geteuid() || uid == 0 }

// foreignPeer reports whether r came over a unix socket whose peer is
// known to run as another user than mcpvisor's (and not as root).
func foreignPeer(r *http.Request) (socketPeer, bool) {
	p, ok := peerOf(r)
	return p, ok && p.err == nil && !sameUser(p.uid)
}

// refuseForeignPeer answers r with 403 and returns true when it came, with
// no Authorization header, over a unix socket from another user.
func (in *ingress) refuseForeignPeer(w http.ResponseWriter, r *http.Request) bool {
	p, foreign := foreignPeer(r)
	if !foreign || r.Header.Get("Authorization") != "" {
		return false
	}
	in.logger.Warn("http request refused: the control socket's peer runs as another user",
		"peer_uid", p.uid, "uid", os.Geteuid(), "method", r.Method, "path", r.URL.Path)
	http.Error(w, fmt.Sprintf("Forbidden: this control socket serves the user mcpvisor runs as (uid %d) without a token, and the process that connected runs as uid %d; run mcpvisor as that user, or send a bearer token (docs/auth.md, \"The control socket\")", os.Geteuid(), p.uid), http.StatusForbidden)
	return true
}

// door tells the local operator (the credential's holder) from everyone
// else, and a process a host started from every other process.
type door struct {
	// want is the SHA-256 of the operator credential (compared in
	// constant time); set is false without one.
	want [32]byte
	set  bool
	// otherHosts returns the user's other hosts' pids (nil: none).
	otherHosts func() []int
}

func newDoor(op LocalOperator) *door {
	return &door{want: sha256.Sum256([]byte(op.Token)), set: op.Token != "", otherHosts: op.OtherHosts}
}

// operatorCredential reports whether r's bearer token is the local
// operator credential.
func (d *door) operatorCredential(r *http.Request) bool {
	if d == nil || !d.set {
		return false
	}
	got, ok := bearerToken(r.Header.Get("Authorization"))
	sum := sha256.Sum256([]byte(got))
	return ok && subtle.ConstantTimeCompare(sum[:], d.want[:]) == 1
}

// hosts is this host's pid and the other hosts'.
func (d *door) hosts() []int {
	hosts := []int{os.Getpid()}
	if d != nil && d.otherHosts != nil {
		hosts = append(hosts, d.otherHosts()...)
	}
	return slices.Compact(hosts)
}

// serverPeer says why r comes from a process a host started ("" when it
// does not, or the platform cannot tell). A process whose origin /proc
// cannot tell (it exited right after connecting) counts as a server's:
// the door fails closed.
func (d *door) serverPeer(r *http.Request) string {
	if p, ok := peerOf(r); ok {
		if p.err != nil || p.pid <= 0 {
			return "" // not told (another platform): the credential decides
		}
		why, err := proctree.Server(p.pid, d.hosts())
		switch {
		case errors.Is(err, proctree.ErrUnsupported):
			return ""
		case err != nil:
			return fmt.Sprintf("cannot tell where pid %d comes from: %v", p.pid, err)
		case why != "":
			return fmt.Sprintf("pid %d: %s", p.pid, why)
		}
		return ""
	}
	remote, err1 := netip.ParseAddrPort(r.RemoteAddr)
	la, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if err1 != nil || la == nil {
		return ""
	}
	local, err2 := netip.ParseAddrPort(la.String())
	if err2 != nil {
		return ""
	}
	why, err := proctree.TCPPeer(remote, local, d.hosts())
	switch {
	case errors.Is(err, proctree.ErrUnsupported):
		return ""
	case err != nil:
		return fmt.Sprintf("cannot tell which process holds the connection from %s: %v", remote, err)
	}
	return why
}

// refuseServerPeer answers r with 403 and returns true when it came over
// a unix socket from a process a host started (see the note at the top
// of this file): such a peer is refused on every path.
func (in *ingress) refuseServerPeer(w http.ResponseWriter, r *http.Request) bool {
	if _, ok := peerOf(r); !ok {
		return false
	}
	why := in.door.serverPeer(r)
	if why == "" {
		return false
	}
	in.logger.Warn("http request refused: the control socket's peer is a process mcpvisor started",
		"reason", why, "method", r.Method, "path", r.URL.Path)
	refuseServer(w, why)
	return true
}

// refuseServer is the 403 of a request from a server's process.
func refuseServer(w http.ResponseWriter, why string) {
	http.Error(w, fmt.Sprintf("Forbidden: the request comes from a process mcpvisor started (%s); a server is never an operator, whatever its uid or credential (docs/security.md, \"The operator's door\")", why), http.StatusForbidden)
}

// serveOperator serves r as the local user and returns true when its
// bearer token is the local operator credential.
func (in *ingress) serveOperator(w http.ResponseWriter, r *http.Request) bool {
	if in.localUser == nil || !in.door.operatorCredential(r) {
		return false
	}
	in.next.ServeHTTP(w, r.WithContext(identity.NewContext(r.Context(), in.localUser())))
	return true
}
