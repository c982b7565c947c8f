package policy

import (
	"path"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/identity"
)

// FuzzMatch checks the glob matcher against path.Match, its reference: for
// tools and prompts it is path.Match; for resources it is path.Match with
// "/" an ordinary character, so a name without "/" matches alike, and a
// glob config.CheckGlob accepts never fails to compile.
func FuzzMatch(f *testing.F) {
	for _, s := range [][2]string{{"*", "a__b"}, {"github__search_*", "github__search_code"}, {"notes://*", "notes://a/b"}, {"[a-", "a"}, {"\\*", "*"}, {"file:///home/*/x", "file:///home/a/b/x"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, glob, name string) {
		want, err := path.Match(glob, name)
		if got := Match(Tool, glob, name); got != (err == nil && want) {
			t.Fatalf("Match(Tool, %q, %q) = %v; path.Match says %v, %v", glob, name, got, want, err)
		}
		res := Match(Resource, glob, name)
		if !strings.Contains(glob+name, "/") && !strings.Contains(glob+name, "\x00") && res != (err == nil && want) {
			t.Fatalf("Match(Resource, %q, %q) = %v without a slash; path.Match says %v", glob, name, res, want)
		}
		if res && glob != "" && config.CheckGlob(glob) != nil {
			t.Fatalf("Match(Resource, %q, %q) matched a glob CheckGlob refuses", glob, name)
		}
		if err == nil && want && !res && !strings.Contains(glob+name, "\x00") {
			t.Fatalf("Match(Resource, %q, %q) = false where path.Match matches", glob, name)
		}
	})
}

// FuzzSubject checks that a selector config.ParseSubject refuses matches
// nobody, and that one it accepts matches the caller it describes.
func FuzzSubject(f *testing.F) {
	for _, s := range []string{"*", "token", "local", "anonymous", "sub:x", "email:A@b", "group:g", "client:c", "grp:x", "sub:", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sel string) {
		kind, value, err := config.ParseSubject(sel)
		verified := true
		callers := []*identity.Subject{nil, {Via: identity.ViaToken}, {Via: identity.ViaLocal, ID: value}, {Via: identity.ViaOIDC, ID: value, Email: value, EmailVerified: &verified, Groups: []string{value}, Client: value}}
		if err != nil {
			for _, c := range callers {
				if Applies(sel, c) {
					t.Fatalf("the refused selector %q applies to %+v", sel, c)
				}
			}
			return
		}
		want := map[string]int{config.SubjectAnonymous: 0, config.SubjectToken: 1, config.SubjectLocal: 2, config.SubjectAny: 3,
			config.SubjectID: 3, config.SubjectEmail: 3, config.SubjectGroup: 3, config.SubjectClient: 3}[kind]
		if !Applies(sel, callers[want]) {
			t.Fatalf("selector %q (%s %q) does not apply to %+v", sel, kind, value, callers[want])
		}
	})
}
