//go:build unix

package hardening_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

const (
	// catalogRSSBudget bounds mcpvisor's RSS growth while it lists the
	// hostile catalogs again: a blow-up guard. The bounded catalogs (10,000
	// tools of one server at the default max_tools, most of it) take a
	// fraction of it; the unbounded listing of the same upstreams takes
	// several times more.
	catalogRSSBudget = 400 * mb
	// pageGuard is where the hostile upstreams give up on their own, so
	// that a host without catalog bounds ends its listing too, rather
	// than take the machine's memory while the test watches.
	pageGuard = 60
	// callableTools is how many tools at the start of every hostile
	// catalog are real (they answer tools/call).
	callableTools = 3
)

// catalogUpstream is a go-sdk MCP server over streamable HTTP whose
// tools/list turns hostile once armed: page(n, cursor) then gives page
// n's tools and next cursor (n counts the requests since, from 0). Until
// then it lists its callableTools real tools (named by toolName), which
// answer tools/call with their own name.
type catalogUpstream struct {
	url   string
	srv   *mcp.Server
	armed atomic.Bool
	pages atomic.Int64 // tools/list requests served since armed
}

// arm makes the upstream hostile and tells mcpvisor its tools changed
// (the go-sdk server sends list_changed when a tool is added), so that
// mcpvisor lists it again.
func (u *catalogUpstream) arm() {
	u.armed.Store(true)
	u.srv.AddTool(&mcp.Tool{Name: "armed", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
}

func toolName(i int) string { return fmt.Sprintf("t%05d", i) }

func startCatalogUpstream(t *testing.T, page func(n int, cursor string) ([]*mcp.Tool, string)) *catalogUpstream {
	t.Helper()
	u := &catalogUpstream{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "hostile-catalog", Version: "1"}, nil)
	for i := range callableTools {
		name := toolName(i)
		srv.AddTool(&mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "called " + name}}}, nil
			})
	}
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != "tools/list" || !u.armed.Load() {
				return next(ctx, method, req)
			}
			n := int(u.pages.Add(1)) - 1
			cursor := req.GetParams().(*mcp.ListToolsParams).Cursor
			if n >= pageGuard {
				return &mcp.ListToolsResult{Tools: []*mcp.Tool{}}, nil
			}
			tools, next := page(n, cursor)
			return &mcp.ListToolsResult{Tools: tools, NextCursor: next}, nil
		}
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	u.url, u.srv = hs.URL, srv
	return u
}

// mkCatalogTools returns the tools numbered from first, each with a
// description of descBytes bytes.
func mkCatalogTools(first, count, descBytes int) []*mcp.Tool {
	desc := strings.Repeat("d", descBytes)
	out := make([]*mcp.Tool, count)
	for i := range out {
		out[i] = &mcp.Tool{Name: toolName(first + i), Description: desc, InputSchema: map[string]any{"type": "object"}}
	}
	return out
}

// catalogStatus is the part of a /status entry about catalogs.
type catalogStatus struct {
	Name           string `json:"name"`
	State          string `json:"state"`
	Tools          int    `json:"tools"`
	Truncated      bool   `json:"catalog_truncated"`
	TruncateReason string `json:"catalog_truncated_reason"`
}

// waitCatalogs polls /status until done holds for the four hostile
// servers, and returns that /status.
func waitCatalogs(t *testing.T, mv *mcpvisor, what string, done func(catalogStatus) bool) map[string]catalogStatus {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for {
		st := mv.catalogStatus(t)
		n := 0
		for _, name := range []string{"many", "heavy", "pages", "loop"} {
			if s, ok := st[name]; ok && done(s) {
				n++
			}
		}
		if n == 4 {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("servers not %s within %s: %+v", what, readyTimeout, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (mv *mcpvisor) catalogStatus(t *testing.T) map[string]catalogStatus {
	t.Helper()
	resp := mv.statusResponse(t)
	defer resp.Body.Close()
	var doc struct {
		Servers []catalogStatus `json:"servers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatalf("GET /status: %v", err)
	}
	out := map[string]catalogStatus{}
	for _, s := range doc.Servers {
		out[s.Name] = s
	}
	return out
}

// TestHostileCatalogsAreBounded runs upstreams that list without end
// (more tools than max_tools, a byte-heavy catalog, endless one-tool
// pages, a cursor that repeats): mcpvisor stops requesting pages at the
// bound, stays small, exposes and routes the first tools, and says in
// /status and `mcpvisor status` that each catalog was truncated and why.
func TestHostileCatalogsAreBounded(t *testing.T) {
	// More tools than max_tools (10,000 by default): 1,000 a page, without
	// end.
	many := startCatalogUpstream(t, func(n int, _ string) ([]*mcp.Tool, string) {
		return mkCatalogTools(n*1000, 1000, 64), fmt.Sprintf("page-%d", n+1)
	})
	// 50 tools of 10 kB a page against max_bytes = 1 MiB.
	heavy := startCatalogUpstream(t, func(n int, _ string) ([]*mcp.Tool, string) {
		return mkCatalogTools(n*50, 50, 10<<10), fmt.Sprintf("page-%d", n+1)
	})
	// One tool a page, without end, against max_pages = 20.
	pages := startCatalogUpstream(t, func(n int, _ string) ([]*mcp.Tool, string) {
		return mkCatalogTools(n, 1, 16), fmt.Sprintf("page-%d", n+1)
	})
	// The same page and the same cursor again and again.
	loop := startCatalogUpstream(t, func(int, string) ([]*mcp.Tool, string) {
		return mkCatalogTools(0, 100, 16), "again"
	})

	servers := fmt.Sprintf(`server "many" {
  url = %s
}
server "heavy" {
  url = %s
  catalog {
    max_bytes = 1048576
  }
}
server "pages" {
  url = %s
  catalog {
    max_pages = 20
  }
}
server "loop" {
  url = %s
}
`, hclString(many.url), hclString(heavy.url), hclString(pages.url), hclString(loop.url))

	upstreams := map[string]*catalogUpstream{"many": many, "heavy": heavy, "pages": pages, "loop": loop}
	mv := startMcpvisor(t, servers)
	waitCatalogs(t, mv, "ready", func(s catalogStatus) bool { return s.State == "ready" && s.Tools == callableTools })

	// Measure from here: the upstreams turn hostile and mcpvisor lists
	// them again.
	base := mv.rssKB(t)
	peak := mv.trackPeak(t)
	for _, u := range upstreams {
		u.arm()
	}
	// Done when each catalog is truncated, or (without bounds) when each
	// upstream gave up at its page guard.
	st := waitCatalogs(t, mv, "listed again", func(s catalogStatus) bool {
		return s.Truncated || upstreams[s.Name].pages.Load() > pageGuard
	})
	mv.healthz(t, "after listing the hostile catalogs")
	grew := peak.peakKB() - base
	t.Logf("RSS %d kB at start, peak growth %d kB; tools/list pages served: many %d, heavy %d, pages %d, loop %d",
		base, grew, many.pages.Load(), heavy.pages.Load(), pages.pages.Load(), loop.pages.Load())
	if grew > catalogRSSBudget {
		t.Errorf("RSS grew by %d MB listing the catalogs, want under %d MB", grew/mb, catalogRSSBudget/mb)
	}

	// Listing stopped at the bound: no page was asked for past it.
	for _, c := range []struct {
		name     string
		u        *catalogUpstream
		maxPages int64
		tools    int
		reason   string
	}{
		{"many", many, 10, 10000, "catalog.max_tools"},
		{"heavy", heavy, 3, 0, "catalog.max_bytes"},
		{"pages", pages, 20, 20, "catalog.max_pages"},
		{"loop", loop, 2, 0, "cursor it had sent before"},
	} {
		if got := c.u.pages.Load(); got > c.maxPages {
			t.Errorf("%s: mcpvisor asked for %d tools/list pages, want at most %d", c.name, got, c.maxPages)
		}
		s := st[c.name]
		if !s.Truncated || !strings.Contains(s.TruncateReason, c.reason) {
			t.Errorf("%s: /status catalog_truncated = %v, reason %q; want true and a reason naming %q", c.name, s.Truncated, s.TruncateReason, c.reason)
		}
		if c.tools > 0 && s.Tools != c.tools {
			t.Errorf("%s: /status tools = %d, want %d (the entries up to the bound)", c.name, s.Tools, c.tools)
		}
		if c.tools == 0 && s.Tools < callableTools {
			t.Errorf("%s: /status tools = %d, want the first entries kept", c.name, s.Tools)
		}
	}
	if !strings.Contains(mv.stderr.String(), "catalog truncated") {
		t.Errorf("no \"catalog truncated\" warning in the log")
	}
	truncated := map[string]bool{}
	for _, line := range strings.Split(mv.metricsText(t), "\n") {
		if strings.HasPrefix(line, "mcpvisor_catalog_truncated{") && strings.HasSuffix(line, "} 1") {
			_, server, _ := strings.Cut(line, `server="`)
			server, _, _ = strings.Cut(server, `"`)
			truncated[server] = true
		}
	}
	for _, server := range []string{"many", "heavy", "pages", "loop"} {
		if !truncated[server] {
			t.Errorf("/metrics: mcpvisor_catalog_truncated is not 1 for %s", server)
		}
	}

	// The first tools are exposed and reach the upstream.
	cs := connectClient(t, mv)
	for _, server := range []string{"many", "heavy", "pages", "loop"} {
		for i := range callableTools {
			name := server + "__" + toolName(i)
			ctx, cancel := context.WithTimeout(context.Background(), callBound)
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{}})
			cancel()
			if err != nil {
				t.Errorf("calling %s: %v", name, err)
				continue
			}
			if len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "called "+toolName(i) {
				t.Errorf("calling %s: result %+v", name, res.Content)
			}
		}
	}

	// `mcpvisor status` marks the truncated catalogs; -json says why.
	out, err := exec.Command(bins[testutil.Mcpvisor], "status", "-config", mv.config).CombinedOutput()
	if err != nil {
		t.Fatalf("mcpvisor status: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		for _, server := range []string{"many", "heavy", "pages", "loop"} {
			if strings.HasPrefix(line, server+" ") && !strings.Contains(line, "(truncated)") {
				t.Errorf("mcpvisor status: row of %s does not mark the truncated catalog:\n%s", server, out)
			}
		}
	}
	out, err = exec.Command(bins[testutil.Mcpvisor], "status", "-json", "-config", mv.config).CombinedOutput()
	if err != nil {
		t.Fatalf("mcpvisor status -json: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), `"catalog_truncated_reason"`) || !strings.Contains(string(out), "catalog.max_tools") {
		t.Errorf("mcpvisor status -json does not say why the catalog was truncated:\n%s", out)
	}
	mv.alive(t)
}
