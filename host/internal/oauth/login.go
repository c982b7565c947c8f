package oauth

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// callbackPath is the redirect URI's path on the loopback listener.
const callbackPath = "/callback"

// LoginOptions configure Login.
type LoginOptions struct {
	// Store receives the tokens.
	Store *Store
	// HTTPClient reaches the upstream and its authorization server.
	HTTPClient *http.Client
	// Open sends the user to the authorization URL: print it, start a
	// browser. It returns once that is done; the code arrives at the
	// loopback listener, or as a line read from Paste.
	Open func(ctx context.Context, authURL string) error
	// Paste, when set, is read for the redirect URL (or just the code) the
	// browser ended at, for machines whose browser cannot reach the
	// loopback listener.
	Paste io.Reader
}

// Login runs the authorization-code flow for srv and stores the tokens. The
// flow is the go-sdk's auth.AuthorizationCodeHandler: discovery, client
// registration (pre-registered, Client ID Metadata Document or dynamic),
// PKCE S256, the resource indicator, scopes from the challenge, the
// metadata or the block. It returns the store file written.
func Login(ctx context.Context, srv *config.Server, opts LoginOptions) (string, error) {
	if srv.OAuth == nil {
		return "", fmt.Errorf("server %q has no oauth block; add oauth { } to log in to it", srv.Name)
	}
	if !srv.OAuth.Interactive() {
		return "", fmt.Errorf("server %q uses the %s grant: the host gets its tokens itself, no login needed", srv.Name, srv.OAuth.Grant)
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	// presented is the issuer the go-sdk saw in place of the block's
	// issuer: an authorization response's iss (RFC 9207) naming the
	// block's issuer stands for it too.
	presented := func() string { return "" }
	if srv.OAuth.Issuer != "" {
		hc = withIssuer(hc, srv.OAuth.Issuer) // grants.go
		presented = hc.Transport.(*issuerTransport).presented
	}
	hc = withSummarisedErrors(hc) // loginonce.go
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(srv.OAuth.RedirectPort)))
	if err != nil {
		return "", fmt.Errorf("server %q: listening for the authorization redirect on 127.0.0.1:%d: %w (set redirect_port in its oauth block to a free port)", srv.Name, srv.OAuth.RedirectPort, err)
	}
	redirectURL := fmt.Sprintf("http://%s%s", ln.Addr().String(), callbackPath)

	results := make(chan *auth.AuthorizationResult, 2)
	failures := make(chan error, 2)
	cb := &http.Server{Handler: callbackHandler(results, failures), ReadHeaderTimeout: 10 * time.Second}
	go cb.Serve(ln)
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		cb.Shutdown(sctx)
	}()

	var (
		resource  string
		exchanged *oauth2.Config
		token     *oauth2.Token
	)
	fetch := func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
		au, err := url.Parse(args.URL)
		if err != nil {
			return nil, fmt.Errorf("authorization URL: %w", err)
		}
		resource = au.Query().Get("resource")
		if opts.Paste != nil {
			go readPasted(opts.Paste, au.Query().Get("state"), results, failures)
		}
		if opts.Open != nil {
			if err := opts.Open(ctx, args.URL); err != nil {
				return nil, err
			}
		}
		select {
		case r := <-results:
			if p := presented(); p != "" && r.Iss != "" && strings.TrimSuffix(r.Iss, "/") == strings.TrimSuffix(srv.OAuth.Issuer, "/") {
				r.Iss = p
			}
			return r, nil
		case err := <-failures:
			return nil, err
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the authorization redirect: %w", ctx.Err())
		}
	}

	o := srv.OAuth
	key := KeyFor(srv)
	// A step-up left the scopes the server asked for in the record of the
	// previous login: ask for them, and keep those granted then.
	var before []string
	if prev, err := opts.Store.Load(key); err == nil && prev != nil {
		before = unionScopes(prev.Scopes, prev.StepUpScopes)
	}
	hcfg := &auth.AuthorizationCodeHandlerConfig{
		RedirectURL:              redirectURL,
		AuthorizationCodeFetcher: fetch,
		RequestRefreshToken:      true,
		Client:                   hc,
		// Scopes: the challenge's, else scopes_supported (both chosen by
		// the handler), else the block's.
		ScopeFilter: func(discovered []string) []string {
			if len(discovered) == 0 {
				discovered = o.Scopes
			}
			return unionScopes(before, discovered)
		},
		NewTokenSource: func(_ context.Context, c *oauth2.Config, t *oauth2.Token) (oauth2.TokenSource, error) {
			exchanged, token = c, t
			return oauth2.StaticTokenSource(t), nil
		},
	}
	if o.ClientMetadataURL != "" {
		hcfg.ClientIDMetadataDocumentConfig = &auth.ClientIDMetadataDocumentConfig{URL: o.ClientMetadataURL}
	}
	if o.ClientID != "" {
		creds := &oauthex.ClientCredentials{ClientID: o.ClientID}
		if o.ClientSecret != "" {
			creds.ClientSecretAuth = &oauthex.ClientSecretAuth{ClientSecret: o.ClientSecret}
		}
		hcfg.PreregisteredClient = creds
	} else {
		hcfg.DynamicClientRegistrationConfig = &auth.DynamicClientRegistrationConfig{
			Metadata: &oauthex.ClientRegistrationMetadata{
				RedirectURIs:  []string{redirectURL},
				ClientName:    "mcpvisor",
				GrantTypes:    []string{"authorization_code", "refresh_token"},
				ResponseTypes: []string{"code"},
				// A native client cannot keep a secret on the user's
				// machine any better than its refresh token.
				TokenEndpointAuthMethod: "none",
				Scope:                   strings.Join(o.Scopes, " "),
			},
		}
	}
	sdkHandler, err := auth.NewAuthorizationCodeHandler(hcfg)
	if err != nil {
		return "", fmt.Errorf("server %q: %w", srv.Name, err)
	}
	handler := &singleAuthorization{OAuthHandler: sdkHandler}

	if srv.Transport == config.TransportSSE {
		err = authorizeSSE(ctx, hc, srv, handler)
	} else {
		err = authorizeSession(ctx, hc, srv, handler, func() bool { return token != nil })
	}
	if err != nil {
		return "", err
	}
	if token == nil || exchanged == nil {
		return "", fmt.Errorf("server %q did not ask for authorization (%s answered without a challenge); no login needed", srv.Name, srv.URL)
	}

	rec := &Record{
		ClientID:   exchanged.ClientID,
		TokenURL:   exchanged.Endpoint.TokenURL,
		AuthStyle:  exchanged.Endpoint.AuthStyle,
		Resource:   resource,
		Scopes:     exchanged.Scopes,
		Token:      token,
		ObtainedAt: time.Now(),
	}
	if o.ClientSecret == "" {
		rec.ClientSecret = exchanged.ClientSecret // a dynamically registered client's
	}
	if err := opts.Store.Save(key, rec); err != nil {
		return "", fmt.Errorf("server %q: %w", srv.Name, err)
	}
	return opts.Store.Path(key), nil
}

// authorizeSession opens an MCP session to srv with the go-sdk's streamable
// client, whose transport hands every 401, and every 403 with
// error="insufficient_scope", to handler.Authorize and then retries the
// request once. It lists the tools too: a server may let initialize through
// unauthenticated and challenge only later requests, and a login is only
// done when the server accepts its tokens. authorized reports whether the
// handler got tokens.
func authorizeSession(ctx context.Context, hc *http.Client, srv *config.Server, handler *singleAuthorization, authorized func() bool) error {
	client := mcp.NewClient(&mcp.Implementation{Name: "mcpvisor", Version: "login"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:             srv.URL,
		HTTPClient:           hc,
		OAuthHandler:         handler,
		MaxRetries:           -1,
		DisableStandaloneSSE: true,
	}, nil)
	if err == nil {
		defer cs.Close()
		if res := cs.InitializeResult(); res != nil && res.Capabilities != nil && res.Capabilities.Tools != nil {
			_, err = cs.ListTools(ctx, nil)
		}
	}
	switch {
	case err == nil:
		return nil
	case handler.refused() != "":
		return fmt.Errorf("server %q refused the new tokens (HTTP %s); check that the oauth block's scopes and client are the ones the server expects", srv.Name, handler.refused())
	case authorized():
		return fmt.Errorf("server %q refused the new tokens: %s", srv.Name, describeError(err))
	}
	return fmt.Errorf("server %q: authorization failed: %s", srv.Name, describeError(err))
}

// authorizeSSE is authorizeSession for a legacy SSE server: the go-sdk's SSE
// client transport has no OAuthHandler, so the challenge of an
// unauthenticated GET of the event stream goes to handler.Authorize
// directly.
func authorizeSSE(ctx context.Context, hc *http.Client, srv *config.Server, handler auth.OAuthHandler) error {
	req, resp, err := probe(ctx, hc, srv)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		return nil
	}
	if err := handler.Authorize(ctx, req, resp); err != nil {
		return fmt.Errorf("server %q: authorization failed: %s", srv.Name, describeError(err))
	}
	return nil
}

// Logout removes srv's stored tokens. It reports whether there were any.
func Logout(srv *config.Server, store *Store) (bool, error) {
	return store.Delete(KeyFor(srv))
}

// callbackHandler receives the authorization server's redirect.
func callbackHandler(results chan<- *auth.AuthorizationResult, failures chan<- error) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(callbackPath, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if e := q.Get("error"); e != "" {
			msg := e
			if d := q.Get("error_description"); d != "" {
				msg += ": " + d
			}
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, "<p>mcpvisor: the authorization server refused the login (%s). You can close this tab.</p>\n", html.EscapeString(msg))
			select {
			case failures <- fmt.Errorf("the authorization server refused the login: %s", msg):
			default:
			}
			return
		}
		if q.Get("code") == "" {
			http.Error(w, "mcpvisor: this address expects an authorization code", http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, "<p>mcpvisor: logged in. You can close this tab.</p>\n")
		select {
		case results <- &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}:
		default:
		}
	})
	return mux
}

// readPasted reads one line: the URL the browser was redirected to, or
// the bare code (the state is then the one we sent).
func readPasted(r io.Reader, state string, results chan<- *auth.AuthorizationResult, failures chan<- error) {
	line, err := bufio.NewReader(r).ReadString('\n')
	line = strings.TrimSpace(line)
	if line == "" {
		if err != nil && !errors.Is(err, io.EOF) {
			failures <- fmt.Errorf("reading the pasted code: %w", err)
		}
		return
	}
	res := &auth.AuthorizationResult{Code: line, State: state}
	if u, perr := url.Parse(line); perr == nil && u.Query().Get("code") != "" {
		q := u.Query()
		res = &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}
	}
	select {
	case results <- res:
	default:
	}
}
