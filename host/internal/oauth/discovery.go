package oauth

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/wire"
)

// probeProtocolVersion is the MCP version the unauthenticated probe
// request announces; the server only has to answer it with a 401.
const probeProtocolVersion = wire.DefaultUpstream

// probe sends the request an MCP client would send first, without a
// token, so that the server answers with its WWW-Authenticate challenge.
// The caller closes the response body.
func probe(ctx context.Context, hc *http.Client, srv *config.Server) (*http.Request, *http.Response, error) {
	var req *http.Request
	var err error
	if srv.Transport == config.TransportSSE {
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if err == nil {
			req.Header.Set("Accept", "text/event-stream")
		}
	} else {
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + probeProtocolVersion +
			`","capabilities":{},"clientInfo":{"name":"mcpvisor","version":"login"}}}`
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, bytes.NewReader([]byte(body)))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("MCP-Protocol-Version", probeProtocolVersion)
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("server %q: building a request to %s: %w", srv.Name, srv.URL, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("server %q: asking %s for its authorization requirements: %w", srv.Name, srv.URL, err)
	}
	return req, resp, nil
}

// Discovery is what the server and its authorization server published.
type Discovery struct {
	// Resource is the RFC 8707 resource indicator for the server.
	Resource string
	// Scopes are the scopes to request: the challenge's, else the
	// protected resource metadata's scopes_supported.
	Scopes []string
	// Auth is the authorization server's metadata.
	Auth *oauthex.AuthServerMeta
}

// Discover finds the server's authorization server for the
// client-credentials grant: the challenge of an unauthenticated request,
// the protected resource metadata it points at (or the well-known URLs),
// then the authorization server's metadata, with the 2025-03-26 fallbacks.
//
// The go-sdk's auth.AuthorizationCodeHandler does the same inside its
// Authorize, which Login uses; its client-credentials counterpart
// (extauth.ClientCredentialsHandler) sends no resource indicator and keeps
// the context of the request that triggered it for all later token
// requests, so a supervisor that outlives that request cannot use it. The
// steps here are the oauthex and auth functions that handler is built of,
// in the order of the MCP spec.
func Discover(ctx context.Context, hc *http.Client, srv *config.Server) (*Discovery, error) {
	_, resp, err := probe(ctx, hc, srv)
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	challenges, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	if err != nil {
		return nil, fmt.Errorf("server %q: malformed WWW-Authenticate header: %v", srv.Name, err)
	}
	var metadataURL string
	var scopes []string
	for _, c := range challenges {
		if c.Scheme != "bearer" {
			continue
		}
		if u := c.Params["resource_metadata"]; u != "" && metadataURL == "" {
			metadataURL = u
		}
		if sc := c.Params["scope"]; sc != "" && scopes == nil {
			scopes = strings.Fields(sc)
		}
	}

	prm, err := resourceMetadata(ctx, hc, metadataURL, srv.URL)
	if err != nil {
		return nil, fmt.Errorf("server %q: %w", srv.Name, err)
	}
	if len(scopes) == 0 {
		scopes = prm.ScopesSupported
	}
	issuer := prm.AuthorizationServers[0]
	asm, err := auth.GetAuthServerMetadata(ctx, issuer, hc)
	if err != nil {
		return nil, fmt.Errorf("server %q: fetching the metadata of authorization server %s: %w", srv.Name, issuer, err)
	}
	if asm == nil {
		// 2025-03-26: an authorization server without metadata uses
		// fixed endpoints.
		asm = &oauthex.AuthServerMeta{
			Issuer:                issuer,
			AuthorizationEndpoint: issuer + "/authorize",
			TokenEndpoint:         issuer + "/token",
			RegistrationEndpoint:  issuer + "/register",
		}
	}
	return &Discovery{Resource: prm.Resource, Scopes: scopes, Auth: asm}, nil
}

// resourceMetadata fetches the protected resource metadata (RFC 9728): from
// the challenge's URL, else the well-known URL at the endpoint's path, else
// at the root. A server that publishes none is, per 2025-03-26, its own
// authorization server.
func resourceMetadata(ctx context.Context, hc *http.Client, metadataURL, serverURL string) (*oauthex.ProtectedResourceMetadata, error) {
	type candidate struct{ url, resource string }
	var cands []candidate
	if metadataURL != "" {
		cands = append(cands, candidate{metadataURL, serverURL})
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		return nil, fmt.Errorf("parsing url %q: %w", serverURL, err)
	}
	root := *u
	root.Path, root.RawPath, root.RawQuery, root.Fragment = "", "", "", ""
	atPath := root
	atPath.Path = "/.well-known/oauth-protected-resource/" + strings.TrimLeft(u.Path, "/")
	atRoot := root
	atRoot.Path = "/.well-known/oauth-protected-resource"
	cands = append(cands, candidate{atPath.String(), serverURL}, candidate{atRoot.String(), root.String()})
	for _, c := range cands {
		prm, err := oauthex.GetProtectedResourceMetadata(ctx, c.url, c.resource, hc)
		if err != nil || prm == nil {
			continue
		}
		if len(prm.AuthorizationServers) == 0 {
			return nil, fmt.Errorf("the protected resource metadata at %s names no authorization server", c.url)
		}
		return prm, nil
	}
	return &oauthex.ProtectedResourceMetadata{Resource: serverURL, AuthorizationServers: []string{root.String()}}, nil
}

// authStyle picks how to send client credentials to the token endpoint,
// preferring client_secret_post as OAuth 2.1 does.
func authStyle(supported []string) oauth2.AuthStyle {
	switch {
	case slices.Contains(supported, "client_secret_post"):
		return oauth2.AuthStyleInParams
	case slices.Contains(supported, "client_secret_basic"):
		return oauth2.AuthStyleInHeader
	}
	return oauth2.AuthStyleAutoDetect
}
