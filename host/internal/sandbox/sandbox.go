// Package sandbox confines a stdio server's process with the kernel
// (docs/design.md §18.1): Landlock filesystem and TCP connect rules, a
// network namespace of its own for network = "none", and — for the
// limits of §18.2 — rlimits and cgroups joined before the server runs.
//
// The confinement is applied by a launcher: mcpvisor's own binary,
// re-executed (/proc/self/exe) with a Spec in its environment. An init
// function of this package, which runs before main in every binary that
// imports package host (and in every test binary that imports this
// package), sees the Spec and applies it to its own process. With limits
// alone it execs the server's command in place, so the pid, the process
// group and the keeper (transport/group.go) are the server's exactly as
// without a launcher. With a sandbox block it builds the server's view of
// the machine in mount and pid namespaces of its own and stays as the
// init of that pid namespace, the server its child (view.go,
// init_linux.go). The Spec never reaches the server: the command runs
// with the environment the Spec carries, which does not hold it.
package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
)

// specEnv names the environment variable that carries a Spec to the
// launcher. It is the launcher's whole environment.
const specEnv = "MCPVISOR_LAUNCH_SPEC"

// launcherArg0 is the launcher's argv[0], what ps shows for the moment
// between the re-exec and the exec of the server.
const launcherArg0 = "mcpvisor-launcher"

// ExitLaunchFailed is the launcher's exit status when it could not apply
// its Spec or exec the command; its reason is on the server's stderr.
const ExitLaunchFailed = 125

// ErrUnsupported is returned where the sandbox is not available.
var ErrUnsupported = errors.New("the sandbox needs Linux (Landlock and namespaces)")

// Spec is what the launcher applies to itself before it execs the
// server's command.
type Spec struct {
	// Path is the resolved command to exec; Args its argv, Args[0]
	// included; Env its complete environment.
	Path string   `json:"path"`
	Args []string `json:"args"`
	Env  []string `json:"env"`
	// Landlock, when set, restricts the filesystem and TCP connects.
	Landlock *Landlock `json:"landlock,omitempty"`
	// OwnNetwork is set when the launcher was started in a network
	// namespace of its own (network = "none"): it brings that namespace's
	// loopback interface up, so the server can talk to itself and to
	// nothing else.
	OwnNetwork bool `json:"own_network,omitempty"`
	// Rlimits are set (setrlimit) before the exec.
	Rlimits []Rlimit `json:"rlimits,omitempty"`
	// Cgroups are cgroup directories the launcher joins (its pid written
	// to each one's cgroup.procs) before the exec, so the server and all
	// it starts are accounted there from their first instruction.
	Cgroups []string `json:"cgroups,omitempty"`
	// NoCapabilities clears every capability set of the launcher (the
	// bounding set included) before the exec: a sandboxed server holds
	// none, even when mcpvisor is root (caps_linux.go).
	NoCapabilities bool `json:"no_capabilities,omitempty"`
	// Credential, when set, is the user the server runs as (the block's
	// user and group).
	Credential *Credential `json:"credential,omitempty"`
	// Seccomp, when set, is the system call filter, loaded last before
	// the exec (seccomp.go).
	Seccomp *Seccomp `json:"seccomp,omitempty"`
	// View, when set, runs the server in a view of the machine of its
	// own, under an init (view.go).
	View *View `json:"view,omitempty"`

	// status is the pipe on which a contained start's init reports the
	// server's exit status (init_linux.go): mcpvisor's read end, the
	// init's write end until Started.
	status [2]*os.File
}

// Landlock is the filesystem and network part of a Spec: every path
// exists, directories and files alike.
type Landlock struct {
	// Read may be read and executed; Write read, written, created and
	// removed.
	Read  []string `json:"read,omitempty"`
	Write []string `json:"write,omitempty"`
	// Connect, when not empty, are the only TCP ports connect(2) may
	// reach.
	Connect []int `json:"connect,omitempty"`
	// ConnectUnix are Unix socket paths the server may connect to: from
	// ABI 9, Landlock allows connecting to them (and to sockets under
	// Write) only.
	ConnectUnix []string `json:"connect_unix,omitempty"`
	// BestEffort applies what the kernel's Landlock ABI can enforce
	// instead of refusing to start.
	BestEffort bool `json:"best_effort,omitempty"`
}

// Rlimit is one resource limit of a Spec (setrlimit(2)).
type Rlimit struct {
	// Resource is the RLIMIT_* number (syscall.RLIMIT_NOFILE, …).
	Resource int `json:"resource"`
	// Cur and Max are the soft and hard limits.
	Cur uint64 `json:"cur"`
	Max uint64 `json:"max"`
}

// Needed reports whether a Spec does anything the launcher must apply:
// without it, a server is started directly.
func (s *Spec) Needed() bool {
	return s.Landlock != nil || s.OwnNetwork || len(s.Rlimits) > 0 || len(s.Cgroups) > 0 || s.NoCapabilities || s.Credential != nil || s.Seccomp != nil || s.View != nil
}

// maxSpec bounds the encoded Spec: one environment string may hold at most
// 128 KiB (the kernel's MAX_ARG_STRLEN), beyond which the exec would fail
// with a bare "argument list too long".
const maxSpec = 120 << 10

// launcherEnv is the launcher's environment: the Spec and nothing else.
func (s *Spec) launcherEnv() ([]string, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	if len(b) > maxSpec {
		return nil, fmt.Errorf("the arguments, environment and sandbox rules of the server take %d bytes, more than the launcher takes (%d KiB): shorten its args or env", len(b), maxSpec>>10)
	}
	return []string{specEnv + "=" + string(b)}, nil
}

// specFromEnv returns the Spec the launcher was started with, or nil in
// any other process.
func specFromEnv() (*Spec, error) {
	v, ok := os.LookupEnv(specEnv)
	if !ok {
		return nil, nil
	}
	var s Spec
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return nil, fmt.Errorf("reading the launch spec: %w", err)
	}
	if s.Path == "" || len(s.Args) == 0 {
		return nil, errors.New("the launch spec names no command")
	}
	return &s, nil
}

// fail ends a launcher that could not start the server, saying why on
// the server's stderr, which mcpvisor logs and quotes in status.
func fail(err error) {
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	fmt.Fprintf(os.Stderr, "mcpvisor sandbox: %s\n", msg)
	os.Exit(ExitLaunchFailed)
}
