package oauth_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host"
	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// Regression (#24, item 9): when the server refused the new token, or the
// token endpoint answered 400, login sent the user to a second
// authorization URL for the same scope and then failed vaguely; a
// registration answered with an HTML page ended up in the error. One
// authorization per login, and an error that says what refused it with
// the HTTP status, without the page.
func TestLoginAsksOnceAndSaysWhy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bad   func(p *protectedServer)
		asks  int      // authorization URLs the user is sent to
		wants []string // in the error
	}{
		{"server refuses the new token", func(p *protectedServer) { p.refuseTokens = true }, 1,
			[]string{`server "secure" refused the new tokens`, "401"}},
		{"token endpoint answers 400", func(p *protectedServer) { p.refuseCodes = true }, 1,
			[]string{`server "secure"`, "invalid_grant", "400"}},
		{"registration answers an HTML page", func(p *protectedServer) { p.htmlRegister = true }, 0,
			[]string{`server "secure"`, "502", "text/html"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := newProtectedServer(t, time.Minute)
			ps.mu.Lock()
			tc.bad(ps)
			ps.mu.Unlock()
			cfg := parse(t, fmt.Sprintf("server \"secure\" {\n  url = %q\n  oauth {}\n}\n", ps.URL()))
			var asked atomic.Int32
			open := func(ctx context.Context, authURL string) error {
				asked.Add(1)
				return testutil.Browser(ctx, authURL)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := host.Login(ctx, cfg, "secure", host.LoginOptions{Open: open, TokenStore: t.TempDir()})
			if err == nil {
				t.Fatal("login succeeded")
			}
			if n := int(asked.Load()); n != tc.asks {
				t.Errorf("the user was sent to %d authorization URLs, want %d", n, tc.asks)
			}
			msg := err.Error()
			t.Logf("login: %s", msg)
			for _, want := range tc.wants {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not contain %q", msg, want)
				}
			}
			for _, page := range []string{"<html", "<script", "Bad Gateway</h1>", "trackError"} {
				if strings.Contains(msg, page) {
					t.Errorf("error %q quotes the server's HTML page (%q)", msg, page)
				}
			}
			if strings.Count(msg, "401") > 1 || strings.Count(msg, "400") > 1 {
				t.Errorf("error %q reports the refusal more than once", msg)
			}
		})
	}
}
