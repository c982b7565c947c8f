package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/gateway"
)

// serveHTTP serves the gateway's handler on a loopback httptest server.
func serveHTTP(t *testing.T, e *env) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(e.gw.HTTPHandler())
	t.Cleanup(srv.Close)
	return srv
}

// headerTransport adds fixed headers to every request.
type headerTransport struct {
	header http.Header
	base   http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.header {
		r.Header[k] = v
	}
	return h.base.RoundTrip(r)
}

// connectHTTP connects a go-sdk client over streamable HTTP, speaking
// version, with extra request headers.
func connectHTTP(t *testing.T, srv *httptest.Server, version string, header http.Header, copts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	t.Helper()
	tr := &mcp.StreamableClientTransport{
		Endpoint:   srv.URL + "/mcp",
		HTTPClient: &http.Client{Transport: headerTransport{header: header, base: srv.Client().Transport}},
		MaxRetries: -1,
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "http-client"}, copts).Connect(testCtx(t), tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { cs.Close() })
	return cs, nil
}

var protocolVersions = []string{"2025-11-25", "2026-07-28"}

func TestToolResultsOverHTTP(t *testing.T) {
	for _, version := range protocolVersions {
		t.Run(version, func(t *testing.T) {
			e := newEnv(t, gateway.Options{})
			srv := serveHTTP(t, e)
			cs, err := connectHTTP(t, srv, version, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := cs.InitializeResult().ProtocolVersion; got != version {
				t.Errorf("negotiated %q, want %q", got, version)
			}
			checkToolFidelity(t, e, cs)
		})
	}
}

func TestListChangedOverHTTP(t *testing.T) {
	for _, version := range protocolVersions {
		t.Run(version, func(t *testing.T) {
			e := newEnv(t, gateway.Options{})
			srv := serveHTTP(t, e)
			copts, ch := listChangedOptions()
			cs, err := connectHTTP(t, srv, version, nil, copts)
			if err != nil {
				t.Fatal(err)
			}
			awaitListStream(t, e, ch)
			checkListChanged(t, e, cs, ch)
		})
	}
}

// A 2026-07-28 retry naming a requestState this gateway does not hold (the
// call ended, or the retry reached another replica) gets an error saying to
// call again without it, never a call made with the client's leftovers.
func TestUnknownRequestStateRefused(t *testing.T) {
	e := newEnv(t, gateway.Options{})
	srv := serveHTTP(t, e)
	cs, err := connectHTTP(t, srv, "2026-07-28", nil, &mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.CallTool(testCtx(t), &mcp.CallToolParams{Name: "alpha__content", RequestState: "0123456789abcdef0123456789abcdef"})
	if err == nil || !strings.Contains(err.Error(), "requestState") || !strings.Contains(err.Error(), "without requestState") {
		t.Fatalf("call with an unknown requestState: %v, want an error saying to call again without it", err)
	}
	// The same call without it works.
	if _, err := cs.CallTool(testCtx(t), &mcp.CallToolParams{Name: "alpha__content"}); err != nil {
		t.Fatalf("call without requestState: %v", err)
	}
}
