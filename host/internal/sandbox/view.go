package sandbox

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// View is a sandboxed server's private view of the machine
// (docs/design.md §18.1, docs/sandbox.md "What the server sees"): the
// launcher runs in a mount namespace and a pid namespace of its own
// (and a user namespace when mcpvisor is not root), pivots into a new
// root in which only the granted paths exist, mounts a /proc of its own
// pid namespace, and stays as that namespace's init while the server
// runs as its second process (init_linux.go). Nothing of the host's
// file system but the granted paths exists for the server, so a path
// Unix socket elsewhere (mcpvisor's control socket, an ssh-agent, the
// session bus) cannot be reached whatever the Landlock ABI; and when
// the init dies, the kernel kills every process of the namespace.
type View struct {
	// Read are bound read-only at their own paths, Write read-write.
	Read  []string `json:"read,omitempty"`
	Write []string `json:"write,omitempty"`
	// Hide are covered with an empty read-only directory (or file)
	// where a grant would show them: mcpvisor's runtime directory (its
	// control socket and token), the parent of the servers' private
	// temporary directories, /etc/shadow. A grant below a hidden path is
	// hidden too, except Tmp.
	Hide []string `json:"hide,omitempty"`
	// Tmp is the server's private temporary directory: its TMPDIR, and
	// the launcher's scratch space while it builds the view.
	Tmp string `json:"tmp"`
	// Dir is the server's working directory; an empty directory in the
	// view when it is not granted.
	Dir string `json:"dir,omitempty"`
}

// hiddenFiles are system files no default or grant ever shows.
var hiddenFiles = []string{"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-"}

// HiddenPaths are what a server's view covers where a grant would show
// them (for `mcpvisor sandbox NAME`).
func HiddenPaths() []string { return hiddenPaths() }

// hiddenPaths are what a view covers where a grant would show them:
// mcpvisor's runtime directories (host/cli/instances.go runtimeDir:
// $XDG_RUNTIME_DIR/mcpvisor, else $TMPDIR/mcpvisor-UID; both are
// covered, whichever this mcpvisor uses), the directory holding every
// server's private temporary directory, and hiddenFiles.
func hiddenPaths() []string {
	out := []string{filepath.Join(os.TempDir(), "mcpvisor-"+strconv.Itoa(os.Getuid()))}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		out = append(out, filepath.Join(d, "mcpvisor"))
	}
	out = append(out, tmpRoot())
	return append(out, hiddenFiles...)
}

// tmpRoot is the directory the servers' private temporary directories
// are made in: one directory (0700, mcpvisor's own) that a view can
// cover as a whole, so a server never sees another's, even one started
// after it.
func tmpRoot() string {
	return filepath.Join(os.TempDir(), "mcpvisor-"+strconv.Itoa(os.Getuid())+"-servers")
}

// makeTmpRoot creates tmpRoot (0700) if missing and checks that it is a
// directory of mcpvisor's user that no one else can enter.
func makeTmpRoot() (string, error) {
	dir := tmpRoot()
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return "", err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	uid, ok := fileUID(fi)
	if !fi.IsDir() || fi.Mode()&fs.ModeSymlink != 0 || fi.Mode().Perm()&0o077 != 0 || (ok && uid != os.Getuid()) {
		return "", fmt.Errorf("%s is not a private directory of this user (another local user may have made it to read the servers' temporary files): remove it (rm -r %s), and mcpvisor makes it again, private (0700)", dir, dir)
	}
	return dir, nil
}

// Contained reports whether the Spec starts the server in a view of its
// own, under an init: the launcher is then not the server's process but
// its init's (Process.Pid is the init's), the process group is the
// init's own (no keeper: the init dies with mcpvisor, by Pdeathsig, and
// takes the whole pid namespace with it), and the server's exit status
// comes from the init (ExitErr).
func (s *Spec) Contained() bool { return s != nil && s.View != nil }
