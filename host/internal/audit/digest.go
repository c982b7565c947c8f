package audit

/*
Design note: the argument digest.

A plain SHA-256 of a call's arguments lets anyone who reads the audit log
confirm a guess offline: hash {"password":"hunter2"} and grep. So the
digest is an HMAC-SHA256 under a random 32-byte key that the log's
readers do not have. The key is kept in a file of its own, not beside the
log (which is shipped, rotated and made group-readable):

	$STATE_DIRECTORY (systemd's StateDirectory=), else
	$XDG_STATE_HOME/mcpvisor, else ~/.local/state/mcpvisor
	/audit-hmac.key, 64 hex digits, mode 0600, created on first use

so that the digests of one call's arguments match across restarts, and
the replicas that share the file match each other. A key file that is not
a regular file of ours with mode 0600 (or stricter) is refused; when the
file cannot be read or made, the host uses a key of its own for this
process only, and says so: its digests match only within the process.
Every payload names its key by a short id (digest_key), so a reader knows
which digests can be compared. See docs/security.md, "Audit log".
*/

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// keyFileName is the digest key's file in the state directory.
const keyFileName = "audit-hmac.key"

// digestKey is the HMAC key of the argument and result digests.
type digestKey struct {
	key []byte
	// id names the key in every payload: the first 8 hex digits of its
	// SHA-256 (which says nothing about the key itself).
	id string
}

func newDigestKey(key []byte) *digestKey {
	sum := sha256.Sum256(key)
	return &digestKey{key: key, id: hex.EncodeToString(sum[:4])}
}

// sum is the hex HMAC-SHA256 of b.
func (k *digestKey) sum(b []byte) string {
	m := hmac.New(sha256.New, k.key)
	m.Write(b)
	return hex.EncodeToString(m.Sum(nil))
}

// stateDir is where the key file lives.
func stateDir() (string, error) {
	if d := os.Getenv("STATE_DIRECTORY"); d != "" {
		// systemd may list several, separated by colons.
		d, _, _ = strings.Cut(d, ":")
		return d, nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "mcpvisor"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".local", "state", "mcpvisor"), nil
}

// loadDigestKey reads the key file, making it first if there is none. On
// an error the caller falls back to a key of its own (processDigestKey).
func loadDigestKey() (*digestKey, string, error) {
	dir, err := stateDir()
	if err != nil {
		return nil, "", err
	}
	path := filepath.Join(dir, keyFileName)
	k, err := readKeyFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := writeKeyFile(dir, path); err != nil {
			return nil, path, err
		}
		k, err = readKeyFile(path)
	}
	return k, path, err
}

// readKeyFile reads and checks the key file at path.
func readKeyFile(path string) (*digestKey, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if uid, ok := fileOwner(fi); ok && uid != os.Geteuid() {
		return nil, fmt.Errorf("%s is owned by uid %d, not by this process's uid %d", path, uid, os.Geteuid())
	}
	if perm := fi.Mode().Perm(); permBitsArePrivate && perm&0o077 != 0 {
		return nil, fmt.Errorf("%s has mode %04o; others could read the key: run chmod 600 %s", path, perm, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) < 32 {
		return nil, fmt.Errorf("%s does not hold a key of 64 hex digits; remove it and mcpvisor makes a new one", path)
	}
	return newDigestKey(key), nil
}

// writeKeyFile makes a new key file at path: written whole to a temporary
// file, then linked into place, so that a concurrent reader (another
// replica starting) sees the whole key or none, and the first writer
// wins.
func writeKeyFile(dir, path string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	key := make([]byte, 32)
	rand.Read(key)
	tmp, err := os.CreateTemp(dir, keyFileName+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	// CreateTemp makes it 0600.
	if _, err := tmp.WriteString(hex.EncodeToString(key) + "\n"); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// processDigestKey is a key for this process only.
func processDigestKey() *digestKey {
	key := make([]byte, 32)
	rand.Read(key)
	return newDigestKey(key)
}
