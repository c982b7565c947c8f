package host

// The console's login (docs/operations.md, "Web console"; docs/auth.md,
// "The operator credential"). A browser cannot send the local operator
// credential, and must never hold it: `mcpvisor ui` asks the host, over
// the control socket, for a one-time login code (POST
// /control/console-login, an operator endpoint) and opens
// /ui/login?code=CODE. The code is good once, for consoleCodeTTL; the host
// trades it for a console session — a random id in an HttpOnly,
// SameSite=Strict cookie, which no other site's page can send nor read —
// and redirects to /ui. consoleAuth then treats a request with a live
// session's cookie as one with the operator credential, but only on the
// console's own paths and for control POSTs whose Origin is the page's
// own (consolePath), so a cross-site form gets nowhere; and the
// operator check still refuses a server's process (localsock.go).

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"
)

const (
	// consoleCodeTTL is how long a login code is good for.
	consoleCodeTTL = 5 * time.Minute
	// consoleSessionTTL is how long a console session lasts.
	consoleSessionTTL = 12 * time.Hour
	// maxConsoleCodes and maxConsoleSessions bound what an operator who
	// asks in a loop can make the host hold; the oldest go first.
	maxConsoleCodes    = 32
	maxConsoleSessions = 64
)

// ConsoleLogin is what POST /control/console-login answers.
type ConsoleLogin struct {
	// Path is the console's one-time login address on the host's HTTP
	// listener: /ui/login?code=CODE.
	Path string `json:"path"`
	// Expires is when the code stops working.
	Expires time.Time `json:"expires"`
}

// consoleLogins holds the live login codes and console sessions.
type consoleLogins struct {
	mu       sync.Mutex
	codes    map[string]time.Time // guarded by mu: code → expiry
	sessions map[string]time.Time // guarded by mu: session id → expiry
}

func newConsoleLogins() *consoleLogins {
	return &consoleLogins{codes: map[string]time.Time{}, sessions: map[string]time.Time{}}
}

// add puts a new random key into m, dropping expired keys and, at max,
// the one that expires first.
func addKey(m map[string]time.Time, ttl time.Duration, max int) (string, time.Time) {
	now := time.Now()
	for k, exp := range m {
		if now.After(exp) {
			delete(m, k)
		}
	}
	for len(m) >= max {
		var first string
		for k, exp := range m {
			if first == "" || exp.Before(m[first]) {
				first = k
			}
		}
		delete(m, first)
	}
	key := rand.Text()
	m[key] = now.Add(ttl)
	return key, m[key]
}

// newCode makes a one-time login code.
func (l *consoleLogins) newCode() (string, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return addKey(l.codes, consoleCodeTTL, maxConsoleCodes)
}

// redeem spends code and returns a new session id; ok is false for a
// code that is unknown, spent or expired.
func (l *consoleLogins) redeem(code string) (session string, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	exp, found := l.codes[code]
	if !found {
		return "", false
	}
	delete(l.codes, code)
	if time.Now().After(exp) {
		return "", false
	}
	session, _ = addKey(l.sessions, consoleSessionTTL, maxConsoleSessions)
	return session, true
}

// live reports whether id is a console session that has not expired.
func (l *consoleLogins) live(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, exp := range l.sessions {
		if subtle.ConstantTimeCompare([]byte(k), []byte(id)) == 1 {
			return time.Now().Before(exp)
		}
	}
	return false
}

// ConsoleLogin makes a one-time login code for the console and returns
// its address, for `mcpvisor run` to print at start. It fails without a
// local operator (WithLocalOperator): the code trades for that
// credential.
func (h *Host) ConsoleLogin() (ConsoleLogin, error) {
	if !h.door.set {
		return ConsoleLogin{}, errNoLocalOperator
	}
	code, exp := h.logins.newCode()
	return ConsoleLogin{Path: "/ui/login?code=" + code, Expires: exp}, nil
}

// serveConsoleLoginCode is POST /control/console-login (operators only).
func (h *Host) serveConsoleLoginCode(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	login, err := h.ConsoleLogin()
	if err != nil {
		http.Error(w, "Conflict: "+err.Error(), http.StatusConflict)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(login)
}

// serveConsoleLogin is GET /ui/login, reached (past the operator check)
// only when consoleAuth found its code good: it sets the session's cookie
// and sends the browser to /ui, so the code leaves the address bar.
func (h *Host) serveConsoleLogin(w http.ResponseWriter, r *http.Request) {
	session, _ := r.Context().Value(consoleSessionKey{}).(string)
	if session == "" {
		http.Error(w, "Forbidden: this login code is unknown, spent or expired; run `mcpvisor ui` for a new one", http.StatusForbidden)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: session, Path: "/",
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode, MaxAge: int(consoleSessionTTL / time.Second)})
	consoleHeaders(w)
	http.Redirect(w, r, "/ui", http.StatusSeeOther)
}

// consoleSessionKey is the context key of the session a login code was
// traded for.
type consoleSessionKey struct{}

// errNoLocalOperator is ConsoleLogin's error on a host without a local
// operator credential.
var errNoLocalOperator = errors.New("this host has no local operator credential (WithLocalOperator), so it has no console login; open the console with the shared token (/ui?token=TOKEN) or as an OIDC operator")
