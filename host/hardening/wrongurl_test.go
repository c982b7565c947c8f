//go:build unix

package hardening_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// A server block whose URL has the wrong path says so: the status of the
// first request, its URL and where MCP endpoints usually are, in the
// server's last error (the go-sdk's own word is only "Not Found"); the
// same for a legacy SSE block pointed at a streamable endpoint's host.
func TestWrongURLPathNamesTheFix(t *testing.T) {
	up := testutil.StartServer(t, bins["echo"], "-http", freeAddr(t))
	base := strings.TrimSuffix(up.URL, "/mcp")
	mv := startMcpvisor(t, fmt.Sprintf(`server "wrong" {
  url = %s
}
server "wrongsse" {
  url       = %s
  transport = "sse"
}
`, hclString(base+"/api"), hclString(base+"/events")))
	want := map[string][]string{
		"wrong":    {"POST " + base + "/api answered HTTP 404 Not Found", "is the URL the server's MCP endpoint?", "/mcp"},
		"wrongsse": {"GET " + base + "/events answered HTTP 404 Not Found", "is the URL the server's SSE endpoint?", "/sse"},
	}
	var last map[string]serverStatus
	testutil.Eventually(t, 30*time.Second, "both servers' last errors", func() bool {
		last = mv.status(t)
		return last["wrong"].LastError != "" && last["wrongsse"].LastError != ""
	})
	for name, parts := range want {
		for _, p := range parts {
			if !strings.Contains(last[name].LastError, p) {
				t.Errorf("server %s: last error %q lacks %q", name, last[name].LastError, p)
			}
		}
	}
}
