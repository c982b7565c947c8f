package host

// The local user over the control socket (docs/auth.md, "The control
// socket"; docs/design.md §19). `mcpvisor run` serves the host's handler
// on a unix socket in a directory only its user can enter (cli/
// instances.go); the CLI's status, tools, call, revive, restart, add and
// remove talk to the running host through it. A request over that socket
// without an Authorization header is the local user — the caller of
// stdio — on a host with auth too, so that a host whose auth block has
// only oidc (no shared token for the CLI to send) can still be operated
// from its own machine.
//
// The directory's mode is not the only check: when Serve accepts a
// connection on a unix socket it asks the kernel who connected
// (SO_PEERCRED on Linux, LOCAL_PEERCRED on macOS and FreeBSD; peerUID)
// and keeps the answer in the connection's context. A request is the
// local user only when that peer runs as mcpvisor's effective uid, or as
// root. A peer of another uid that sends no token gets 403 and the
// refusal is logged; one that sends a token is authenticated like any
// caller, and is not an operator by way of the socket. Where the peer
// cannot be learned (Windows; a unix listener served by another
// http.Server than Serve's) a token-less request on a host with auth gets
// 401 as over TCP.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/mcpvisor/mcpvisor/host/internal/identity"
	"github.com/mcpvisor/mcpvisor/host/internal/peercred"
)

// peerKey is the context key of a unix socket connection's peer.
type peerKey struct{}

// socketPeer is who is at the other end of a unix socket connection, as
// the kernel said when Serve accepted it.
type socketPeer struct {
	// uid is the peer's effective uid when err is nil.
	uid int
	// err says why the peer's uid is not known.
	err error
}

// withPeer is Serve's http.Server.ConnContext: for a unix socket
// connection, ctx carrying its peer.
func withPeer(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	uid, err := peercred.UID(uc)
	return context.WithValue(ctx, peerKey{}, socketPeer{uid: uid, err: err})
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

// localPeer reports whether r came over a unix socket whose peer is known
// to run as mcpvisor's user or as root.
func localPeer(r *http.Request) bool {
	p, ok := peerOf(r)
	return ok && p.err == nil && sameUser(p.uid)
}

// foreignPeer reports whether r came over a unix socket whose peer is
// known to run as another user than mcpvisor's (and not as root).
func foreignPeer(r *http.Request) (socketPeer, bool) {
	p, ok := peerOf(r)
	return p, ok && p.err == nil && !sameUser(p.uid)
}

// refuseForeignPeer answers r with 403 and returns true when it came, with
// no Authorization header, over a unix socket from another user: the
// socket is the local user's (see the note at the top of this file).
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

// localCaller is the local user when r came over a unix socket (the
// control socket, whose directory and peer checks admit only the local
// user) from a peer not known to run as another user, and policies name
// one; else nil.
func (in *ingress) localCaller(r *http.Request) *identity.Subject {
	if in.local == nil || !overUnixSocket(r) {
		return nil
	}
	if _, foreign := foreignPeer(r); foreign {
		return nil
	}
	return in.local()
}

// serveLocalUser serves r as the local user and returns true when it came
// over a unix socket, without an Authorization header, from a peer of
// mcpvisor's uid: on a host with auth, the local user needs no token (the
// kernel vouched for it when its connection was accepted).
func (in *ingress) serveLocalUser(w http.ResponseWriter, r *http.Request) bool {
	if in.localUser == nil || r.Header.Get("Authorization") != "" || !localPeer(r) {
		return false
	}
	in.next.ServeHTTP(w, r.WithContext(identity.NewContext(r.Context(), in.localUser())))
	return true
}
