// Package telemetry turns what the supervisors observe (upstream.Observer)
// into Prometheus metrics, OpenTelemetry spans, audit log lines and the
// per-server call counts `mcpvisor status` shows. The host owns one
// Observer and hands it to every supervisor; none of this is process-wide
// state, so two hosts in one process keep apart.
package telemetry

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpvisor/mcpvisor/host/internal/audit"
	"github.com/mcpvisor/mcpvisor/host/internal/identity"
	"github.com/mcpvisor/mcpvisor/host/internal/limits"
	"github.com/mcpvisor/mcpvisor/host/internal/registry"
	"github.com/mcpvisor/mcpvisor/host/internal/upstream"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// Options configure an Observer. Every part is optional.
type Options struct {
	// Metrics turns on the Prometheus collector and the call counts of
	// Stats.
	Metrics bool
	// Status lists the servers for the state gauges; Sessions counts the
	// open downstream sessions.
	Status   func() []upstream.Status
	Sessions func() int
	// TracerProvider, if set, traces every forwarded operation.
	TracerProvider trace.TracerProvider
	// Audit, if set, gets one line per forwarded operation.
	Audit *audit.Log
	// Logger receives audit write failures.
	Logger hclog.Logger
	// Replica, when not empty, is a constant "replica" label on every
	// metric, so that the series of several replicas stay apart.
	Replica string
	// MaxNamesPerServer and MaxNames bound the tool label values (tool
	// and prompt names) of one server and of all servers; calls past
	// them are counted under OtherName. Zero means
	// DefaultMaxNamesPerServer and DefaultMaxNames.
	MaxNamesPerServer, MaxNames int

	// LimitHits counts what the host's bounds refused; the metrics report
	// it as mcpvisor_limit_hits_total, and count into it the calls whose
	// response was over max_message_size or found max_inflight_bytes full.
	LimitHits *limits.Hits
}

// Observer implements upstream.Observer for one host.
type Observer struct {
	metrics *Metrics
	tracer  *tracer
	audit   *audit.Log
	logger  hclog.Logger

	stats sync.Map // server → *serverStats

	// auditFailing is set while audit writes fail, so a full disk is
	// logged once rather than once per call.
	auditFailing atomic.Bool
}

// New returns an Observer, or nil when opts turn nothing on.
func New(opts Options) *Observer {
	if !opts.Metrics && opts.TracerProvider == nil && opts.Audit == nil {
		return nil
	}
	o := &Observer{audit: opts.Audit, logger: opts.Logger}
	if o.logger == nil {
		o.logger = hclog.NewNullLogger()
	}
	if opts.Metrics {
		o.metrics = newMetrics(opts.Status, opts.Sessions, opts.LimitHits, opts.Replica, opts.MaxNamesPerServer, opts.MaxNames)
	}
	if opts.TracerProvider != nil {
		o.tracer = newTracer(opts.TracerProvider)
	}
	return o
}

// Collector is the Prometheus collector of mcpvisor's metrics, nil when
// metrics are off.
func (o *Observer) Collector() prometheus.Collector {
	if o == nil || o.metrics == nil {
		return nil
	}
	return o.metrics
}

// Tracing reports whether operations are traced.
func (o *Observer) Tracing() bool { return o != nil && o.tracer != nil }

// AddServer prepares a server's series and counts.
func (o *Observer) AddServer(name string) {
	if o == nil {
		return
	}
	o.serverStats(name)
	if o.metrics != nil {
		o.metrics.addServer(name)
	}
}

// SetCatalog records the tools and prompts a server offers, which bound
// the tool label of its calls.
func (o *Observer) SetCatalog(server string, cat *registry.Catalog) {
	if o != nil && o.metrics != nil {
		o.metrics.setCatalog(server, cat)
	}
}

// CallStats are one server's call counts since the host started.
type CallStats struct {
	// Calls counts finished operations; Errors those that ended in an
	// error rather than a result (tool errors are results).
	Calls, Errors uint64
	// LastError is the last error's message, redacted; LastErrorAt when.
	LastError   string
	LastErrorAt time.Time
}

type serverStats struct {
	calls, errors atomic.Uint64
	mu            sync.Mutex
	lastErr       string
	lastErrAt     time.Time
}

func (o *Observer) serverStats(name string) *serverStats {
	if s, ok := o.stats.Load(name); ok {
		return s.(*serverStats)
	}
	s, _ := o.stats.LoadOrStore(name, &serverStats{})
	return s.(*serverStats)
}

// Stats returns a server's call counts (zero when nothing is observed).
func (o *Observer) Stats(server string) CallStats {
	if o == nil {
		return CallStats{}
	}
	s, ok := o.stats.Load(server)
	if !ok {
		return CallStats{}
	}
	st := s.(*serverStats)
	st.mu.Lock()
	defer st.mu.Unlock()
	return CallStats{Calls: st.calls.Load(), Errors: st.errors.Load(), LastError: st.lastErr, LastErrorAt: st.lastErrAt}
}

// StateChanged implements upstream.Observer.
func (o *Observer) StateChanged(server string, from, to upstream.State) {
	if o.metrics != nil {
		o.metrics.stateChanged(server, from, to)
	}
}

// BreakerChanged implements upstream.Observer.
func (o *Observer) BreakerChanged(server string, from, to upstream.BreakerState) {
	if o.metrics != nil {
		o.metrics.breakerChanged(server, from, to)
	}
}

// ConnectFinished implements upstream.Observer.
func (o *Observer) ConnectFinished(server string, gen uint64, initial bool, err error) {
	if o.metrics != nil {
		o.metrics.connectFinished(server, gen, initial, err)
	}
}

// Restarted implements upstream.Observer.
func (o *Observer) Restarted(server string, gen uint64, reason upstream.RestartReason) {
	if o.metrics != nil {
		o.metrics.restarted(server, reason)
	}
}

// Notification implements upstream.Observer.
func (o *Observer) Notification(server, kind string, forwarded bool) {
	if o.metrics != nil {
		o.metrics.notification(server, kind, forwarded)
	}
}

// CallStarted implements upstream.Observer.
func (o *Observer) CallStarted(ctx context.Context, c *upstream.Call) context.Context {
	if o.metrics != nil {
		o.metrics.callStarted(c)
	}
	if o.tracer != nil {
		ctx = o.tracer.start(ctx, c)
	}
	return ctx
}

// CallFinished implements upstream.Observer.
func (o *Observer) CallFinished(ctx context.Context, c *upstream.Call) {
	if o.metrics != nil {
		o.metrics.callFinished(c)
	}
	st := o.serverStats(c.Server)
	st.calls.Add(1)
	if failed(c.Outcome) {
		st.errors.Add(1)
		msg := ""
		if c.Err != nil {
			msg = audit.RedactText(c.Err.Error())
		}
		st.mu.Lock()
		st.lastErr, st.lastErrAt = msg, c.Start.Add(c.Duration)
		st.mu.Unlock()
	}
	var traceID string
	if o.tracer != nil {
		traceID = o.tracer.finish(ctx, c)
	}
	if o.audit != nil {
		if err := o.audit.Record(c, traceID, identity.FromContext(ctx)); err != nil {
			if !o.auditFailing.Swap(true) {
				o.logger.Error("audit log write failed; calls go unrecorded until it works again", "path", o.audit.Path(), "error", err)
			}
		} else if o.auditFailing.Load() {
			o.auditFailing.Store(false)
			o.logger.Info("audit log writes work again", "path", o.audit.Path())
		}
	}
}

// PolicyDecision counts one policy decision on a call: decision is
// "allow", "deny" or "rate_limited", policy the name of the policy block
// that decided ("" for the default deny); or "operator_denied" with
// policy "" for a refused request to an operator endpoint. Never
// labelled by subject: subjects are unbounded (docs/auth.md).
func (o *Observer) PolicyDecision(decision, policy string) {
	if o == nil || o.metrics == nil {
		return
	}
	o.metrics.policyDecisions.WithLabelValues(decision, policy).Inc()
}

// failed reports whether an outcome is an error answered to the caller.
func failed(o upstream.Outcome) bool {
	switch o {
	case upstream.OutcomeOK, upstream.OutcomeReplayed, upstream.OutcomeToolError:
		return false
	}
	return true
}

// errorKind is the error.type of a span and the error_kind of an audit
// line: the recovery class.
func errorKind(c recovery.Class) string { return c.String() }
