package cli

import (
	"cmp"
	"os"
	"runtime/debug"

	"github.com/hashicorp/go-hclog"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// memBaseline is what mcpvisor holds besides the bytes its budgets count:
// the runtime, the catalogs, sessions, buffers (docs/security.md, "Worst
// case memory").
const memBaseline = 128 << 20

// memoryLimit is the Go runtime's soft memory limit derived from the host
// block's budgets: one and a half times the response bytes in flight (a
// result is held as its bytes and, while it is handed on, a copy of part
// of it), the request bodies in flight, and the baseline. With GOGC=400
// (main.go) the heap could otherwise grow to five times what is live
// before a collection; under the limit the collector runs as often as it
// must to stay there (docs/design.md §17).
func memoryLimit(h config.Host) int64 {
	inflight := cmp.Or(h.MaxInflightBytes, config.DefaultMaxInflightBytes)
	bodies := cmp.Or(h.MaxBodyBytesInflight, config.DefaultMaxBodyBytesInflight)
	return inflight*3/2 + bodies + memBaseline
}

// setMemoryLimit sets memoryLimit unless GOMEMLIMIT is in the environment
// (an operator's value, "off" included, always wins), and logs it.
func setMemoryLimit(h config.Host, logger hclog.Logger) {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		logger.Debug("memory limit from the environment", "GOMEMLIMIT", v)
		return
	}
	limit := memoryLimit(h)
	debug.SetMemoryLimit(limit)
	logger.Debug("memory limit set from max_inflight_bytes and max_body_bytes_inflight (set GOMEMLIMIT to override)", "limit", config.FormatSize(limit))
}
