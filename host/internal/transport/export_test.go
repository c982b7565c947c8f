package transport

import "github.com/mcpvisor/mcpvisor/host/internal/resources"

// WithoutCgroups makes the processes started until restore is called
// enforce their limits without cgroups (sampling and rlimits), as on a
// machine without them.
func WithoutCgroups() (restore func()) {
	newLimits = resources.NewWithoutCgroups
	return func() { newLimits = resources.New }
}

// The limiter's constants, for the tests in package transport_test.
const (
	OutputBurst        = outputBurst
	OutputRate         = outputRate
	OutputSummaryDelay = outputSummaryDelay
)
