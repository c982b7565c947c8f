package host

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/upstream"
)

// The console's ?token= is honoured only from a loopback client: a token
// in a URL from another machine has crossed proxies that log URLs, and the
// host's handler refuses it as if it were absent.
func TestConsoleTokenQueryOnlyFromLoopback(t *testing.T) {
	cfg, err := config.Parse([]byte("host {\n  listen = \"0.0.0.0:8811\"\n  auth {\n    bearer_token = \"tok-123\"\n  }\n}\n"), "config.hcl")
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for remote, want := range map[string]int{
		"127.0.0.1:40000":  http.StatusSeeOther,
		"[::1]:40000":      http.StatusSeeOther,
		"192.0.2.10:40000": http.StatusUnauthorized,
	} {
		r := httptest.NewRequest("GET", "http://mcpvisor.example:8811/ui?token=tok-123", nil)
		r.RemoteAddr = remote
		w := httptest.NewRecorder()
		h.Handler().ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("GET /ui?token= from %s: %d, want %d", remote, w.Code, want)
		}
		if w.Code == http.StatusSeeOther && !strings.Contains(w.Header().Get("Set-Cookie"), "HttpOnly") {
			t.Errorf("GET /ui?token= from %s: cookie %q, want HttpOnly", remote, w.Header().Get("Set-Cookie"))
		}
	}
}

// The recent calls are a ring of recent_calls records, newest first,
// without arguments, with errors redacted.
func TestConsoleRecentCallsRing(t *testing.T) {
	c := newConsole(config.Console{RecentCalls: 2})
	for i, name := range []string{"first", "second", "third"} {
		call := &upstream.Call{Server: "s", Method: "tools/call", Name: name, Start: time.Unix(int64(i), 0),
			Arguments: []byte(`{"password":"hunter2"}`), Outcome: upstream.OutcomeOK}
		if name == "third" {
			call.Err = errors.New("upstream said Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123456789")
		}
		c.record(call)
	}
	got := c.recent()
	if len(got) != 2 || got[0].Name != "third" || got[1].Name != "second" {
		t.Fatalf("recent = %+v, want third then second", got)
	}
	if strings.Contains(got[0].Error, "abcdefghijklmnopqrstuvwxyz0123456789") {
		t.Errorf("recent call error not redacted: %q", got[0].Error)
	}
}

// The console shows a server's sandbox summary under its name.
func TestConsoleShowsSandbox(t *testing.T) {
	cfg, err := config.Parse([]byte("server \"boxed\" {\n  command = \"sh\"\n  enabled = false\n  sandbox {\n    network = \"none\"\n  }\n}\n"), "config.hcl")
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(cfg, WithLocalOperator(LocalOperator{Token: "operator"}))
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "http://127.0.0.1:8811/ui", nil)
	r.RemoteAddr = "127.0.0.1:40000"
	r.Header.Set("Authorization", "Bearer operator")
	w := httptest.NewRecorder()
	h.Handler().ServeHTTP(w, r)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "landlock: read 0, write 0; net none") {
		t.Errorf("GET /ui: %d, want the sandbox summary in:\n%s", w.Code, w.Body.String())
	}
}
