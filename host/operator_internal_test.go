package host

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/identity"
)

// The operator check in front of /control/* and /ui: an OIDC subject
// passes only through a policy with operator = true; the shared token and
// a request over the control socket (a unix listener) pass whoever the
// subject is; a refusal is a 403 with a JSON body naming the caller and
// what to add. /status leaves the last call errors out for a caller who
// is not an operator.
func TestOperatorOnly(t *testing.T) {
	cfg, err := config.Parse([]byte(`
policy "oncall" {
  subjects = ["group:oncall"]
  operator = true
}
policy "analysts" {
  subjects = ["group:analysts"]
  tools    = ["*"]
}
`), "config.hcl")
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	served := false
	gate := h.operatorOnly(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served = true }))
	alice := &identity.Subject{Via: identity.ViaOIDC, ID: "alice", Groups: []string{"analysts"}}
	oncall := &identity.Subject{Via: identity.ViaOIDC, ID: "bob", Groups: []string{"oncall"}}
	socket := &net.UnixAddr{Name: "/run/user/1000/mcpvisor/x.sock", Net: "unix"}
	tcp := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8811}
	for _, tc := range []struct {
		name  string
		who   *identity.Subject
		local net.Addr
		want  int
	}{
		{"an OIDC subject without operator", alice, tcp, http.StatusForbidden},
		{"an OIDC subject with operator", oncall, tcp, http.StatusOK},
		{"the shared token", &identity.Subject{Via: identity.ViaToken}, tcp, http.StatusOK},
		// The socket makes no operator (localsock.go).
		{"an OIDC subject over the control socket", alice, socket, http.StatusForbidden},
	} {
		served = false
		r := httptest.NewRequest("POST", "http://127.0.0.1:8811/control/restart?server=x", nil)
		ctx := identity.NewContext(r.Context(), tc.who)
		r = r.WithContext(context.WithValue(ctx, http.LocalAddrContextKey, tc.local))
		w := httptest.NewRecorder()
		gate.ServeHTTP(w, r)
		if w.Code != tc.want || served != (tc.want == http.StatusOK) {
			t.Errorf("%s: %d (served %v); want %d", tc.name, w.Code, served, tc.want)
		}
		if tc.want != http.StatusForbidden {
			continue
		}
		var body OperatorRefusal
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("%s: body %q (%s): %v; want JSON", tc.name, w.Body.String(), w.Header().Get("Content-Type"), err)
		}
		if !strings.Contains(body.Error, "the caller sub:alice is not an operator: add operator = true to a policy whose subjects include it") ||
			!strings.Contains(body.Rule, `no policy that applies to subject "alice" has operator = true (the policies that apply to it: "analysts")`) {
			t.Errorf("%s: refusal %+v", tc.name, body)
		}
	}

	// Over the control socket from a peer the kernel says runs as another
	// user or as mcpvisor's own (localsock.go): the socket makes no
	// operator of it, whatever its uid.
	for peer, want := range map[int]int{65534: http.StatusForbidden, os.Geteuid(): http.StatusForbidden} {
		served = false
		r := httptest.NewRequest("POST", "http://mcpvisor/control/restart?server=x", nil)
		ctx := context.WithValue(identity.NewContext(r.Context(), alice), http.LocalAddrContextKey, net.Addr(socket))
		r = r.WithContext(context.WithValue(ctx, peerKey{}, socketPeer{uid: peer}))
		w := httptest.NewRecorder()
		gate.ServeHTTP(w, r)
		if w.Code != want || served != (want == http.StatusOK) {
			t.Errorf("an OIDC subject over the control socket from uid %d: %d (served %v); want %d", peer, w.Code, served, want)
		}
	}

	// /status: the last call error is another caller's; an operator sees it.
	// The connected clients and the endpoint are the operator's too.
	rep := StatusReport{Servers: []ServerStatus{{Name: "x", LastError: "connect failed", LastCallError: "no such file /home/bob/secret", LastCallErrorAt: time.Now()}},
		HTTP: "http://127.0.0.1:8811/mcp", Clients: []Client{{Name: "cursor", Transport: "streamable-http", Session: "abcd1234…"}}}
	for who, want := range map[*identity.Subject]bool{alice: false, oncall: true} {
		r := httptest.NewRequest("GET", "http://127.0.0.1:8811/status", nil)
		r = r.WithContext(identity.NewContext(r.Context(), who))
		got := h.statusFor(r, rep)
		if shown := len(got.Clients) > 0 || got.HTTP != ""; shown != want {
			t.Errorf("/status for %s: clients and endpoint shown %v; want %v", who.ID, shown, want)
		}
		if shown := got.Servers[0].LastCallError != "" && !got.Servers[0].LastCallErrorAt.IsZero(); shown != want {
			t.Errorf("/status for %s: last call error shown %v; want %v", who.ID, shown, want)
		}
		if got.Servers[0].LastError != "connect failed" {
			t.Errorf("/status for %s lost the server's own last error", who.ID)
		}
	}
	if rep.Servers[0].LastCallError == "" {
		t.Error("statusFor changed the report it was given")
	}
}
