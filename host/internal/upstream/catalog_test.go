//go:build unix

package upstream_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// TestCatalogBoundsEveryList checks the catalog bounds on resources,
// resource templates and prompts against a real go-sdk server paginating
// 30 of each 7 a page: each list keeps its first entries up to its bound,
// and the status says which lists were cut.
func TestCatalogBoundsEveryList(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "big", Version: "1"}, &mcp.ServerOptions{PageSize: 7})
	for i := range 30 {
		srv.AddResource(&mcp.Resource{URI: fmt.Sprintf("file:///r%02d", i), Name: fmt.Sprintf("r%02d", i)},
			func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) { return nil, nil })
		srv.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: fmt.Sprintf("file:///t%02d/{x}", i), Name: fmt.Sprintf("t%02d", i)},
			func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) { return nil, nil })
		srv.AddPrompt(&mcp.Prompt{Name: fmt.Sprintf("p%02d", i)},
			func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) { return nil, nil })
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)

	c := &config.Config{Servers: []*config.Server{{Name: "big", Prefix: "big", URL: hs.URL,
		Catalog: config.Catalog{MaxResources: 10, MaxPrompts: 12}}}}
	c.ApplyDefaults()
	h := start(t, c.Servers[0], nil)
	st := h.waitState("ready", 1)
	cat := h.lastCatalog()
	if len(cat.Resources) != 10 || len(cat.Templates) != 10 || len(cat.Prompts) != 12 {
		t.Fatalf("kept %d resources, %d templates, %d prompts; want 10, 10, 12",
			len(cat.Resources), len(cat.Templates), len(cat.Prompts))
	}
	if cat.Resources[0].URI != "file:///r00" || cat.Prompts[11].Name != "p11" {
		t.Errorf("not the first entries: resources from %s, prompts to %s", cat.Resources[0].URI, cat.Prompts[11].Name)
	}
	for _, want := range []string{"resources/list", "resources/templates/list", "prompts/list"} {
		if !strings.Contains(st.CatalogTruncatedReason, want) {
			t.Errorf("status catalog_truncated_reason %q does not name %s", st.CatalogTruncatedReason, want)
		}
	}

	// The byte budget spans every list: what resources take, prompts lack.
	c = &config.Config{Servers: []*config.Server{{Name: "small", Prefix: "small", URL: hs.URL,
		Catalog: config.Catalog{MaxBytes: 2000}}}}
	c.ApplyDefaults()
	h = start(t, c.Servers[0], nil)
	st = h.waitState("ready", 1)
	cat = h.lastCatalog()
	if n := len(cat.Resources) + len(cat.Templates) + len(cat.Prompts); n == 0 || n >= 90 {
		t.Errorf("kept %d entries within 2000 bytes, want some but not all 90", n)
	}
	if !strings.Contains(st.CatalogTruncatedReason, "catalog.max_bytes") {
		t.Errorf("status catalog_truncated_reason %q does not name max_bytes", st.CatalogTruncatedReason)
	}
}
