package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// init is the launcher's hook: in a process started by Command it applies
// the Spec and execs the server's command, never returning; in any other
// process it does nothing. It runs before main (and before a test
// binary's TestMain) of every binary that imports this package.
func init() {
	spec, err := specFromEnv()
	if err != nil {
		fail(err)
	}
	if spec == nil {
		return
	}
	fail(launch(spec))
}

// launch applies spec to this process and execs its command; it returns
// only on failure.
func launch(spec *Spec) error {
	// Everything from here to the exec happens on this thread: the
	// Landlock domain is the thread's (no_new_privs and the ruleset are
	// inherited by the exec'd program).
	runtime.LockOSThread()
	for _, dir := range spec.Cgroups {
		procs := filepath.Join(dir, "cgroup.procs")
		if err := os.WriteFile(procs, []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return fmt.Errorf("joining cgroup %s: %w", dir, err)
		}
	}
	for _, r := range spec.Rlimits {
		if err := syscall.Setrlimit(r.Resource, &syscall.Rlimit{Cur: r.Cur, Max: r.Max}); err != nil {
			return fmt.Errorf("setting resource limit %d to %d: %w", r.Resource, r.Cur, err)
		}
	}
	if spec.View != nil {
		// Before Landlock, which forbids mounting.
		if err := enterView(spec.View, spec.Landlock); err != nil {
			return err
		}
	}
	if spec.OwnNetwork {
		if err := loopbackUp(); err != nil {
			return fmt.Errorf("bringing up the loopback interface of the server's network namespace: %w", err)
		}
	}
	// Not root: the launcher had CAP_NET_ADMIN and CAP_SYS_ADMIN (in its
	// own user namespace) as ambient capabilities for that; the server
	// does not keep them, in any set.
	if (spec.OwnNetwork || spec.View != nil) && os.Geteuid() != 0 {
		if err := dropCapabilities(); err != nil {
			return fmt.Errorf("dropping the launcher's capabilities: %w", err)
		}
	}
	if l := spec.Landlock; l != nil {
		if err := restrict(l); err != nil {
			return err
		}
	}
	// The last steps (caps_linux.go, user_linux.go, seccomp_linux.go):
	// no capability and the server's own user, then the system call
	// filter, which the launcher's own setup above must not meet. With a
	// view, the init (init_linux.go) is under them too, and forks the
	// server under them.
	if err := dropPrivileges(spec); err != nil {
		return err
	}
	if err := loadSeccomp(spec.Seccomp); err != nil {
		return err
	}
	if spec.View != nil {
		return runInit(spec)
	}
	err := syscall.Exec(spec.Path, spec.Args, spec.Env)
	if errors.Is(err, syscall.EACCES) && spec.Landlock != nil {
		return fmt.Errorf("starting %s: %w (if it is a script, is the interpreter on its #! line outside the sandbox's read paths? `mcpvisor sandbox NAME` lists them)", spec.Path, err)
	}
	return fmt.Errorf("starting %s: %w", spec.Path, err)
}

// dropCapabilities clears this thread's ambient, effective, permitted and
// inheritable capabilities.
func dropCapabilities() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return err
	}
	var data [2]unix.CapUserData
	return unix.Capset(&unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}, &data[0])
}

// loopbackUp sets the IFF_UP flag of "lo" in the launcher's (new, empty)
// network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// configs are go-landlock's configurations by Landlock ABI; the sandbox
// uses at most ABI 9's rights (filesystem incl. ioctl on devices and, from
// ABI 9, connecting to Unix sockets by path; TCP connect; the IPC scopes).
// ABI 10's UDP rights are not used: the block says nothing about UDP.
var configs = []landlock.Config{{}, landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5, landlock.V6, landlock.V7, landlock.V8, landlock.V9}

// abi is the kernel's Landlock ABI, 0 without Landlock.
var abi = kernelABI

// kernelABI asks the kernel.
func kernelABI() int {
	v, err := ll.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// ABI is this kernel's Landlock ABI version, 0 without Landlock.
func ABI() int { return abi() }

// neededABI is the Landlock ABI that enforces every rule of l.
func neededABI(l *Landlock) int { return NeededABI(len(l.Connect) > 0) }

// kernelNames are the first Linux releases of each Landlock ABI.
var kernelNames = map[int]string{1: "5.13", 2: "5.19", 3: "6.2", 4: "6.7", 5: "6.10", 6: "6.12", 7: "6.15"}

// checkABI fails closed: a kernel whose Landlock ABI is older than what
// l needs is an error, unless l is best effort, where it is a warning.
func checkABI(l *Landlock, server string) (warning string, err error) {
	have, need := abi(), neededABI(l)
	if have >= need {
		return "", nil
	}
	found := fmt.Sprintf("Landlock ABI %d", have)
	if have == 0 {
		found = "no Landlock (not built into the kernel, or not in the lsm= boot parameter)"
	}
	reason := fmt.Sprintf("this kernel has %s and the sandbox of %q needs ABI %d (Linux %s or later)", found, server, need, kernelNames[need])
	if l.BestEffort {
		return reason + "; best_effort = true: starting it with what the kernel can enforce", nil
	}
	return "", fmt.Errorf("%s: upgrade the kernel, or set best_effort = true in the sandbox block to start it with what the kernel can enforce", reason)
}

// restrict applies l to this thread (locked by launch) for the exec.
func restrict(l *Landlock) error {
	have := abi()
	use := min(have, len(configs)-1)
	cfg := landlock.Config{
		HandledAccessFS: configs[use].HandledAccessFS,
		Scoped:          configs[use].Scoped,
	}
	if len(l.Connect) > 0 {
		// Only connect is handled: bind stays free, as the block says
		// nothing about it.
		cfg.HandledAccessNet = configs[use].HandledAccessNet & landlock.AccessNetSet(ll.AccessNetConnectTCP)
	}
	if have < neededABI(l) {
		if !l.BestEffort {
			_, err := checkABI(l, "the server")
			return err
		}
		if have == 0 {
			return nil // nothing to enforce; mcpvisor warned
		}
	}
	var rules []landlock.Rule
	for _, p := range l.Read {
		if isDir(p) {
			rules = append(rules, landlock.RODirs(p))
		} else {
			rules = append(rules, landlock.ROFiles(p).WithIoctlDev())
		}
	}
	for _, p := range l.Write {
		var rule landlock.FSRule
		switch {
		case isDir(p) && use >= 2:
			// Moving files between its directories (ABI 2's refer right).
			rule = writeDir(cfg, p).WithRefer()
		case isDir(p):
			rule = writeDir(cfg, p)
		default:
			rule = landlock.RWFiles(p).WithIoctlDev()
		}
		if use >= 9 {
			// Its own Unix sockets, and only those (ABI 9).
			rule = rule.WithResolveUnix()
		}
		rules = append(rules, rule)
	}
	if use >= 9 {
		rules = append(rules, connectUnixRules(cfg, l.ConnectUnix)...)
	}
	for _, port := range l.Connect {
		rules = append(rules, landlock.ConnectTCP(uint16(port)))
	}
	if have >= 7 {
		// Denials of the exec'd server reach the audit log
		// (docs/sandbox.md "Finding the rule a failing server needs").
		cfg = cfg.EnableLoggingForSubprocesses()
	}
	if l.BestEffort {
		cfg = cfg.BestEffort()
	}
	fd, flags, err := cfg.NewRulesetFD(rules...)
	if err != nil {
		return fmt.Errorf("building the Landlock ruleset: %w", err)
	}
	if fd < 0 {
		return nil
	}
	defer unix.Close(fd)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("setting no_new_privs: %w", err)
	}
	if err := ll.LandlockRestrictSelf(fd, flags); err != nil {
		return fmt.Errorf("enforcing the Landlock ruleset: %w", err)
	}
	return nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// Command is the launcher's command for spec: this binary, re-executed,
// with the Spec as its only environment. The caller sets Stdin, Stdout,
// Stderr, Dir and SysProcAttr, then ProcAttr.
func Command(spec *Spec) (*exec.Cmd, error) {
	env, err := spec.launcherEnv()
	if err != nil {
		return nil, err
	}
	// /proc/self/exe rather than os.Executable: it is this very binary
	// even after an upgrade replaced the file on disk.
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{launcherArg0}
	cmd.Env = env
	if spec.View != nil {
		if err := spec.statusPipe(cmd); err != nil {
			return nil, err
		}
	}
	return cmd, nil
}

// ProcAttr adds to attr what the launcher must be cloned with: a network
// namespace of its own for spec.OwnNetwork — with a user namespace mapping
// only mcpvisor's own ids when mcpvisor is not root.
func ProcAttr(spec *Spec, attr *syscall.SysProcAttr) {
	viewProcAttr(spec, attr)
	if !spec.OwnNetwork {
		return
	}
	attr.Cloneflags |= syscall.CLONE_NEWNET
	if os.Geteuid() != 0 {
		userNamespace(attr)
		// For bringing up the namespace's loopback; dropped before the
		// server's exec.
		attr.AmbientCaps = append(attr.AmbientCaps, unix.CAP_NET_ADMIN)
	}
}

// Prepare makes the Spec of one start of a server with sandbox block sb
// (nil: no sandbox; the Spec may still carry limits) whose command
// resolved to path: the effective rules, the caches they name created
// (0700), and a private temporary directory (0700) that becomes the
// server's TMPDIR. Remove tmp once the server's process group is gone.
// warning, when set, is to be logged: best_effort on a kernel that cannot
// enforce it all.
func Prepare(sb *config.Sandbox, server, command, path string, args, env []string, cwd string) (spec *Spec, tmp, warning string, err error) {
	spec = &Spec{Path: path, Args: append([]string{command}, args...), Env: env}
	if sb == nil {
		return spec, "", "", nil
	}
	if cwd == "" {
		if cwd, err = os.Getwd(); err != nil {
			return nil, "", "", err
		}
	}
	if !filepath.IsAbs(path) {
		// Granted by its directory, which must not be ".".
		if path, err = filepath.Abs(path); err != nil {
			return nil, "", "", err
		}
		spec.Path = path
	}
	r, err := Effective(sb, server, command, path, env, cwd)
	if err != nil {
		return nil, "", "", err
	}
	l := &Landlock{Read: r.Read, Write: r.Write, Connect: r.Connect, ConnectUnix: r.ConnectUnix, BestEffort: r.BestEffort}
	if warning, err = checkABI(l, server); err != nil {
		return nil, "", "", err
	}
	if spec.Credential, err = ResolveUser(sb, server); err != nil {
		return nil, "", "", err
	}
	var filterWarning string
	if spec.Seccomp, filterWarning, err = checkSeccomp(r.Seccomp, server, r.BestEffort); err != nil {
		return nil, "", "", err
	}
	warning = strings.Join(slices.DeleteFunc([]string{warning, filterWarning}, func(w string) bool { return w == "" }), "; ")
	spec.NoCapabilities = true
	for _, c := range r.Caches {
		if err := os.MkdirAll(c, 0o700); err != nil {
			return nil, "", "", fmt.Errorf("creating %s for the sandbox of %q: %w", c, server, err)
		}
	}
	root, err := makeTmpRoot()
	if err != nil {
		return nil, "", "", fmt.Errorf("creating the private temporary directory of %q: %w", server, err)
	}
	tmp, err = os.MkdirTemp(root, "mcpvisor-"+safeName(server)+"-")
	if err != nil {
		return nil, "", "", fmt.Errorf("creating the private temporary directory of %q: %w", server, err)
	}
	if c := spec.Credential; c != nil {
		// The server's own user owns its temporary directory.
		if err := os.Chown(tmp, int(c.UID), int(c.GID)); err != nil {
			os.RemoveAll(tmp)
			return nil, "", "", fmt.Errorf("giving the private temporary directory of %q to user %s: %w", server, c.User, err)
		}
	}
	l.Write = append(l.Write, tmp)
	spec.Env = setEnv(env, "TMPDIR", tmp)
	spec.Landlock = l
	spec.OwnNetwork = r.Network == config.NetworkNone
	// The connect_unix sockets are in the view (read-only binds: a socket
	// connects on a read-only mount), and nothing else a grant does not
	// show: that is what limits the connects the filter lets through.
	read := slices.Clone(l.Read)
	for _, p := range l.ConnectUnix {
		if _, err := os.Stat(p); err == nil {
			read = append(read, p)
		}
	}
	spec.View = &View{Read: read, Write: l.Write, Hide: hiddenPaths(), Tmp: tmp, Dir: cwd}
	return spec, tmp, warning, nil
}
