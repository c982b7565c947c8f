package host

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/oauth"
	"github.com/mcpvisor/mcpvisor/host/internal/transport"
)

// LoginOptions configure Login.
type LoginOptions struct {
	// Open sends the user to the authorization URL: print it, start a
	// browser. It returns once that is done; the authorization server's
	// redirect then arrives at a listener on 127.0.0.1 (the oauth block's
	// redirect_port, else a free port). Required.
	Open func(ctx context.Context, authURL string) error
	// Paste, when set, is read for the redirect URL (or the bare code) the
	// browser ended at, for machines whose browser cannot reach 127.0.0.1.
	Paste io.Reader
	// HTTPClient reaches the server and its authorization server. Default:
	// the transport HTTP upstreams use.
	HTTPClient *http.Client
	// TokenStore is the token directory; default as for WithTokenStore.
	TokenStore string
}

// Login runs the OAuth authorization-code flow for the server block name
// of cfg and stores its tokens, where a running host picks them up within
// seconds (a server in needs_login reconnects). It returns the token file.
func Login(ctx context.Context, cfg *config.Config, name string, opts LoginOptions) (string, error) {
	srv, err := oauthServer(cfg, name)
	if err != nil {
		return "", err
	}
	store, err := tokenStore(opts.TokenStore)
	if err != nil {
		return "", err
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{Transport: transport.DefaultHTTPTransport()}
	}
	return oauth.Login(ctx, srv, oauth.LoginOptions{Store: store, HTTPClient: hc, Open: opts.Open, Paste: opts.Paste})
}

// Logout removes the stored tokens of the server block name of cfg. It
// returns the token file and whether there was one.
func Logout(cfg *config.Config, name, tokenStoreDir string) (string, bool, error) {
	srv, err := oauthServer(cfg, name)
	if err != nil {
		return "", false, err
	}
	store, err := tokenStore(tokenStoreDir)
	if err != nil {
		return "", false, err
	}
	existed, err := oauth.Logout(srv, store)
	return store.Path(oauth.KeyFor(srv)), existed, err
}

func oauthServer(cfg *config.Config, name string) (*config.Server, error) {
	for _, srv := range cfg.Servers {
		if srv.Name != name {
			continue
		}
		if srv.OAuth == nil {
			return nil, fmt.Errorf("server %q has no oauth block; only servers with one use login", name)
		}
		return srv, nil
	}
	return nil, fmt.Errorf("%w %q: no server block has that name", ErrUnknownServer, name)
}

func tokenStore(dir string) (*oauth.Store, error) {
	if dir == "" {
		var err error
		if dir, err = oauth.DefaultStoreDir(); err != nil {
			return nil, err
		}
	}
	return oauth.NewStore(dir), nil
}
