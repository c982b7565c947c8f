package cli

// The local operator credential (docs/auth.md, "The operator
// credential"; host/localsock.go). A process mcpvisor started runs as the
// user and can find and reach the control socket, so the socket and the
// uid behind it prove nothing: the CLI proves it is the operator with a
// secret in the user's runtime directory — the 0700 directory of the
// control sockets, outside every sandbox grant mcpvisor makes — that
// every `run` of the user shares:
//
//	<runtime dir>/operator-token   (0600, 32 random bytes, hex)
//
// The first `run` creates it (write a temporary file, then link it into
// place, so a second `run` racing it reads a whole token or makes its
// own and loses the link); the CLI reads it and sends it over the control
// socket only — never over TCP, where whoever listens on the port could
// collect it. Remove the file to make a new one: hosts read it at start.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// operatorTokenFile is the credential's name in the runtime directory.
const operatorTokenFile = "operator-token"

// operatorTokenBytes is the credential's length before hex encoding.
const operatorTokenBytes = 32

// readOperatorToken reads the credential from dir, checking that the file
// is a regular file of ours that no one else can read.
func readOperatorToken(dir string) (string, error) {
	path := filepath.Join(dir, operatorTokenFile)
	fi, err := os.Lstat(path)
	if err != nil {
		return "", err
	}
	fix := fmt.Sprintf("remove it (rm %s) and start mcpvisor again, which makes a new one", path)
	switch {
	case !fi.Mode().IsRegular():
		return "", &untrustedError{path, "it is not a regular file", fix}
	case permBitsArePrivate && fi.Mode().Perm()&0o077 != 0:
		return "", &untrustedError{path, fmt.Sprintf("it is readable by group or others (mode %04o, want 0600)", fi.Mode().Perm()), fix}
	}
	if uid, ok := fileOwner(fi); ok && uid != os.Geteuid() {
		return "", &untrustedError{path, fmt.Sprintf("it is owned by uid %d, not by you (uid %d)", uid, os.Geteuid()), fix}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) != 2*operatorTokenBytes {
		return "", &untrustedError{path, "it does not hold a token mcpvisor made", fix}
	}
	return tok, nil
}

// ensureOperatorToken returns the credential in dir, making it first when
// there is none.
func ensureOperatorToken(dir string) (string, error) {
	tok, err := readOperatorToken(dir)
	if !errors.Is(err, fs.ErrNotExist) {
		return tok, err
	}
	b := make([]byte, operatorTokenBytes)
	rand.Read(b)
	tmp, err := os.CreateTemp(dir, operatorTokenFile+".*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(hex.EncodeToString(b) + "\n"); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	// Link, not rename: a token another `run` put there first stays.
	if err := os.Link(tmp.Name(), filepath.Join(dir, operatorTokenFile)); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	return readOperatorToken(dir)
}

// hostPids returns the pids of the mcpvisor hosts of this user that serve
// a control socket in dir (any config): a process one of them started is
// refused at every host's door (host.LocalOperator.OtherHosts).
func hostPids(dir string) []int {
	socks, _ := filepath.Glob(filepath.Join(dir, "*-*.sock"))
	var pids []int
	for _, sock := range socks {
		base := strings.TrimSuffix(filepath.Base(sock), ".sock")
		pid, err := strconv.Atoi(base[strings.LastIndexByte(base, '-')+1:])
		if err != nil || checkSocket(sock) != nil || !processAlive(pid) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}
