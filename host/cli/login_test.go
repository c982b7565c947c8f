package cli_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/mcpvisor/mcpvisor/host/cli"
	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// loginBound bounds one `mcpvisor login` run: a hang guard.
const loginBound = 60 * time.Second

// refusingServer is an OAuth-protected MCP endpoint whose authorization
// server approves at once and issues tokens the endpoint then refuses.
func refusingServer(t *testing.T) string {
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	base := srv.URL
	server := mcp.NewServer(&mcp.Implementation{Name: "refusing", Version: "1"}, nil)
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	refuse := func(context.Context, string, *http.Request) (*auth.TokenInfo, error) {
		return nil, auth.ErrInvalidToken
	}
	mux.Handle("/mcp", auth.RequireBearerToken(refuse, &auth.RequireBearerTokenOptions{
		ResourceMetadataURL: base + "/.well-known/oauth-protected-resource/mcp",
	})(handler))
	mux.Handle("/.well-known/oauth-protected-resource/mcp", auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource: base + "/mcp", AuthorizationServers: []string{base}, ScopesSupported: []string{"tools"},
	}))
	reply := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, map[string]any{
			"issuer": base, "authorization_endpoint": base + "/authorize", "token_endpoint": base + "/token",
			"registration_endpoint": base + "/register", "response_types_supported": []string{"code"},
			"grant_types_supported": []string{"authorization_code", "refresh_token"}, "code_challenge_methods_supported": []string{"S256"},
			"token_endpoint_auth_methods_supported": []string{"none"}, "scopes_supported": []string{"tools"},
		})
	})
	mux.HandleFunc("/register", func(w http.ResponseWriter, r *http.Request) {
		var meta oauthex.ClientRegistrationMetadata
		json.NewDecoder(r.Body).Decode(&meta)
		reply(w, http.StatusCreated, map[string]any{"client_id": "dyn-" + rand.Text(), "redirect_uris": meta.RedirectURIs, "token_endpoint_auth_method": "none"})
	})
	mux.HandleFunc("/authorize", func(w http.ResponseWriter, r *http.Request) {
		redirect, err := url.Parse(r.URL.Query().Get("redirect_uri"))
		if err != nil {
			http.Error(w, "bad redirect_uri", http.StatusBadRequest)
			return
		}
		q := redirect.Query()
		q.Set("code", rand.Text())
		q.Set("state", r.URL.Query().Get("state"))
		redirect.RawQuery = q.Encode()
		http.Redirect(w, r, redirect.String(), http.StatusFound)
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, map[string]any{"access_token": "at-" + rand.Text(), "token_type": "Bearer", "expires_in": 3600, "refresh_token": "rt-" + rand.Text()})
	})
	return base + "/mcp"
}

// Regression (#24, item 9): `mcpvisor login` against a server that
// refuses the new token printed a second authorization URL for the same
// scope, then failed with a bare "Unauthorized". It must send the user to
// the authorization server once and say the server refused the tokens,
// with the HTTP status.
func TestLoginRefusedPrintsOneURL(t *testing.T) {
	cfg := writeConfig(t, fmt.Sprintf("server \"secure\" {\n  url = %q\n  oauth {}\n}\n", refusingServer(t)))
	ctx, cancel := context.WithTimeout(context.Background(), loginBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, mcpvisorBin, "login", "-no-browser", "-config", cfg, "secure")
	cmd.Env = append(cmd.Environ(), "XDG_STATE_HOME="+t.TempDir(), "HOME="+t.TempDir())
	stdin, err := cmd.StdinPipe() // open, never written: no code is pasted
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		lines []string
		urls  int
		wg    sync.WaitGroup
	)
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		line := sc.Text()
		mu.Lock()
		lines = append(lines, line)
		mu.Unlock()
		if u := strings.TrimSpace(line); strings.HasPrefix(u, "http://") && strings.Contains(u, "/authorize?") {
			urls++
			wg.Go(func() {
				if err := testutil.Browser(ctx, u); err != nil {
					t.Logf("browser: %v", err)
				}
			})
		}
	}
	err = cmd.Wait()
	wg.Wait()
	out := strings.Join(lines, "\n")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != cli.ExitRuntime {
		t.Fatalf("login ended with %v, want exit code %d\n%s", err, cli.ExitRuntime, out)
	}
	if urls != 1 {
		t.Errorf("login printed %d authorization URLs, want 1:\n%s", urls, out)
	}
	for _, want := range []string{`server "secure" refused the new tokens`, "HTTP 401"} {
		if !strings.Contains(out, want) {
			t.Errorf("login's output does not say %q:\n%s", want, out)
		}
	}
}
