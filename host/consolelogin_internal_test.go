package host

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// The console's one-time login: a code from an operator, good once,
// traded for a session cookie that opens the console and its buttons
// (same origin only), and nothing without it.
func TestConsoleLogin(t *testing.T) {
	cfg, err := config.Parse([]byte("server \"x\" {\n  command = \"sh\"\n  enabled = false\n}\n"), "config.hcl")
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(cfg, WithLocalOperator(LocalOperator{Token: "operator-credential"}))
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path string, header http.Header) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "http://127.0.0.1:8811"+path, nil)
		r.RemoteAddr = "127.0.0.1:40000"
		for k, v := range header {
			r.Header[k] = v
		}
		w := httptest.NewRecorder()
		h.Handler().ServeHTTP(w, r)
		return w
	}
	// No credential: no code, no console (a host without auth).
	if w := do("POST", "/control/console-login", nil); w.Code != http.StatusForbidden {
		t.Fatalf("POST /control/console-login without a credential: %d", w.Code)
	}
	if w := do("GET", "/ui", nil); w.Code != http.StatusForbidden {
		t.Fatalf("GET /ui without a credential: %d", w.Code)
	}
	w := do("POST", "/control/console-login", http.Header{"Authorization": {"Bearer operator-credential"}})
	var login ConsoleLogin
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &login) != nil || !strings.HasPrefix(login.Path, "/ui/login?code=") {
		t.Fatalf("POST /control/console-login as the operator: %d %s", w.Code, w.Body.String())
	}
	w = do("GET", login.Path, nil)
	cookies := w.Result().Cookies()
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/ui" || len(cookies) != 1 ||
		!cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode || strings.Contains(cookies[0].Value, "operator-credential") {
		t.Fatalf("GET %s: %d to %q, cookies %v; want 303 to /ui with an HttpOnly SameSite=Strict session cookie", login.Path, w.Code, w.Header().Get("Location"), w.Header().Values("Set-Cookie"))
	}
	if w := do("GET", login.Path, nil); w.Code != http.StatusForbidden || len(w.Result().Cookies()) != 0 {
		t.Errorf("GET %s a second time: %d, cookies %v; want 403 without a cookie", login.Path, w.Code, w.Header().Values("Set-Cookie"))
	}
	if w := do("GET", "/ui/login?code=made-up", nil); w.Code != http.StatusForbidden {
		t.Errorf("GET /ui/login with a made-up code: %d; want 403", w.Code)
	}
	session := http.Header{"Cookie": {cookies[0].Name + "=" + cookies[0].Value}}
	if w := do("GET", "/ui", session); w.Code != http.StatusOK {
		t.Errorf("GET /ui with the session: %d; want 200", w.Code)
	}
	// The buttons: same origin only (CSRF), and nothing past the console.
	same := http.Header{"Cookie": session["Cookie"], "Origin": {"http://127.0.0.1:8811"}}
	if w := do("POST", "/control/restart?server=nope", same); w.Code != http.StatusNotFound {
		t.Errorf("POST /control/restart with the session from the console's origin: %d %s; want 404 (served)", w.Code, w.Body.String())
	}
	cross := http.Header{"Cookie": session["Cookie"], "Origin": {"http://localhost:9999"}}
	if w := do("POST", "/control/restart?server=nope", cross); w.Code != http.StatusForbidden {
		t.Errorf("POST /control/restart with the session from another origin: %d; want 403", w.Code)
	}
	if w := do("POST", "/control/reload", same); w.Code != http.StatusForbidden {
		t.Errorf("POST /control/reload with the session: %d; want 403 (not a console button)", w.Code)
	}
}
