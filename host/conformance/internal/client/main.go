// Command client is mcpvisor as the client under test of the conformance
// suite's client scenarios (@modelcontextprotocol/conformance client). The
// suite starts a scenario server and runs this command with the server's
// URL as the last argument, the scenario's name in MCP_CONFORMANCE_SCENARIO
// and, for some scenarios, credentials in MCP_CONFORMANCE_CONTEXT.
//
// It does what a user of mcpvisor does, with no shortcut: writes a config
// with one server block for the URL (with an oauth block for the auth/
// scenarios, made of what MCP_CONFORMANCE_CONTEXT gives: a pre-registered
// client, a private key in a file, an identity provider's ID token), loads
// it with the config package, logs in with host.Login where the grant needs
// a login
// (an HTTP client stands in for the browser of a logged-in user: it
// follows the authorization URL's redirects to the loopback listener),
// starts a host.Host, waits for the server to settle and calls every tool
// it lists. A call the server refuses for want of a scope is stepped up
// the way a user would: `mcpvisor login` again, and the call once more.
//
// It exits 0 when every call succeeded. The test in host/conformance
// builds it and reads its last line, "mcpvisor-conformance-client: ok",
// from the stdout.txt the suite writes.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host"
	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

const (
	// serverName is the config's only server block.
	serverName = "conformance"

	// runTimeout bounds the whole run; the suite kills the client after its
	// own --timeout (30 s by default) anyway.
	runTimeout = 25 * time.Second

	// maxLogins bounds the logins of one run: the first and two step-ups.
	// A server whose 403 insufficient_scope never ends must not send the
	// user through the browser forever (auth/scope-retry-limit).
	maxLogins = 3

	// clientMetadataURL is the Client ID Metadata Document the auth
	// scenarios' authorization servers expect a CIMD client to use.
	clientMetadataURL = "https://conformance-test.local/client-metadata.json"

	// OKLine is printed last on success.
	OKLine = "mcpvisor-conformance-client: ok"
)

// scenarioContext is MCP_CONFORMANCE_CONTEXT: what a scenario tells its
// client, such as pre-registered credentials.
type scenarioContext struct {
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret"`
	// auth/client-credentials-jwt: the client's private key.
	PrivateKeyPEM string `json:"private_key_pem"`
	// auth/cross-app-access-complete-flow: the enterprise identity
	// provider and the user's ID token.
	IdPClientID      string `json:"idp_client_id"`
	IdPIDToken       string `json:"idp_id_token"`
	IdPTokenEndpoint string `json:"idp_token_endpoint"`
}

// machineScenarios are the auth scenarios of grants the host runs itself,
// without a login, and their grant.
var machineScenarios = map[string]string{
	"auth/client-credentials-basic":       "client_credentials",
	"auth/client-credentials-jwt":         "client_credentials",
	"auth/cross-app-access-complete-flow": "cross_app_access",
}

// scenarioIssuers are the auth scenarios whose authorization server metadata
// names an issuer other than the URL it is served at, and that issuer's path
// below the server's root: the config names it, as a user of such a server
// does.
var scenarioIssuers = map[string]string{
	"auth/2025-03-26-oauth-metadata-backcompat": "/oauth",
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: client SERVER_URL (run by `conformance client --command`)")
		os.Exit(2)
	}
	serverURL := os.Args[len(os.Args)-1]
	scenario := os.Getenv("MCP_CONFORMANCE_SCENARIO")
	var sc scenarioContext
	if c := os.Getenv("MCP_CONFORMANCE_CONTEXT"); c != "" {
		if err := json.Unmarshal([]byte(c), &sc); err != nil {
			fmt.Fprintf(os.Stderr, "MCP_CONFORMANCE_CONTEXT: %v\n", err)
			os.Exit(2)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	err := run(ctx, serverURL, scenario, sc)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "mcpvisor-conformance-client: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(OKLine)
}

func run(ctx context.Context, serverURL, scenario string, sc scenarioContext) error {
	dir, err := os.MkdirTemp("", "mcpvisor-conformance-client-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	withOAuth := strings.HasPrefix(scenario, "auth/")
	cfgPath := filepath.Join(dir, "mcpvisor.hcl")
	if sc.PrivateKeyPEM != "" {
		// As a user would keep it: a file the config reads.
		if err := os.WriteFile(filepath.Join(dir, "client-key.pem"), []byte(sc.PrivateKeyPEM), 0o600); err != nil {
			return err
		}
	}
	if err := os.WriteFile(cfgPath, []byte(configText(serverURL, scenario, sc)), 0o600); err != nil {
		return err
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	tokens := filepath.Join(dir, "tokens")
	logger := hclog.New(&hclog.LoggerOptions{Name: "mcpvisor", Level: hclog.Debug, Output: os.Stderr})

	logins := 0
	login := func() error {
		if logins == maxLogins {
			return fmt.Errorf("giving up after %d logins", logins)
		}
		logins++
		file, err := host.Login(ctx, cfg, serverName, host.LoginOptions{Open: testutil.Browser, TokenStore: tokens})
		if err != nil {
			return fmt.Errorf("login %d: %w", logins, err)
		}
		logger.Info("logged in", "attempt", logins, "token_file", file)
		return nil
	}
	if _, machine := machineScenarios[scenario]; withOAuth && !machine {
		if err := login(); err != nil {
			return err
		}
	}

	h, err := host.New(cfg, host.WithLogger(logger), host.WithTokenStore(tokens))
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h.Close(cctx)
	}()
	if err := h.Start(ctx); err != nil {
		return err
	}
	if err := h.WaitSettled(ctx); err != nil {
		return err
	}
	if st := h.Status()[0]; st.State != host.StateReady {
		return fmt.Errorf("server is %s, not ready: %s", st.State, st.LastError)
	}
	for _, tool := range h.Tools() {
		for {
			res, err := h.CallTool(ctx, tool.Tool.Name, arguments(tool))
			if err == nil && res.IsError {
				err = fmt.Errorf("the tool answered with an error: %s", text(res))
			}
			var rerr *recovery.Error
			if err != nil && withOAuth && errors.As(err, &rerr) &&
				(rerr.Class == recovery.InsufficientScope || rerr.Class == recovery.NeedsLogin) {
				logger.Info("the call needs a new login", "tool", tool.Tool.Name, "error", err)
				if lerr := login(); lerr != nil {
					return fmt.Errorf("call %s: %w; %v", tool.Tool.Name, err, lerr)
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("call %s: %w", tool.Tool.Name, err)
			}
			logger.Info("called", "tool", tool.Tool.Name, "result", text(res))
			break
		}
	}
	return nil
}

// configText is the one-server config for url in scenario.
func configText(serverURL, scenario string, sc scenarioContext) string {
	var b strings.Builder
	fmt.Fprintf(&b, "server %q {\n  url    = %s\n  prefix = \"\"\n", serverName, strconv.Quote(serverURL))
	if strings.HasPrefix(scenario, "auth/") {
		b.WriteString("  oauth {\n")
		if grant := machineScenarios[scenario]; grant != "" {
			fmt.Fprintf(&b, "    grant = %q\n", grant)
		}
		if sc.ClientID != "" {
			fmt.Fprintf(&b, "    client_id = %s\n", strconv.Quote(sc.ClientID))
			if sc.ClientSecret != "" {
				fmt.Fprintf(&b, "    client_secret = %s\n", strconv.Quote(sc.ClientSecret))
			}
			if sc.PrivateKeyPEM != "" {
				b.WriteString("    private_key = file(\"client-key.pem\")\n")
			}
		} else {
			fmt.Fprintf(&b, "    client_metadata_url = %s\n", strconv.Quote(clientMetadataURL))
		}
		if sc.IdPIDToken != "" {
			fmt.Fprintf(&b, "    id_token = %s\n", strconv.Quote(sc.IdPIDToken))
			fmt.Fprintf(&b, "    idp_token_endpoint = %s\n", strconv.Quote(sc.IdPTokenEndpoint))
			fmt.Fprintf(&b, "    idp_client_id = %s\n", strconv.Quote(sc.IdPClientID))
		}
		if p, ok := scenarioIssuers[scenario]; ok {
			u, err := url.Parse(serverURL)
			if err == nil {
				fmt.Fprintf(&b, "    issuer = %s\n", strconv.Quote(u.Scheme+"://"+u.Host+p))
			}
		}
		b.WriteString("  }\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// arguments fills the tool's required properties: numbers with 1, strings
// with "x", booleans with true.
func arguments(tool host.Tool) map[string]any {
	args := map[string]any{}
	schema, ok := tool.Tool.InputSchema.(map[string]any)
	if !ok {
		if b, err := json.Marshal(tool.Tool.InputSchema); err == nil {
			json.Unmarshal(b, &schema)
		}
	}
	props, _ := schema["properties"].(map[string]any)
	required, _ := schema["required"].([]any)
	for _, r := range required {
		name, _ := r.(string)
		p, _ := props[name].(map[string]any)
		switch p["type"] {
		case "number", "integer":
			args[name] = 1
		case "boolean":
			args[name] = true
		default:
			args[name] = "x"
		}
	}
	return args
}

// text is the result's text content.
func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, " ")
}
