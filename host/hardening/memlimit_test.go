//go:build unix

package hardening_test

import (
	"os"
	"strings"
	"testing"
)

// The real binary sets the Go runtime's memory limit from the host
// block's budgets (1.5 × max_inflight_bytes + max_body_bytes_inflight +
// 128 MiB; docs/security.md, "Worst case memory"), and GOMEMLIMIT in the
// environment wins.
func TestMemoryLimitFromBudgets(t *testing.T) {
	mv := startMcpvisorWith(t, "  max_inflight_bytes = \"64MiB\"\n  max_body_bytes_inflight = \"32MiB\"\n", echoBlock())
	// 96 MiB + 32 MiB + 128 MiB.
	if log := mv.stderr.String(); !strings.Contains(log, "memory limit set from max_inflight_bytes") || !strings.Contains(log, "limit=256MiB") {
		t.Errorf("no memory limit of 256MiB in the log:\n%s", tail(log, 20))
	}
	env := append(os.Environ(), "GOMEMLIMIT=1GiB")
	mv = startMcpvisorEnv(t, env, "", echoBlock())
	if log := mv.stderr.String(); !strings.Contains(log, "memory limit from the environment") || strings.Contains(log, "memory limit set from") {
		t.Errorf("GOMEMLIMIT=1GiB did not win:\n%s", tail(log, 20))
	}
}
