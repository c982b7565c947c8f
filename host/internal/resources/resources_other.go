//go:build !linux

package resources

import "github.com/hashicorp/go-hclog"

// Group is the limits of one server process; off Linux it enforces
// nothing (validation refuses a limits block there).
type Group struct{ limits Limits }

// New returns a Group that enforces nothing (Apply then refuses).
func New(server string, l Limits, sentinel error, logger hclog.Logger) (*Group, error) {
	return &Group{limits: l}, nil
}

// NewWithoutCgroups is New: off Linux there are no cgroups anyway.
func NewWithoutCgroups(server string, l Limits, sentinel error, logger hclog.Logger) (*Group, error) {
	return New(server, l, sentinel, logger)
}

// RemoveLeftovers does nothing off Linux: no cgroups.
func RemoveLeftovers(logger hclog.Logger) {}

// Mode is "none": no limits off Linux.
func (g *Group) Mode() string { return "none" }

// CgroupDirs is empty off Linux.
func (g *Group) CgroupDirs() []string { return nil }

// Spec is empty off Linux.
func (g *Group) Spec() LauncherSpec { return LauncherSpec{} }

// Apply fails when there are limits to enforce.
func (g *Group) Apply(pid int) error {
	if g == nil || g.limits.IsZero() {
		return nil
	}
	return ErrUnsupported
}

// MemoryByCgroup is false off Linux.
func (g *Group) MemoryByCgroup() bool { return false }

// OOMKills is 0 off Linux.
func (g *Group) OOMKills() uint64 { return 0 }

// Check never reports an excess off Linux.
func (g *Group) Check(pgid, except int) *MemoryLimitError { return nil }

// Watch returns at once off Linux.
func (g *Group) Watch(pgid, except int, done <-chan struct{}, over func(*MemoryLimitError)) {}

// Close does nothing off Linux.
func (g *Group) Close() {}

// Usage is not available off Linux.
func (g *Group) Usage(pgid, except int) (Usage, bool) { return Usage{}, false }

// GroupUsage is not available off Linux.
func GroupUsage(pgid, except int) (u Usage, ok bool) { return Usage{}, false }

// Plan is how this machine enforces a limits block: off Linux, not at
// all (validation refuses the block).
type Plan struct {
	Memory, Processes, OpenFiles, Kill string
	Unenforceable                      []error
}

// PlanLimits says that nothing is enforced off Linux.
func PlanLimits(server string, l Limits) Plan {
	p := Plan{Kill: "process group only"}
	if !l.IsZero() {
		p.Unenforceable = []error{ErrUnsupported}
	}
	return p
}
