// Package resources bounds and measures the resources of one stdio
// server's process group: memory, processes and open files
// (docs/design.md §18.2, docs/sandbox.md "Limits").
//
// A Group is made for each process a server's limits apply to. Where
// mcpvisor can create a cgroup (cgroup v2 with the memory and pids
// controllers available to it, or cgroup v1's memory and pids
// hierarchies), the kernel enforces the memory and process limits and a
// kernel OOM kill is seen in the cgroup's counters; closing the Group
// kills every process left in the cgroup. Where it cannot, those limits
// are refused (ErrNotEnforceable) unless the block says best_effort: the
// memory limit is then enforced by sampling (SampledMemory) and the
// process limit not at all. The open files limit is always
// RLIMIT_NOFILE: it bounds each process.
//
// Usage (resident memory and CPU time of a process group) is read from
// /proc for status and the metrics gauges, with or without limits.
package resources

import (
	"errors"
	"time"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/sandbox"
)

// SampleInterval is how often a Group's watcher checks memory: the
// cgroup's OOM kill counter, or, without a memory cgroup, the process
// group's resident memory. A server can go this long past its limit
// before it is stopped (a memory cgroup stops it at the limit itself).
const SampleInterval = 250 * time.Millisecond

// Limits are the bounds of one server's process group; a zero field sets
// no bound. It is config.Limits, the server's limits block.
type Limits = config.Limits

// Usage is what a process group uses.
type Usage struct {
	// RSS is the resident memory of the group's live processes, in bytes.
	RSS int64
	// CPU is the user and system time of the group's live processes and
	// of the children they have waited for.
	CPU time.Duration
	// Processes counts the group's live processes.
	Processes int
}

// Rlimit is one resource limit a process is given before it runs: the
// launcher's own type (docs/design.md §18.2), which sets them in the child.
type Rlimit = sandbox.Rlimit

// LauncherSpec is what a launcher that runs in the child before it
// executes the server must do for the limits: set Rlimits and write its
// own pid to the cgroup.procs of each of CgroupDirs.
type LauncherSpec struct {
	Rlimits    []Rlimit
	CgroupDirs []string
}

// ErrUnsupported is returned where this platform has no way to enforce
// limits (validation refuses a limits block there).
var ErrUnsupported = errors.New("resource limits need Linux")

// MemoryLimitError is the reason a process group over its memory limit
// was stopped. It matches transport.ErrMemoryLimit through the sentinel
// the caller gives it (Is), so this package need not import transport.
type MemoryLimitError struct {
	// Limit is the configured limit in bytes.
	Limit int64
	// RSS is the group's sampled memory (SampledMemory) when it was seen
	// over the limit (0 when the kernel's OOM killer acted inside the
	// cgroup).
	RSS int64
	// OOMKill is set when the kernel killed a process of the group at
	// the cgroup's limit.
	OOMKill bool
	// Sentinel is what errors.Is matches (transport.ErrMemoryLimit).
	Sentinel error
}

// Error is "memory limit 512MiB exceeded", the limit written as in the
// configuration.
func (e *MemoryLimitError) Error() string {
	return "memory limit " + config.FormatSize(e.Limit) + " exceeded"
}

// Is reports whether target is the error's sentinel.
func (e *MemoryLimitError) Is(target error) bool {
	return e.Sentinel != nil && target == e.Sentinel
}
