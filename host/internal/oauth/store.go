package oauth

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/oauth2"

	"github.com/mcpvisor/mcpvisor/host/internal/statedir"
)

// StateDirEnv names the variable that, when set, is the base of the token
// store (the XDG Base Directory variable for state data).
const StateDirEnv = statedir.Env

// A Store keeps one file of tokens per server in a directory only the user
// can read. Files are replaced atomically (write a temporary file, then
// rename), so a host reading a file while `mcpvisor login` writes it sees
// the old tokens or the new ones, never half of each.
type Store struct {
	dir string
}

// DefaultStoreDir is the directory tokens are stored in: the user's state
// directory (statedir.Dir).
func DefaultStoreDir() (string, error) {
	dir, err := statedir.Dir()
	if err != nil {
		return "", fmt.Errorf("finding the token store directory: %w", err)
	}
	return dir, nil
}

// NewStore returns a store in dir. The directory is created on the first
// write.
func NewStore(dir string) *Store { return &Store{dir: dir} }

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// A Record is what the store keeps for one server: the tokens and what is
// needed to refresh them without discovering again.
type Record struct {
	// ServerURL and ConfiguredClientID are the key the record was stored
	// under; a record whose key no longer matches the server block is
	// ignored.
	ServerURL          string `json:"server_url"`
	ConfiguredClientID string `json:"configured_client_id,omitempty"`

	// ClientID is the client the tokens were issued to: the configured one,
	// a dynamically registered one, or a client metadata document URL.
	ClientID string `json:"client_id"`
	// ClientSecret is kept only for a dynamically registered client; a
	// configured secret stays in the configuration.
	ClientSecret string `json:"client_secret,omitempty"`
	// TokenURL and AuthStyle say how to refresh.
	TokenURL  string           `json:"token_url"`
	AuthStyle oauth2.AuthStyle `json:"auth_style"`
	// Resource is the RFC 8707 resource indicator the tokens are for.
	Resource string   `json:"resource,omitempty"`
	Scopes   []string `json:"scopes,omitempty"`
	// StepUpScopes are the scopes the server asked for in a 403
	// insufficient_scope challenge to these tokens, with those granted:
	// the next login requests them all (step-up authorization).
	StepUpScopes []string `json:"step_up_scopes,omitempty"`

	Token *oauth2.Token `json:"token"`
	// ObtainedAt is when Token was issued, to refresh it well before
	// expiry whatever its lifetime.
	ObtainedAt time.Time `json:"obtained_at"`
}

// Key identifies a server's tokens: its URL and the configured client id
// ("" for dynamic registration).
type Key struct {
	Server   string // the server block's name, for a readable file name
	URL      string
	ClientID string
}

// Path is the file the key's tokens are stored in.
func (s *Store) Path(k Key) string {
	sum := sha256.Sum256([]byte(k.URL + "\x00" + k.ClientID))
	return filepath.Join(s.dir, safeFileName(k.Server)+"-"+hex.EncodeToString(sum[:8])+".json")
}

// Load returns the record stored for k, or nil when there is none (or it
// was stored for another URL or client id).
func (s *Store) Load(k Key) (*Record, error) {
	data, err := os.ReadFile(s.Path(k))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the token store: %w", err)
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("token store file %s is corrupt (%v); run `mcpvisor login %s` again", s.Path(k), jsonErrorKind(err), k.Server)
	}
	if r.ServerURL != k.URL || r.ConfiguredClientID != k.ClientID || r.Token == nil {
		return nil, nil
	}
	return &r, nil
}

// Save stores r for k, atomically, readable by the user only.
func (s *Store) Save(k Key, r *Record) error {
	r.ServerURL, r.ConfiguredClientID = k.URL, k.ClientID
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding tokens: %w", err)
	}
	if err := s.ensureDir(); err != nil {
		return err
	}
	f, err := os.CreateTemp(s.dir, ".tokens-*")
	if err != nil {
		return fmt.Errorf("writing the token store: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if err := f.Chmod(0o600); err != nil && runtime.GOOS != "windows" {
		f.Close()
		return fmt.Errorf("writing the token store: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing the token store: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("writing the token store: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing the token store: %w", err)
	}
	if err := os.Rename(tmp, s.Path(k)); err != nil {
		return fmt.Errorf("writing the token store: %w", err)
	}
	return nil
}

// Delete removes k's tokens. It reports whether there were any.
func (s *Store) Delete(k Key) (bool, error) {
	err := os.Remove(s.Path(k))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("removing tokens: %w", err)
	}
	return true, nil
}

// ensureDir creates the store directory 0700, and narrows an existing one
// that others could read.
func (s *Store) ensureDir() error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("creating the token store directory: %w", err)
	}
	if runtime.GOOS == "windows" {
		return nil
	}
	fi, err := os.Stat(s.dir)
	if err != nil {
		return fmt.Errorf("creating the token store directory: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(s.dir, 0o700); err != nil {
			return fmt.Errorf("token store directory %s is readable by others and cannot be narrowed: %w", s.dir, err)
		}
	}
	return nil
}

// safeFileName keeps a server name readable in a file name without letting
// it name another directory.
func safeFileName(name string) string {
	var b strings.Builder
	for _, r := range name {
		if r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := strings.TrimLeft(b.String(), ".")
	if len(s) > 64 {
		s = s[:64]
	}
	if s == "" {
		s = "server"
	}
	return s
}

// jsonErrorKind describes a decode error without quoting the file, which
// holds secrets.
func jsonErrorKind(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("invalid JSON at byte %d", se.Offset)
	}
	return "unexpected content"
}
