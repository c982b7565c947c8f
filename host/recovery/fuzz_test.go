package recovery_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/host/recovery"
)

var tokenShape = regexp.MustCompile(`^[A-Za-z0-9]{8,40}$`)

// FuzzRedact: whatever surrounds it, a bearer token or a token= query value
// never survives redaction, and redaction never panics.
func FuzzRedact(f *testing.F) {
	f.Add("calling https://x/mcp?token=", "abcdef123456", " failed")
	f.Add(`{"Authorization": "Bearer `, "s3cr3tT0ken", `"}`)
	f.Add("401 Unauthorized: Bearer ", "zzzzzzzzzz", "")
	f.Fuzz(func(t *testing.T, before, tok, after string) {
		if !tokenShape.MatchString(tok) {
			return
		}
		templates := []func(string) string{
			func(x string) string { return before + "Bearer " + x + " " + after },
			func(x string) string { return before + "?token=" + x + "&" + after },
			func(x string) string { return before + "Authorization: Bearer " + x + "\n" + after },
		}
		for _, tmpl := range templates {
			in := tmpl(tok)
			out := recovery.Redact(in)
			// The token's characters may also occur in the surrounding
			// text by chance; compare with the same input minus the token.
			masked := recovery.Redact(tmpl(strings.Repeat("#", len(tok))))
			if strings.Count(out, tok) > strings.Count(masked, tok) {
				t.Fatalf("Redact(%q) = %q still holds the token", in, out)
			}
		}
	})
}

// FuzzIsSessionGone: classification never panics and a canceled context
// never counts as a session expiry.
func FuzzIsSessionGone(f *testing.F) {
	f.Add("Invalid or expired session")
	f.Add("Tool failed to execute")
	f.Add("")
	f.Fuzz(func(t *testing.T, msg string) {
		recovery.IsSessionGone(errors.New(msg))
		if recovery.IsSessionGone(errors.Join(errors.New(msg), errCanceled)) {
			t.Fatalf("a canceled error counted as session gone: %q", msg)
		}
	})
}

var errCanceled = contextCanceled()
