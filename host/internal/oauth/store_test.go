package oauth_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/oauth2"

	"github.com/mcpvisor/mcpvisor/host/internal/oauth"
)

func TestStoreRoundTripAndPermissions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "mcpvisor")
	s := oauth.NewStore(dir)
	k := oauth.Key{Server: "../linear", URL: "https://mcp.linear.app/mcp"}
	if r, err := s.Load(k); err != nil || r != nil {
		t.Fatalf("Load before Save = %v, %v; want nil, nil", r, err)
	}
	want := &oauth.Record{
		ClientID: "dyn-1", TokenURL: "https://auth.example.com/token", Resource: k.URL,
		Token:      &oauth2.Token{AccessToken: "at", RefreshToken: "rt", TokenType: "Bearer", Expiry: time.Now().Add(time.Hour).Round(0).UTC()},
		ObtainedAt: time.Now().Round(0).UTC(),
	}
	if err := s.Save(k, want); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(k)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(oauth2.Token{})); diff != "" {
		t.Errorf("Load after Save (-want +got):\n%s", diff)
	}
	if filepath.Dir(s.Path(k)) != dir {
		t.Errorf("token file %s is outside the store %s", s.Path(k), dir)
	}
	if runtime.GOOS != "windows" {
		for path, mode := range map[string]os.FileMode{dir: 0o700, s.Path(k): 0o600} {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != mode {
				t.Errorf("%s has mode %v, want %v", path, fi.Mode().Perm(), mode)
			}
		}
	}
	// No temporary files left behind by the atomic write.
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("store holds %d files, want 1", len(entries))
	}

	// Another URL or client id is another key: the record does not apply.
	for _, other := range []oauth.Key{{Server: k.Server, URL: "https://other.example.com/mcp"}, {Server: k.Server, URL: k.URL, ClientID: "pre"}} {
		if r, err := s.Load(other); err != nil || r != nil {
			t.Errorf("Load(%+v) = %v, %v; want nothing", other, r, err)
		}
	}

	if existed, err := s.Delete(k); err != nil || !existed {
		t.Errorf("Delete = %v, %v; want true, nil", existed, err)
	}
	if existed, err := s.Delete(k); err != nil || existed {
		t.Errorf("second Delete = %v, %v; want false, nil", existed, err)
	}
}

func TestStoreNarrowsAnOpenDirectory(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no POSIX modes")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := oauth.NewStore(dir)
	if err := s.Save(oauth.Key{Server: "a", URL: "https://a.example/mcp"}, &oauth.Record{Token: &oauth2.Token{AccessToken: "x"}}); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(dir)
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("store dir mode %v after Save, want 0700", fi.Mode().Perm())
	}
}

func TestCorruptStoreFileNamesNoContent(t *testing.T) {
	dir := t.TempDir()
	s := oauth.NewStore(dir)
	k := oauth.Key{Server: "a", URL: "https://a.example/mcp"}
	if err := os.WriteFile(s.Path(k), []byte(`{"token": {"access_token": "secret-at"`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := s.Load(k)
	if err == nil {
		t.Fatal("Load of a corrupt file succeeded")
	}
	if got := err.Error(); !contains(got, "mcpvisor login a") || contains(got, "secret-at") {
		t.Errorf("error %q: want the login advice and no file content", got)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
