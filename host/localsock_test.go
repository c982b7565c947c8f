//go:build unix

package host_test

// The control socket's server-side peer check (docs/auth.md, "The control
// socket"): Serve asks the kernel who connected over a unix socket. A
// process of mcpvisor's uid is the local user without a token; a process
// of another uid (a copy of this test binary run as nobody, uid 65534)
// that sends no token gets 403 and is logged, on a host with auth and on
// one without; with the token it is authenticated as before.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcpvisor/mcpvisor/host"
	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// peerRequestEnv, set in the environment of a copy of this test binary,
// makes it send one request (a peerRequest as JSON) over a unix socket,
// print the answer and exit, before TestMain builds anything.
const peerRequestEnv = "MCPVISOR_TEST_PEER_REQUEST"

// peerRequest is one request a peer process sends.
type peerRequest struct {
	Sock, Method, Path, Authorization string
}

// peerAnswer is what the peer process prints.
type peerAnswer struct {
	Status int
	Body   string
	Error  string
}

// servePeerRequest is the peer process: see peerRequestEnv. It returns
// when the variable is not set.
func servePeerRequest() {
	spec := os.Getenv(peerRequestEnv)
	if spec == "" {
		return
	}
	var req peerRequest
	var ans peerAnswer
	if err := json.Unmarshal([]byte(spec), &req); err != nil {
		ans.Error = err.Error()
	} else {
		ans = sendOver(req)
	}
	json.NewEncoder(os.Stdout).Encode(ans)
	os.Exit(0)
}

// sendOver sends req over its unix socket.
func sendOver(req peerRequest) peerAnswer {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", req.Sock)
	}}
	defer tr.CloseIdleConnections()
	r, err := http.NewRequest(req.Method, "http://mcpvisor"+req.Path, nil)
	if err != nil {
		return peerAnswer{Error: err.Error()}
	}
	if req.Authorization != "" {
		r.Header.Set("Authorization", req.Authorization)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := (&http.Client{Transport: tr}).Do(r.WithContext(ctx))
	if err != nil {
		return peerAnswer{Error: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return peerAnswer{Status: resp.StatusCode, Body: string(b)}
}

// asNobody sends req from a copy of this test binary (bin) run as uid and
// gid 65534.
func asNobody(t *testing.T, bin string, req peerRequest) peerAnswer {
	t.Helper()
	spec, _ := json.Marshal(req)
	// setsid -f: a process in a session of its own whose parent has
	// exited, so no longer below this test process — the host, which
	// refuses its own descendants whatever their uid (localsock.go).
	cmd := exec.Command("setsid", "-f", bin)
	cmd.Env = []string{"PATH=/usr/bin:/bin", peerRequestEnv + "=" + string(spec)}
	cmd.Dir = filepath.Dir(bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.Output()
	var ans peerAnswer
	if err != nil || json.Unmarshal(out, &ans) != nil || ans.Error != "" {
		t.Fatalf("%s %s as uid 65534: %v %s %s", req.Method, req.Path, err, out, ans.Error)
	}
	return ans
}

// TestControlSocketRefusesAnotherUser: see the note at the top of this
// file.
func TestControlSocketRefusesAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to connect as another user")
	}
	// A directory, a socket and a copy of this binary that nobody can
	// reach: only the peer check stands between it and the host.
	pub, err := os.MkdirTemp("", "mcpv-peer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(pub) })
	os.Chmod(pub, 0o755)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(pub, "host.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}

	const token = "tok-peer-check"
	for _, tc := range []struct {
		name, src string
		auth      bool
	}{
		{"auth token", fmt.Sprintf("host {\n  auth {\n    token = %q\n  }\n}\n", token), true},
		{"no auth, a policy for the local user", "policy \"me\" {\n  subjects = [\"local\"]\n  tools = [\"*\"]\n}\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &testutil.Buffer{}
			const operator = "the-local-operator-credential"
			h := settledHost(t, tc.src, host.WithLogger(hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info})),
				host.WithLocalOperator(host.LocalOperator{Token: operator}))
			sock := filepath.Join(pub, strings.ReplaceAll(tc.name, " ", "-")[:4]+".sock")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			os.Chmod(sock, 0o777)
			tcp, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 2)
			go func() { done <- h.Serve(ctx, ln) }()
			go func() { done <- h.Serve(ctx, tcp) }()
			t.Cleanup(func() {
				cancel()
				for range 2 {
					if err := <-done; err != nil {
						t.Errorf("serve: %v", err)
					}
				}
			})

			// Another user, no token: 403 saying who, for a read and for
			// an operator endpoint; logged.
			for _, r := range []peerRequest{{Method: "GET", Path: "/status"}, {Method: "POST", Path: "/control/restart?server=nope"}} {
				r.Sock = sock
				got := asNobody(t, bin, r)
				if got.Status != http.StatusForbidden || !strings.Contains(got.Body, "the process that connected runs as uid 65534") ||
					!strings.Contains(got.Body, fmt.Sprintf("serves the user mcpvisor runs as (uid %d) without a token", os.Geteuid())) {
					t.Errorf("%s %s as uid 65534 without a token: %d %q; want 403 naming both uids", r.Method, r.Path, got.Status, got.Body)
				}
			}
			if l := logs.String(); !strings.Contains(l, "http request refused: the control socket's peer runs as another user") || !strings.Contains(l, "peer_uid=65534") {
				t.Errorf("the refusal is not logged:\n%s", l)
			}

			// mcpvisor's own user (root here) with the local operator
			// credential: the local user, an operator (404: the server
			// does not exist, not 401 or 403).
			for path, want := range map[string]int{"/status": http.StatusOK, "/control/restart?server=nope": http.StatusNotFound} {
				method := map[bool]string{true: "GET", false: "POST"}[path == "/status"]
				if got := sendOver(peerRequest{Sock: sock, Method: method, Path: path, Authorization: "Bearer " + operator}); got.Status != want {
					t.Errorf("%s %s as uid %d with the operator credential: %d %q %s; want %d", method, path, os.Geteuid(), got.Status, got.Body, got.Error, want)
				}
			}
			// Without it the socket and the uid make no operator (docs/
			// security.md, "The operator's door"): 401 on a host with
			// auth, 403 from the operator endpoint of one without.
			want := map[bool]int{true: http.StatusUnauthorized, false: http.StatusForbidden}[tc.auth]
			if got := sendOver(peerRequest{Sock: sock, Method: "POST", Path: "/control/restart?server=nope"}); got.Status != want {
				t.Errorf("POST /control/restart as uid %d without a credential: %d %q %s; want %d", os.Geteuid(), got.Status, got.Body, got.Error, want)
			}
			if !tc.auth {
				return
			}
			// Another user with the token: authenticated as before.
			if got := asNobody(t, bin, peerRequest{Sock: sock, Method: "GET", Path: "/status", Authorization: "Bearer " + token}); got.Status != http.StatusOK {
				t.Errorf("GET /status as uid 65534 with the token: %d %q; want 200", got.Status, got.Body)
			}
			// TCP without a token: 401, as before.
			resp, err := http.Get("http://" + tcp.Addr().String() + "/status")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET /status over TCP without a token: %s; want 401", resp.Status)
			}
		})
	}
}
