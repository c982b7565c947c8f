package gateway

import (
	"context"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// newSlogLogger adapts an hclog logger for the go-sdk, which logs through
// log/slog. The SDK logs every session connect and subscription at info,
// which is noise for an operator, so levels shift down one step: info
// becomes debug, debug becomes trace, and error becomes warn (the SDK
// reports a client going away as an error; mcpvisor itself logs real
// failures).
func newSlogLogger(l hclog.Logger) *slog.Logger {
	return slog.New(&hclogHandler{l: l})
}

type hclogHandler struct {
	l      hclog.Logger
	group  string
	fields []any
}

func hclogLevel(l slog.Level) hclog.Level {
	switch {
	case l >= slog.LevelWarn:
		return hclog.Warn
	case l >= slog.LevelInfo:
		return hclog.Debug
	default:
		return hclog.Trace
	}
}

func (h *hclogHandler) Enabled(_ context.Context, l slog.Level) bool {
	lvl := hclogLevel(l)
	return h.l.GetLevel() != hclog.Off && h.l.GetLevel() <= lvl
}

func (h *hclogHandler) Handle(_ context.Context, r slog.Record) error {
	args := make([]any, 0, len(h.fields)+2*r.NumAttrs())
	args = append(args, h.fields...)
	r.Attrs(func(a slog.Attr) bool {
		args = append(args, h.key(a.Key), a.Value.Resolve().Any())
		return true
	})
	lvl := hclogLevel(r.Level)
	if lvl == hclog.Warn && strings.HasPrefix(r.Message, "calling notifications/") {
		// A notification (list_changed, resource updated) that could not
		// reach a session whose client has gone away: one line per dead
		// session on every change is noise, not a problem to act on.
		lvl = hclog.Debug
	}
	h.l.Log(lvl, r.Message, args...)
	return nil
}

func (h *hclogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	h2 := *h
	h2.fields = append([]any(nil), h.fields...)
	for _, a := range attrs {
		h2.fields = append(h2.fields, h.key(a.Key), a.Value.Resolve().Any())
	}
	return &h2
}

func (h *hclogHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	h2 := *h
	h2.group = h.key(name)
	return &h2
}

func (h *hclogHandler) key(k string) string {
	if h.group == "" {
		return k
	}
	return h.group + "." + k
}
