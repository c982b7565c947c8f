// Package secrets keeps the values that env("NAME") in a configuration
// falls back to when NAME is not in mcpvisor's environment (docs/config.md,
// "Secrets"): `mcpvisor secret set NAME` stores one, a running host picks
// it up on its next reload, and the value never enters config.hcl, argv
// or a log.
//
// A Store keeps them in the OS keyring (macOS Keychain, Windows Credential
// Manager, the Secret Service of a desktop session on Linux) through
// github.com/zalando/go-keyring, and where no keyring runs (a headless
// Linux machine: no D-Bus session bus) in a file, secrets.json, mode 0600
// in the user's state directory (0700), the directory `mcpvisor login`
// keeps its tokens in. The keyring has no way to list its items, so the
// names are kept as one more item beside the values.
package secrets

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sync"

	"github.com/zalando/go-keyring"
)

// BackendEnv, set to "file", makes a Store use the file even where a
// keyring runs (for a service account, or a test that must not touch the
// user's keyring); set to "keyring", it makes a missing keyring an error.
const BackendEnv = "MCPVISOR_SECRETS"

const (
	// service is the keyring service mcpvisor's items are filed under.
	service = "mcpvisor"
	// namesItem is the keyring item holding the stored names (JSON).
	namesItem = "mcpvisor.names"
	// fileName is the file store, in the state directory.
	fileName = "secrets.json"
	// maxFile bounds what is read of the file store.
	maxFile = 1 << 20
	// maxValue bounds one value: secrets are tokens and keys.
	maxValue = 64 << 10
)

// NameRE is what a secret may be called: an environment variable's name,
// since env("NAME") is what reads it.
var NameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ErrNoKeyring is the error of a Store that BackendEnv requires to be the
// keyring where none runs.
var ErrNoKeyring = errors.New("no OS keyring is running")

// A Store reads and writes the user's secrets. Its methods are safe for
// concurrent use within one process; across processes the file store is
// replaced atomically (a reader sees the old file or the new one).
type Store struct {
	dir string

	once    sync.Once
	keyring bool  // probed once
	err     error // ErrNoKeyring when the keyring was required and absent
	mu      sync.Mutex
}

// Open returns the Store whose file lives in dir (the user's state
// directory, see oauth.DefaultStoreDir). Which backend it uses is decided
// at its first use.
func Open(dir string) *Store { return &Store{dir: dir} }

// Backend says where the secrets are kept, for `secret list` and errors.
func (s *Store) Backend() string {
	if s.useKeyring() {
		return "the OS keyring (service \"mcpvisor\")"
	}
	return s.path()
}

func (s *Store) path() string { return filepath.Join(s.dir, fileName) }

// useKeyring probes the keyring once. On Linux it is tried only with a
// session bus to reach (DBUS_SESSION_BUS_ADDRESS): without one the D-Bus
// library would try to launch a bus of its own.
func (s *Store) useKeyring() bool {
	s.once.Do(func() {
		switch os.Getenv(BackendEnv) {
		case "file":
			return
		case "keyring":
			s.err = ErrNoKeyring
		}
		if runtime.GOOS == "linux" && os.Getenv("DBUS_SESSION_BUS_ADDRESS") == "" {
			return
		}
		_, err := keyring.Get(service, namesItem)
		if err == nil || errors.Is(err, keyring.ErrNotFound) {
			s.keyring, s.err = true, nil
		}
	})
	return s.keyring
}

// Lookup returns the value stored under name, and whether there is one.
func (s *Store) Lookup(name string) (string, bool, error) {
	if s.useKeyring() {
		v, err := keyring.Get(service, name)
		if errors.Is(err, keyring.ErrNotFound) {
			return "", false, nil
		}
		if err != nil {
			return "", false, fmt.Errorf("reading secret %s from the OS keyring: %w", name, err)
		}
		return v, true, nil
	}
	if s.err != nil {
		return "", false, s.err
	}
	m, err := s.readFile()
	if err != nil {
		return "", false, err
	}
	v, ok := m[name]
	return v, ok, nil
}

// Set stores value under name, replacing any value it had.
func (s *Store) Set(name, value string) error {
	if !NameRE.MatchString(name) {
		return fmt.Errorf("secret name %q: use letters, digits and _, not starting with a digit (it is what env(%q) reads)", name, name)
	}
	if len(value) > maxValue {
		return fmt.Errorf("secret %s: the value is %d bytes; at most %d are kept", name, len(value), maxValue)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.useKeyring() {
		if err := keyring.Set(service, name, value); err != nil {
			return fmt.Errorf("storing secret %s in the OS keyring: %w", name, err)
		}
		return s.editNames(func(names []string) []string {
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
			return names
		})
	}
	if s.err != nil {
		return s.err
	}
	m, err := s.readFile()
	if err != nil {
		return err
	}
	m[name] = value
	return s.writeFile(m)
}

// Delete removes name; it reports whether there was a value.
func (s *Store) Delete(name string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.useKeyring() {
		err := keyring.Delete(service, name)
		if errors.Is(err, keyring.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("deleting secret %s from the OS keyring: %w", name, err)
		}
		return true, s.editNames(func(names []string) []string {
			return slices.DeleteFunc(names, func(n string) bool { return n == name })
		})
	}
	if s.err != nil {
		return false, s.err
	}
	m, err := s.readFile()
	if err != nil {
		return false, err
	}
	if _, ok := m[name]; !ok {
		return false, nil
	}
	delete(m, name)
	return true, s.writeFile(m)
}

// Names lists the stored names, sorted; never their values.
func (s *Store) Names() ([]string, error) {
	var names []string
	if s.useKeyring() {
		var err error
		if names, err = s.keyringNames(); err != nil {
			return nil, err
		}
	} else {
		if s.err != nil {
			return nil, s.err
		}
		m, err := s.readFile()
		if err != nil {
			return nil, err
		}
		for n := range m {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names, nil
}

func (s *Store) keyringNames() ([]string, error) {
	raw, err := keyring.Get(service, namesItem)
	if errors.Is(err, keyring.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the secret names from the OS keyring: %w", err)
	}
	var names []string
	if err := json.Unmarshal([]byte(raw), &names); err != nil {
		return nil, fmt.Errorf("the OS keyring's item %q is not a list of names: %w", namesItem, err)
	}
	return names, nil
}

// editNames rewrites the keyring's list of names. s.mu is held.
func (s *Store) editNames(edit func([]string) []string) error {
	names, err := s.keyringNames()
	if err != nil {
		return err
	}
	b, _ := json.Marshal(edit(names))
	if err := keyring.Set(service, namesItem, string(b)); err != nil {
		return fmt.Errorf("storing the secret names in the OS keyring: %w", err)
	}
	return nil
}

// readFile reads the file store; a missing file is an empty store. A
// file or directory others can read, or that is not the user's, is
// refused: its values may have been read, or planted.
func (s *Store) readFile() (map[string]string, error) {
	m := map[string]string{}
	f, err := os.Open(s.path())
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the secret store: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading the secret store: %w", err)
	}
	if err := private(s.path(), fi); err != nil {
		return nil, err
	}
	if fi.Size() > maxFile {
		return nil, fmt.Errorf("the secret store %s is %d bytes, more than a secret store holds (%d); move it away", s.path(), fi.Size(), maxFile)
	}
	b := make([]byte, fi.Size())
	if _, err := f.ReadAt(b, 0); err != nil && fi.Size() > 0 {
		return nil, fmt.Errorf("reading the secret store %s: %w", s.path(), err)
	}
	if len(b) == 0 {
		return m, nil
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("the secret store %s is not a JSON object of names and values (%v); move it away and set the secrets again", s.path(), err)
	}
	return m, nil
}

// writeFile replaces the file store with m: a 0600 file written beside it,
// then renamed over it, in a 0700 directory.
func (s *Store) writeFile(m map[string]string) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("creating the secret store's directory: %w", err)
	}
	if fi, err := os.Stat(s.dir); err == nil {
		if err := private(s.dir, fi); err != nil {
			return err
		}
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(s.dir, ".secrets-*.tmp")
	if err != nil {
		return fmt.Errorf("writing the secret store: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("writing the secret store: %w", err)
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("writing the secret store: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing the secret store: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.path()); err != nil {
		return fmt.Errorf("writing the secret store: %w", err)
	}
	return nil
}
