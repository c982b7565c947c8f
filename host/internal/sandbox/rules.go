package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// The runtime defaults (docs/sandbox.md "The sandbox"): what any server
// needs to start, added to the sandbox block's own read and write lists.
// A default that does not exist on this machine is left out.
var (
	// systemRead are the system's programs and libraries.
	systemRead = []string{"/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin"}
	// etcRead is what of /etc the C library, Node, Python and Go read:
	// the dynamic loader's cache and configuration, name resolution,
	// users and groups (not their passwords: /etc/shadow is never
	// granted, and hidden even from a block that grants /etc), the time
	// zone, CA certificates and TLS configuration, the alternatives'
	// links, MIME types, the OS release. Not /etc as a whole.
	etcRead = []string{
		"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/ld.so.preload",
		"/etc/nsswitch.conf", "/etc/resolv.conf", "/etc/hosts", "/etc/host.conf", "/etc/gai.conf",
		"/etc/services", "/etc/protocols", "/etc/networks",
		"/etc/passwd", "/etc/group",
		"/etc/localtime", "/etc/timezone", "/etc/hostname",
		"/etc/ssl", "/etc/ca-certificates", "/etc/ca-certificates.conf", "/etc/pki", "/etc/crypto-policies",
		"/etc/alternatives", "/etc/mime.types", "/etc/os-release", "/etc/lsb-release",
	}
	// etcGlobs are per-version directories of /etc (Debian's Python
	// reads /etc/python3.N/sitecustomize.py at start).
	etcGlobs = []string{"/etc/python3*"}
	// kernelRead is what runtimes read of the kernel's views: /proc (Node
	// and Python read /proc/self), the CPU count and cgroup limits that
	// Node, Go and uv size themselves by.
	kernelRead = []string{"/proc", "/sys/fs/cgroup", "/sys/devices/system/cpu"}
	// devRead and devWrite are the harmless devices.
	devRead  = []string{"/dev/random", "/dev/urandom"}
	devWrite = []string{"/dev/null", "/dev/zero", "/dev/full"}
	// nodeCommands run on Node: the npm cache and node's installation are
	// theirs.
	nodeCommands = []string{"node", "npx", "npm", "pnpm", "pnpx", "yarn", "corepack"}
	// uvCommands run on uv: its cache and data (tools, Pythons) are theirs.
	uvCommands = []string{"uv", "uvx"}
)

// Rules are a server's effective sandbox rules: the block's own and the
// runtime defaults, every path absolute.
type Rules struct {
	// Read are readable (and executable); Write readable and writable.
	Read  []string
	Write []string
	// Caches are the Write entries that the runtime's tools create when
	// missing (~/.npm, ~/.cache/uv, …); mcpvisor creates them (0700)
	// before the start.
	Caches []string
	// Network is config.NetworkAny or config.NetworkNone; Connect the
	// only TCP ports it may connect to (none: any).
	Network string
	Connect []int
	// BestEffort: start with what the kernel can enforce.
	BestEffort bool
	// ConnectUnix are the Unix socket paths it may connect to; without
	// them it may make no Unix socket but with socketpair.
	ConnectUnix []string
	// Seccomp is the system call filter.
	Seccomp *Seccomp
}

// Effective computes the rules of a server with sandbox block sb whose
// command resolved to path, run with environment env (the child's) in
// directory cwd, which is not granted (docs/sandbox.md "The runtime
// defaults"). A path of the block that does not exist is an error
// naming it; a default that does not exist is left out. The private
// temporary directory is not among them: it is made at each start
// (Prepare).
func Effective(sb *config.Sandbox, server, command, path string, env []string, cwd string) (Rules, error) {
	r := Rules{Network: sb.Network, Connect: slices.Clone(sb.Connect), BestEffort: sb.BestEffort, ConnectUnix: slices.Clone(sb.ConnectUnix)}
	if r.Network == "" {
		r.Network = config.NetworkAny
	}
	r.Seccomp = &Seccomp{UnixSockets: len(sb.ConnectUnix) > 0, TCPOnly: len(sb.Connect) > 0, UDP: sb.UDP}
	for _, f := range []struct {
		key   string
		paths []string
	}{{"read", sb.Read}, {"write", sb.Write}} {
		for _, p := range f.paths {
			if _, err := os.Stat(p); err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return Rules{}, fmt.Errorf("%s in the sandbox of %q lists %s, which does not exist: create it, or remove it from the list", f.key, server, p)
				}
				return Rules{}, fmt.Errorf("%s in the sandbox of %q lists %s: %w", f.key, server, p, err)
			}
		}
	}
	home := envValue(env, "HOME")
	read := append(existing(systemRead), existing(etcRead)...)
	for _, g := range etcGlobs {
		m, _ := filepath.Glob(g)
		read = append(read, m...)
	}
	read = append(read, existing(kernelRead)...)
	read = append(read, existing(devRead)...)
	write := existing(devWrite)

	// The command's installation: its directory, and for a link (npx →
	// ../lib/node_modules/npm/bin/npx-cli.js) the package it points into.
	read = append(read, installation(path, home)...)
	base := filepath.Base(command)
	switch {
	case slices.Contains(nodeCommands, base):
		if node, err := lookPath("node", envValue(env, "PATH")); err == nil {
			read = append(read, prefix(node, home))
		}
		cache := envValue(env, "npm_config_cache")
		if cache == "" && home != "" {
			cache = filepath.Join(home, ".npm")
		}
		if cache != "" {
			r.Caches = append(r.Caches, cache)
		}
		if home != "" {
			read = append(read, existing([]string{filepath.Join(home, ".npmrc")})...)
		}
	case slices.Contains(uvCommands, base):
		cacheHome, dataHome, configHome := envValue(env, "XDG_CACHE_HOME"), envValue(env, "XDG_DATA_HOME"), envValue(env, "XDG_CONFIG_HOME")
		if home != "" {
			cacheHome = cmp(cacheHome, filepath.Join(home, ".cache"))
			dataHome = cmp(dataHome, filepath.Join(home, ".local", "share"))
			configHome = cmp(configHome, filepath.Join(home, ".config"))
		}
		if c := cmp(envValue(env, "UV_CACHE_DIR"), join(cacheHome, "uv")); c != "" {
			r.Caches = append(r.Caches, c)
		}
		if d := join(dataHome, "uv"); d != "" {
			r.Caches = append(r.Caches, d)
		}
		read = append(read, existing([]string{join(configHome, "uv")})...)
		if bin := join(home, ".local", "bin"); bin != "" {
			read = append(read, existing([]string{bin})...)
		}
	}
	write = append(write, r.Caches...)
	// The working directory is not granted: it is the configuration
	// file's directory by default, which may hold config.hcl and its
	// secrets. A server that reads it lists it in read or write.
	r.Write = dedupe(append(write, sb.Write...))
	// What may be written may be read: a read path under a write path
	// adds nothing.
	r.Read = slices.DeleteFunc(dedupe(append(read, sb.Read...)), func(p string) bool {
		return len(dedupe(append(slices.Clone(r.Write), p))) == len(r.Write)
	})
	return r, nil
}

// installation is what of a command's own installation it may read: the
// directory of the resolved command, and for a symbolic link the
// directory above its target's, the package the link points into.
func installation(path, home string) []string {
	if path == "" {
		return nil
	}
	out := []string{within(filepath.Dir(path), path, home)}
	if t, err := filepath.EvalSymlinks(path); err == nil && t != path {
		out = append(out, within(filepath.Dir(filepath.Dir(t)), t, home))
	}
	return out
}

// prefix is an installation's prefix: /usr/local for /usr/local/bin/node,
// ~/.nvm/versions/node/v22 for its node.
func prefix(bin, home string) string {
	if t, err := filepath.EvalSymlinks(bin); err == nil {
		bin = t
	}
	return within(filepath.Dir(filepath.Dir(bin)), bin, home)
}

// within is dir, unless granting dir would grant the whole file system
// or the whole home directory (a command in ~ itself): then file alone.
func within(dir, file, home string) string {
	if tooBroad(dir, home) {
		return file
	}
	return dir
}

// tooBroad reports whether a default would open / or the user's home
// directory (or a directory above it) as a whole, and with it ~/.ssh and
// every other secret there. A default never does; a block's own path may.
func tooBroad(dir, home string) bool {
	dir = filepath.Clean(dir)
	if dir == "/" {
		return true
	}
	if home == "" {
		return false
	}
	home = filepath.Clean(home)
	return dir == home || strings.HasPrefix(home, dir+"/")
}

// lookPath finds file in the directories of pathList (the child's PATH).
func lookPath(file, pathList string) (string, error) {
	for _, dir := range filepath.SplitList(pathList) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, file)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fs.ErrNotExist
}

func existing(paths []string) []string {
	var out []string
	for _, p := range paths {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// dedupe keeps each path once, in order, and drops a path already covered
// by an earlier one's tree (/usr/local/bin under /usr).
func dedupe(paths []string) []string {
	var out []string
	for _, p := range paths {
		p = filepath.Clean(p)
		covered := false
		for _, q := range out {
			if p == q || strings.HasPrefix(p, q+string(filepath.Separator)) || q == "/" {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, p)
		}
	}
	return out
}

func envValue(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val
		}
	}
	return v
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func join(dir string, elem ...string) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(append([]string{dir}, elem...)...)
}

// Summary is the one-line description of a sandbox block that status
// shows: "landlock: read 3, write 1; net none". The counts are the
// block's own paths; the runtime defaults come on top (`mcpvisor sandbox
// NAME` lists them all).
func Summary(sb *config.Sandbox) string {
	if sb == nil {
		return ""
	}
	net := sb.Network
	if net == "" {
		net = config.NetworkAny
	}
	s := fmt.Sprintf("landlock: read %d, write %d; net %s", len(sb.Read), len(sb.Write), net)
	if len(sb.Connect) > 0 {
		ports := make([]string, len(sb.Connect))
		for i, p := range sb.Connect {
			ports[i] = strconv.Itoa(p)
		}
		s += ", connect " + strings.Join(ports, " ")
	}
	if sb.UDP {
		s += ", udp"
	}
	if len(sb.ConnectUnix) > 0 {
		s += fmt.Sprintf(", unix %d", len(sb.ConnectUnix))
	}
	if sb.User != "" {
		s += "; user " + sb.User
	}
	if sb.BestEffort {
		s += "; best effort"
	}
	return s
}

// NeededABI is the Landlock ABI that enforces every rule of a sandbox: 3
// for the filesystem (truncation is controlled from ABI 3 on), 4 with
// connect rules (TCP).
func NeededABI(connect bool) int {
	if connect {
		return 4
	}
	return 3
}

// safeName is a server's name as part of a file name.
func safeName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b[:min(len(b), 40)])
}

// setEnv returns env with name set to value (and only once).
func setEnv(env []string, name, value string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); ok && k == name {
			continue
		}
		out = append(out, kv)
	}
	return append(out, name+"="+value)
}
