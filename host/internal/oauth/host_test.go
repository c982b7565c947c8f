package oauth_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcpvisor/mcpvisor/host"
	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// soakDuration is how long calls run across token expiries;
// MCPVISOR_OAUTH_SOAK overrides it (the 30 s: MCPVISOR_OAUTH_SOAK=30s).
func soakDuration(t *testing.T) time.Duration {
	if v := os.Getenv("MCPVISOR_OAUTH_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("MCPVISOR_OAUTH_SOAK=%q: %v", v, err)
		}
		return d
	}
	if testing.Short() {
		return 5 * time.Second
	}
	return 10 * time.Second
}

// syncBuffer collects log output from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func parse(t *testing.T, src string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(src), "config.hcl")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func waitState(t *testing.T, h *host.Host, name string, want host.State, within time.Duration) host.ServerStatus {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, st := range h.Status() {
			if st.Name == name && st.State == want {
				return st
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server %q not %s within %s: %+v", name, want, within, h.Status())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTokensRefreshAcrossExpiries is the acceptance test: an
// OAuth-protected server issuing 2-second tokens; after one login, calls
// keep succeeding across many expiries (refresh before expiry, and refresh
// on a 401 through the reconnect-and-retry path); a revoked refresh token
// puts the server in needs_login with its tools withdrawn; a new login
// brings it back while the host runs; no token ever shows in logs, status
// or errors.
func TestTokensRefreshAcrossExpiries(t *testing.T) {
	ps := newProtectedServer(t, 2*time.Second)
	store := t.TempDir()
	cfg := parse(t, fmt.Sprintf(`
host { log_level = "trace" }
server "secure" {
  url = %q
  timeout = "10s"
  reconnect { max_retries = 2 }
  oauth {}
}`, ps.URL()))

	ctx := context.Background()
	login := func() {
		t.Helper()
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		file, err := host.Login(lctx, cfg, "secure", host.LoginOptions{Open: testutil.Browser, TokenStore: store})
		if err != nil {
			t.Fatalf("login: %v", err)
		}
		fi, err := os.Stat(file)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("token file mode %v, want 0600", fi.Mode().Perm())
		}
		di, err := os.Stat(store)
		if err == nil && di.Mode().Perm() != 0o700 {
			t.Errorf("token store dir mode %v, want 0700", di.Mode().Perm())
		}
	}
	login()

	logs := &syncBuffer{}
	logger := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Trace})
	h, err := host.New(cfg, host.WithLogger(logger), host.WithTokenStore(store))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.Close(cctx)
	})
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitState(t, h, "secure", "ready", 15*time.Second)

	var errTexts []string
	call := func(text string) error {
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		res, err := h.CallTool(cctx, "secure__echo", map[string]any{"text": text})
		if err != nil {
			errTexts = append(errTexts, err.Error())
			return err
		}
		if res.IsError {
			return fmt.Errorf("tool error: %+v", res.Content)
		}
		return nil
	}

	// Calls across several expiries: none may fail.
	soak := soakDuration(t)
	start, calls := time.Now(), 0
	for time.Since(start) < soak {
		if err := call(fmt.Sprint("call ", calls)); err != nil {
			t.Fatalf("call %d after %s failed: %v", calls, time.Since(start).Round(time.Millisecond), err)
		}
		calls++
		time.Sleep(50 * time.Millisecond)
	}
	// Refreshing ahead of expiry means no call ever met a 401, so the
	// session never needed replacing.
	if st := waitState(t, h, "secure", "ready", time.Second); st.Generation != 1 {
		t.Errorf("generation %d after the soak, want 1: a token expired under a call (last error %q)", st.Generation, st.LastError)
	}
	if n, want := ps.count("refresh_token"), int(soak/(2*time.Second))-1; n < want {
		t.Errorf("%d refreshes in %s of 2-second tokens, want at least %d", n, soak, want)
	}
	t.Logf("%d calls in %s, %d refreshes", calls, soak, ps.count("refresh_token"))

	// The server forgets its access tokens: the 401 is refreshed and the
	// call retried on a new session, invisibly.
	ps.revokeAccess()
	if err := call("after revoking access tokens"); err != nil {
		t.Fatalf("call after the access token was revoked: %v", err)
	}

	// Every token revoked: the refresh fails and only a login helps.
	ps.revokeAll()
	err = call("after revoking everything")
	if err == nil {
		t.Fatal("call succeeded with every token revoked")
	}
	var re *recovery.Error
	if !errors.As(err, &re) || re.Class != recovery.NeedsLogin {
		t.Errorf("call error %v (class %v), want needs_login", err, classOf(err))
	}
	if !strings.Contains(err.Error(), "mcpvisor login secure") {
		t.Errorf("call error does not say to run `mcpvisor login secure`: %v", err)
	}
	st := waitState(t, h, "secure", "needs_login", 15*time.Second)
	if !strings.Contains(st.Action, "mcpvisor login secure") {
		t.Errorf("status action %q does not say to run `mcpvisor login secure`", st.Action)
	}
	if n := len(h.Tools()); n != 0 {
		t.Errorf("%d tools still exposed while the server needs a login", n)
	}
	// A call naming its tool says the same.
	if err := call("while needing a login"); err == nil || !strings.Contains(err.Error(), "mcpvisor login secure") {
		t.Errorf("call while needs_login: %v, want an error saying to run `mcpvisor login secure`", err)
	}
	statusJSON, _ := json.Marshal(h.Status())

	// Log in again while the host runs: it picks the tokens up.
	login()
	waitState(t, h, "secure", "ready", 15*time.Second)
	if err := call("after logging in again"); err != nil {
		t.Fatalf("call after a new login: %v", err)
	}
	if n := ps.resourceSeen(ps.URL()); n == 0 {
		t.Errorf("no token request carried the resource indicator %q", ps.URL())
	}
	// RFC 8707 and the MCP authorization spec: every token request, the
	// refreshes too, names the resource.
	if n, with := ps.count("refresh_token"), ps.resourceFor("refresh_token"); n == 0 || with != n {
		t.Errorf("%d of %d refresh requests carried the resource indicator, want all", with, n)
	}

	// No token anywhere a person or a log collector sees.
	statusJSON2, _ := json.Marshal(h.Status())
	seen := logs.String() + string(statusJSON) + string(statusJSON2) + strings.Join(errTexts, "\n")
	for _, tok := range ps.tokens() {
		if strings.Contains(seen, tok) {
			t.Errorf("token %.8s… appears in logs, status or errors", tok)
		}
	}
	if !strings.Contains(logs.String(), "[TRACE]") && !strings.Contains(logs.String(), "[DEBUG]") {
		t.Error("no trace or debug logs captured; the leak check saw nothing")
	}
}

func classOf(err error) recovery.Class { return recovery.Classify(context.Background(), err) }

// TestClientCredentialsGrant: a machine-to-machine server needs no login;
// the host discovers the token endpoint and gets (and renews) tokens with
// the configured client credentials and the resource indicator.
func TestClientCredentialsGrant(t *testing.T) {
	ps := newProtectedServer(t, 2*time.Second)
	cfg := parse(t, fmt.Sprintf(`
server "m2m" {
  url = %q
  oauth {
    grant         = "client_credentials"
    client_id     = "cc-client"
    client_secret = "cc-secret"
  }
}`, ps.URL()))
	logs := &syncBuffer{}
	h, err := host.New(cfg, host.WithTokenStore(t.TempDir()),
		host.WithLogger(hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Trace})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.Close(cctx)
	})
	ctx := context.Background()
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitState(t, h, "m2m", "ready", 15*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := h.CallTool(cctx, "m2m__echo", map[string]any{"text": "hi"})
		cancel()
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := ps.count("client_credentials"); n < 2 {
		t.Errorf("%d client-credentials tokens in 5 s of 2-second tokens, want at least 2", n)
	}
	if ps.resourceSeen(ps.URL()) == 0 {
		t.Errorf("no token request carried the resource indicator")
	}
	for _, tok := range append(ps.tokens(), "cc-secret") {
		if strings.Contains(logs.String(), tok) {
			t.Errorf("secret %.8s… appears in the logs", tok)
		}
	}
}

// TestLoginRefusals: login says what is wrong and what to do.
func TestLoginRefusals(t *testing.T) {
	ps := newProtectedServer(t, time.Minute)
	cfg := parse(t, fmt.Sprintf(`
server "plain" { command = "true" }
server "m2m" {
  url = %q
  oauth {
    grant         = "client_credentials"
    client_id     = "cc-client"
    client_secret = "cc-secret"
  }
}
server "unknown-client" {
  url = %q
  oauth { client_id = "nobody" }
}`, ps.URL(), ps.URL()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	opts := host.LoginOptions{Open: testutil.Browser, TokenStore: t.TempDir()}
	for name, want := range map[string]string{
		"missing":        `no server block has that name`,
		"plain":          `has no oauth block`,
		"m2m":            `no login needed`,
		"unknown-client": `authorization failed`,
	} {
		_, err := host.Login(ctx, cfg, name, opts)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Login(%q) = %v, want an error containing %q", name, err, want)
		}
	}
}
