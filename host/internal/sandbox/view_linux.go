package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

/*
Design note: the server's view (docs/design.md §18.1).

The launcher is cloned into new mount and pid namespaces (and a user
namespace when mcpvisor is not root: the mounts need CAP_SYS_ADMIN, which
it then holds only inside that namespace, until the exec). Before anything
else it makes every mount private, so nothing it does reaches the host.

It builds the server's root the way bubblewrap does: a tmpfs over its
private temporary directory (fresh and empty at each start, so nothing is
hidden by it), pivoted into with the host's root at /old, so every source
is /old/PATH whatever the tmpfs covered. On a second tmpfs at /new it binds
each granted path at its own (real) path — read grants read-only and
nosuid, recursively — mirrors the symbolic links on the way to each (/lib →
usr/lib, /etc/resolv.conf → /run/systemd/…), covers the hidden paths with
an empty read-only tmpfs (or file), mounts a fresh /proc (the pid
namespace's own: no other process's cmdline, environ or maps), adds
/dev/fd and /dev/std* links, and pivots into /new, detaching everything
else. The root itself is made read-only last. The Landlock rules are built
after, on the view's own paths and its own /proc.

A path that is not granted does not exist for the server: a Unix socket
elsewhere cannot be connected to (whatever the Landlock ABI), a file
elsewhere cannot even be stat'ed.
*/

// viewStep is one mount of a view, in the order of their paths (parents
// first); at one path a grant comes before a hide.
type viewStep struct {
	path string // real path (no symbolic link on the way), in the view
	kind int
	dir  bool
}

const (
	stepRead = iota
	stepWrite
	stepHide
)

// enterView builds v and pivots into it; the working directory is v.Dir
// after. Paths of the Landlock lists that the view does not show are
// dropped from them (a grant below a hidden path).
func enterView(v *View, l *Landlock) error {
	steps, links, err := planView(v)
	if err != nil {
		return err
	}
	dir, dirReal := v.Dir, ""
	if dir != "" {
		real, dirLinks, err := realPath(dir)
		if err != nil {
			return fmt.Errorf("resolving the working directory %s for the server's view: %w", dir, err)
		}
		dirReal = real
		links = append(links, dirLinks...)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the server's mounts private: %w", err)
	}
	base := v.Tmp
	if err := unix.Mount("tmpfs", base, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		return fmt.Errorf("mounting the scratch tmpfs of the server's view on %s: %w", base, err)
	}
	for _, d := range []string{"old", "new"} {
		if err := os.Mkdir(filepath.Join(base, d), 0o755); err != nil {
			return err
		}
	}
	if err := unix.PivotRoot(base, filepath.Join(base, "old")); err != nil {
		return fmt.Errorf("pivoting into the server's view: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	const old, nr = "/old", "/new"
	if err := unix.Mount("tmpfs", nr, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		return fmt.Errorf("mounting the root of the server's view: %w", err)
	}
	var hidden []string
	for _, s := range steps {
		dst := nr + s.path
		if err := makeMountpoint(dst, s.dir); err != nil {
			return fmt.Errorf("making the mount point of %s in the server's view: %w", s.path, err)
		}
		if s.kind == stepHide {
			if s.dir {
				err = unix.Mount("tmpfs", dst, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=4k")
			} else {
				// An empty file of the scratch tmpfs, outside the view.
				if err = os.WriteFile("/empty", nil, 0o444); err == nil || os.IsExist(err) {
					err = unix.Mount("/empty", dst, "", unix.MS_BIND, "")
				}
			}
			if err != nil {
				return fmt.Errorf("hiding %s in the server's view: %w", s.path, err)
			}
			hidden = append(hidden, dst)
			continue
		}
		if s.path == "/proc" {
			if err := unix.Mount("proc", dst, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
				return fmt.Errorf("mounting the /proc of the server's pid namespace: %w", err)
			}
			continue
		}
		if err := unix.Mount(old+s.path, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("binding %s into the server's view: %w", s.path, err)
		}
		var set uint64 = unix.MOUNT_ATTR_NOSUID
		if s.kind == stepRead {
			set |= unix.MOUNT_ATTR_RDONLY
		}
		if err := setMountAttr(dst, set, true); err != nil {
			return fmt.Errorf("making %s read-only in the server's view: %w", s.path, err)
		}
	}
	for _, ln := range links {
		dst := nr + ln[0]
		if _, err := os.Lstat(dst); err == nil {
			continue // inside a bound tree, where it is already
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.Symlink(ln[1], dst); err != nil {
			return fmt.Errorf("linking %s in the server's view: %w", ln[0], err)
		}
	}
	if _, err := os.Stat(nr + "/dev"); err == nil {
		for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
			if _, err := os.Lstat(nr + "/dev/" + name); err != nil {
				os.Symlink(target, nr+"/dev/"+name)
			}
		}
	}
	if dirReal != "" {
		if _, err := os.Stat(nr + dirReal); err != nil {
			// Not granted: an empty directory, so the server starts
			// where it was told and finds nothing there.
			if err := os.MkdirAll(nr+dirReal, 0o755); err != nil {
				return fmt.Errorf("making the working directory %s in the server's view: %w", dir, err)
			}
		}
	}
	for _, h := range hidden {
		if err := setMountAttr(h, unix.MOUNT_ATTR_RDONLY, false); err != nil {
			return fmt.Errorf("making a hidden path read-only in the server's view: %w", err)
		}
	}
	// The old root goes: pivot into /new and detach what is stacked
	// over it (the scratch tmpfs, and /old under it).
	if err := os.Chdir(nr); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivoting into the server's view: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the host's file system from the server's view: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	if err := setMountAttr("/", unix.MOUNT_ATTR_RDONLY, false); err != nil {
		return fmt.Errorf("making the root of the server's view read-only: %w", err)
	}
	if dir != "" {
		if err := os.Chdir(dir); err != nil {
			if err := os.Chdir(dirReal); err != nil {
				return fmt.Errorf("entering the working directory %s in the server's view: %w", dir, err)
			}
		}
	}
	if l != nil {
		missing := func(p string) bool { _, err := os.Stat(p); return err != nil }
		l.Read = slices.DeleteFunc(l.Read, missing)
		l.Write = slices.DeleteFunc(l.Write, missing)
	}
	return nil
}

// planView resolves v's paths on the host, before the pivot: the mounts
// in order, and the symbolic links to recreate ([path, target]).
func planView(v *View) ([]viewStep, [][2]string, error) {
	var steps []viewStep
	var links [][2]string
	seen := map[string]bool{}
	add := func(p string, kind int) error {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("the server's view takes absolute paths only, not %q", p)
		}
		real, ls, err := realPath(p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && kind == stepHide {
				return nil
			}
			return fmt.Errorf("resolving %s for the server's view: %w", p, err)
		}
		for _, ln := range ls {
			if !seen[ln[0]] {
				seen[ln[0]] = true
				links = append(links, ln)
			}
		}
		st, err := os.Stat(real)
		if err != nil {
			return fmt.Errorf("resolving %s for the server's view: %w", p, err)
		}
		steps = append(steps, viewStep{path: real, kind: kind, dir: st.IsDir()})
		return nil
	}
	for _, p := range v.Read {
		if err := add(p, stepRead); err != nil {
			return nil, nil, err
		}
	}
	for _, p := range v.Write {
		if err := add(p, stepWrite); err != nil {
			return nil, nil, err
		}
	}
	for _, p := range v.Hide {
		if err := add(p, stepHide); err != nil {
			return nil, nil, err
		}
	}
	tmp, _, err := realPath(v.Tmp)
	if err != nil {
		return nil, nil, err
	}
	under := func(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") || dir == "/" }
	var hides, grants []viewStep
	for _, s := range steps {
		if s.kind == stepHide {
			hides = append(hides, s)
		} else {
			grants = append(grants, s)
		}
	}
	// A hidden path counts only where a grant would show it; a grant
	// below a hidden path is hidden with it, but for the server's own
	// temporary directory.
	steps = steps[:0]
	for _, g := range grants {
		if g.path != tmp && slices.ContainsFunc(hides, func(h viewStep) bool { return under(g.path, h.path) }) {
			continue
		}
		steps = append(steps, g)
	}
	for _, h := range hides {
		if slices.ContainsFunc(grants, func(g viewStep) bool {
			return under(h.path, g.path) && g.path != h.path || g.path == h.path && g.path != tmp
		}) {
			steps = append(steps, h)
		}
	}
	// Parents first; at one path, read before write before hide; a
	// grant already covered by an equal one above it is left out.
	slices.SortStableFunc(steps, func(a, b viewStep) int {
		if c := strings.Compare(a.path, b.path); c != 0 {
			return c
		}
		return a.kind - b.kind
	})
	var out []viewStep
	for _, s := range steps {
		if s.kind != stepHide && len(out) > 0 {
			// The nearest mount above s: if it is the same kind of
			// grant, s is already there.
			var above *viewStep
			for i := len(out) - 1; i >= 0; i-- {
				if under(s.path, out[i].path) {
					above = &out[i]
					break
				}
			}
			if above != nil && above.kind == s.kind && s.path != "/proc" {
				continue
			}
		}
		out = append(out, s)
	}
	return out, links, nil
}

// realPath resolves p's symbolic links one by one, returning its real
// path and each link met on the way ([link, its target as written]).
func realPath(p string) (string, [][2]string, error) {
	var links [][2]string
	for range 40 {
		cur, rest, restarted := "/", strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/"), false
		for i, c := range rest {
			if c == "" {
				continue
			}
			next := filepath.Join(cur, c)
			fi, err := os.Lstat(next)
			if err != nil {
				return "", nil, err
			}
			if fi.Mode()&fs.ModeSymlink != 0 {
				t, err := os.Readlink(next)
				if err != nil {
					return "", nil, err
				}
				links = append(links, [2]string{next, t})
				if !filepath.IsAbs(t) {
					t = filepath.Join(cur, t)
				}
				p = filepath.Join(append([]string{t}, rest[i+1:]...)...)
				restarted = true
				break
			}
			cur = next
		}
		if !restarted {
			return cur, links, nil
		}
	}
	return "", nil, syscall.ELOOP
}

// makeMountpoint makes dst (a directory, or an empty file) and its
// parents; one that exists is left as it is.
func makeMountpoint(dst string, dir bool) error {
	if _, err := os.Lstat(dst); err == nil {
		return nil
	}
	if dir {
		return os.MkdirAll(dst, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o444)
	if err != nil {
		return err
	}
	return f.Close()
}

// setMountAttr sets attributes (MOUNT_ATTR_RDONLY, _NOSUID) of the mount
// at path, and of every mount below it when recursive.
func setMountAttr(path string, set uint64, recursive bool) error {
	var flags uint = unix.AT_SYMLINK_NOFOLLOW
	if recursive {
		flags |= unix.AT_RECURSIVE
	}
	err := unix.MountSetattr(unix.AT_FDCWD, path, flags, &unix.MountAttr{Attr_set: set})
	if !errors.Is(err, unix.ENOSYS) {
		return err
	}
	// Before Linux 5.12: a remount of that mount alone, keeping the
	// flags a user namespace may not clear.
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return err
	}
	mf := uintptr(unix.MS_REMOUNT | unix.MS_BIND)
	for _, f := range [][2]uintptr{{unix.ST_RDONLY, unix.MS_RDONLY}, {unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV}, {unix.ST_NOEXEC, unix.MS_NOEXEC}, {unix.ST_NOATIME, unix.MS_NOATIME}, {unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME}} {
		if uintptr(st.Flags)&f[0] != 0 {
			mf |= f[1]
		}
	}
	if set&unix.MOUNT_ATTR_RDONLY != 0 {
		mf |= unix.MS_RDONLY
	}
	if set&unix.MOUNT_ATTR_NOSUID != 0 {
		mf |= unix.MS_NOSUID
	}
	return unix.Mount("", path, "", mf, "")
}

func fileUID(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

// viewProcAttr adds what the launcher of a contained start is cloned
// with: new mount and pid namespaces, and a user namespace mapping only
// mcpvisor's own ids when mcpvisor is not root (CAP_SYS_ADMIN there, for
// the mounts, dropped before the server's exec).
func viewProcAttr(spec *Spec, attr *syscall.SysProcAttr) {
	if !spec.Contained() {
		return
	}
	attr.Cloneflags |= syscall.CLONE_NEWNS | syscall.CLONE_NEWPID
	if os.Geteuid() != 0 {
		userNamespace(attr)
		attr.AmbientCaps = append(attr.AmbientCaps, unix.CAP_SYS_ADMIN)
	}
}

// userNamespace adds a user namespace mapping only mcpvisor's own uid
// and gid to attr.
func userNamespace(attr *syscall.SysProcAttr) {
	attr.Cloneflags |= syscall.CLONE_NEWUSER
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Geteuid(), HostID: os.Geteuid(), Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getegid(), HostID: os.Getegid(), Size: 1}}
	attr.GidMappingsEnableSetgroups = false
}
