package telemetry

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpvisor/mcpvisor/host/internal/limits"
	"github.com/mcpvisor/mcpvisor/host/internal/registry"
	"github.com/mcpvisor/mcpvisor/host/internal/upstream"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// Label values that stand for many.
const (
	// OtherName is the tool (or prompt) label of a call to a name that is
	// not in its server's catalog, or past the bounds on names.
	OtherName = "_other"

	// DefaultMaxNamesPerServer bounds the tool and prompt label values one
	// server can create: a catalog is the upstream's to choose, and every
	// distinct value is a series for as long as the name stays listed.
	DefaultMaxNamesPerServer = 500

	// DefaultMaxNames bounds the tool and prompt label values of all
	// servers together, so that many servers at their own bound cannot
	// add up to an unbounded number of series.
	DefaultMaxNames = 5000

	// ReplicaLabel is the constant label naming the replica on every
	// metric (the host block's replica).
	ReplicaLabel = "replica"
)

// states and breakerStates are every value the state gauges report, so
// each server has a full, stable set of series.
var (
	states        = []upstream.State{upstream.StateStarting, upstream.StateReady, upstream.StateReconnecting, upstream.StateParked, upstream.StateStopped, upstream.StateNeedsLogin, upstream.StateNeedsConfig, upstream.StateIdle, upstream.StateSuspect}
	breakerStates = []upstream.BreakerState{upstream.BreakerClosed, upstream.BreakerOpen, upstream.BreakerHalfOpen}
)

// callDurationBuckets span a fast local tool (~100 µs) to the default
// call timeout (300 s).
var callDurationBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// Metrics is mcpvisor's Prometheus collector: counters fed by the
// supervisors' Observer hooks, and gauges read from the host's state when
// scraped.
type Metrics struct {
	calls         *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	inFlight      *prometheus.GaugeVec
	retries       *prometheus.CounterVec
	restarts      *prometheus.CounterVec
	parks         *prometheus.CounterVec
	revivals      *prometheus.CounterVec
	reconnects    *prometheus.CounterVec
	breaker       *prometheus.CounterVec
	notifications *prometheus.CounterVec
	// policyDecisions counts the policy decisions on calls; its policy
	// label takes the names of the configuration's policy blocks only.
	policyDecisions *prometheus.CounterVec

	stateDesc, breakerDesc, generationDesc, sessionsDesc *prometheus.Desc

	// memoryDesc and cpuDesc report a running stdio server's process
	// group, as status measures it (docs/design.md §18.2).
	memoryDesc, cpuDesc *prometheus.Desc

	// catalogTruncatedDesc and namesOverDesc report the catalog and label
	// bounds being hit (docs/security.md).
	catalogTruncatedDesc, namesOverDesc *prometheus.Desc

	// limitHitsDesc reports limitHits: what every bound refused.
	limitHitsDesc *prometheus.Desc
	limitHits     *limits.Hits

	status   func() []upstream.Status
	sessions func() int

	// maxNamesPerServer and maxNames bound the tool label values, per
	// server and in all (Options.MaxNamesPerServer, Options.MaxNames).
	maxNamesPerServer, maxNames int

	// namesMu guards names and namesTotal. A call's label is chosen and
	// its series counted under the read lock, so that setCatalog, which
	// deletes the series of names that left a catalog under the write
	// lock, never races a call into re-creating one.
	namesMu    sync.RWMutex
	names      map[string]nameSet // server → the names it may label
	namesTotal int                // sum of len(names[s])
	namesOver  map[string]int     // server → names of its catalog left unlabelled
}

// nameSet is the names a server's catalog offers, for the tool label.
type nameSet map[string]struct{}

// newMetrics returns the collector. status lists the servers for the state
// gauges and sessions counts the open downstream sessions; either may be
// nil. A replica that is not empty is a constant label on every metric.
func newMetrics(status func() []upstream.Status, sessions func() int, limitHits *limits.Hits, replica string, maxNamesPerServer, maxNames int) *Metrics {
	if maxNamesPerServer <= 0 {
		maxNamesPerServer = DefaultMaxNamesPerServer
	}
	if maxNames <= 0 {
		maxNames = DefaultMaxNames
	}
	var constLabels prometheus.Labels
	if replica != "" {
		constLabels = prometheus.Labels{ReplicaLabel: replica}
	}
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "mcpvisor_calls_total",
			ConstLabels: constLabels,
			Help:        "Operations forwarded upstream (tools/call, resources/read, prompts/get) by server, method, tool or prompt, and outcome.",
		}, []string{"server", "method", "tool", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        "mcpvisor_call_duration_seconds",
			ConstLabels: constLabels,
			Help:        "Time from receiving an operation to its answer, waits for a session and retries included.",
			Buckets:     callDurationBuckets,
		}, []string{"server", "method"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name:        "mcpvisor_calls_in_flight",
			ConstLabels: constLabels,
			Help:        "Operations currently being forwarded upstream.",
		}, []string{"server"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "mcpvisor_call_retries_total",
			ConstLabels: constLabels,
			Help:        "Operations sent a second time on a new session, by why the first attempt failed (session_gone, auth, process_died, transport).",
		}, []string{"server", "reason"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "mcpvisor_server_restarts_total",
			ConstLabels: constLabels,
			Help:        "Sessions established after the server's first one, by why: exit (its process exited), transport (its session or connection failed while the process, if any, ran), memory_limit, idle (a call started it after an idle stop), lifetime (replaced at max_lifetime).",
		}, []string{"server", "reason"}),
		parks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "mcpvisor_server_parks_total",
			ConstLabels: constLabels,
			Help:        "Times the server was parked after spending its retry budget.",
		}, []string{"server"}),
		revivals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "mcpvisor_server_revivals_total",
			ConstLabels: constLabels,
			Help:        "Times a parked server left park to try again (a probe call, Revive, or its parked_retry timer).",
		}, []string{"server"}),
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "mcpvisor_server_reconnect_attempts_total",
			ConstLabels: constLabels,
			Help:        "Connect attempts after the server's first, by result (success, failure).",
		}, []string{"server", "result"}),
		breaker: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "mcpvisor_breaker_transitions_total",
			ConstLabels: constLabels,
			Help:        "Circuit breaker transitions, by the state left and the state entered.",
		}, []string{"server", "from", "to"}),
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "mcpvisor_notifications_total",
			ConstLabels: constLabels,
			Help:        "Upstream notifications (progress, log, resource_updated) forwarded to downstream clients or dropped.",
		}, []string{"server", "kind", "result"}),
		policyDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "mcpvisor_policy_decisions_total",
			ConstLabels: constLabels,
			Help:        "Policy decisions on calls (tools/call, prompts/get, resources/read), by decision (allow, deny, rate_limited) and the policy that decided (\"\" for the default deny); decision operator_denied counts requests to the operator endpoints (/control/*, /ui) refused to a caller who is not an operator.",
		}, []string{"decision", "policy"}),
		stateDesc: prometheus.NewDesc("mcpvisor_server_state",
			"1 for the state the server is in, 0 for the others.", []string{"server", "state"}, constLabels),
		breakerDesc: prometheus.NewDesc("mcpvisor_breaker_state",
			"1 for the state the server's circuit breaker is in, 0 for the others.", []string{"server", "state"}, constLabels),
		generationDesc: prometheus.NewDesc("mcpvisor_server_generation",
			"Successful connects of the server so far; each is a new session.", []string{"server"}, constLabels),
		memoryDesc: prometheus.NewDesc("mcpvisor_server_memory_bytes",
			"Resident memory of a running stdio server's process group (the server and everything it started); absent where it cannot be measured.", []string{"server"}, constLabels),
		cpuDesc: prometheus.NewDesc("mcpvisor_server_cpu_seconds_total",
			"User and system CPU time of a running stdio server's process group since its process started; starts again from zero when it is restarted.", []string{"server"}, constLabels),
		sessionsDesc: prometheus.NewDesc("mcpvisor_downstream_sessions",
			"Downstream MCP sessions open (HTTP and stdio).", nil, constLabels),
		catalogTruncatedDesc: prometheus.NewDesc("mcpvisor_catalog_truncated",
			"1 when the server's last listing stopped at a bound of its catalog block (or a repeated cursor), 0 otherwise.", []string{"server"}, constLabels),
		namesOverDesc: prometheus.NewDesc("mcpvisor_tool_label_names_over_limit",
			"Tool and prompt names of the server's catalog past the metrics block's bounds, whose calls are counted under tool=\"_other\".", []string{"server"}, constLabels),
		limitHitsDesc: prometheus.NewDesc("mcpvisor_limit_hits_total",
			"Messages, requests and sessions refused, cut or evicted at a bound of docs/security.md, by the setting that raises it.", []string{"limit"}, constLabels),
		limitHits: limitHits,
		status:    status,
		sessions:  sessions,

		maxNamesPerServer: maxNamesPerServer,
		maxNames:          maxNames,
		names:             map[string]nameSet{},
		namesOver:         map[string]int{},
	}
	return m
}

func (m *Metrics) vectors() []prometheus.Collector {
	return []prometheus.Collector{m.calls, m.duration, m.inFlight, m.retries, m.restarts,
		m.parks, m.revivals, m.reconnects, m.breaker, m.notifications, m.policyDecisions}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.vectors() {
		c.Describe(ch)
	}
	ch <- m.stateDesc
	ch <- m.breakerDesc
	ch <- m.generationDesc
	ch <- m.memoryDesc
	ch <- m.cpuDesc
	ch <- m.sessionsDesc
	ch <- m.catalogTruncatedDesc
	ch <- m.namesOverDesc
	ch <- m.limitHitsDesc
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.vectors() {
		c.Collect(ch)
	}
	if m.status != nil {
		for _, st := range m.status() {
			for _, s := range states {
				ch <- prometheus.MustNewConstMetric(m.stateDesc, prometheus.GaugeValue, boolValue(st.State == s), st.Name, s.String())
			}
			for _, b := range breakerStates {
				ch <- prometheus.MustNewConstMetric(m.breakerDesc, prometheus.GaugeValue, boolValue(st.Breaker == b.String()), st.Name, b.String())
			}
			ch <- prometheus.MustNewConstMetric(m.generationDesc, prometheus.GaugeValue, float64(st.Generation), st.Name)
			ch <- prometheus.MustNewConstMetric(m.catalogTruncatedDesc, prometheus.GaugeValue, boolValue(st.CatalogTruncatedReason != ""), st.Name)
			if st.RSSBytes > 0 {
				ch <- prometheus.MustNewConstMetric(m.memoryDesc, prometheus.GaugeValue, float64(st.RSSBytes), st.Name)
				ch <- prometheus.MustNewConstMetric(m.cpuDesc, prometheus.CounterValue, st.CPUSeconds, st.Name)
			}
		}
	}
	m.namesMu.RLock()
	for server, n := range m.namesOver {
		ch <- prometheus.MustNewConstMetric(m.namesOverDesc, prometheus.GaugeValue, float64(n), server)
	}
	m.namesMu.RUnlock()
	if m.sessions != nil {
		ch <- prometheus.MustNewConstMetric(m.sessionsDesc, prometheus.GaugeValue, float64(m.sessions()))
	}
	if m.limitHits != nil {
		for _, n := range limits.All {
			ch <- prometheus.MustNewConstMetric(m.limitHitsDesc, prometheus.CounterValue, float64(m.limitHits.Count(n)), string(n))
		}
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// addServer creates the server's counters at zero, so that rate() and
// increase() see a series from the start rather than from the first event.
func (m *Metrics) addServer(name string) {
	for _, r := range upstream.RestartReasons() {
		m.restarts.WithLabelValues(name, string(r))
	}
	m.parks.WithLabelValues(name)
	m.revivals.WithLabelValues(name)
	m.inFlight.WithLabelValues(name)
	for _, r := range []string{"success", "failure"} {
		m.reconnects.WithLabelValues(name, r)
	}
}

// setCatalog records the names a server offers; nil (parked, stopped)
// keeps the last ones, so calls to a parked server keep their labels.
// The series of names that left the catalog (or no longer fit the bounds)
// are deleted: an upstream that renames its tools over and over must not
// grow the metrics without end. Names that already have a label keep it
// first, so a catalog past the bound does not move labels around.
func (m *Metrics) setCatalog(server string, cat *registry.Catalog) {
	if cat == nil {
		return
	}
	m.namesMu.Lock()
	defer m.namesMu.Unlock()
	old := m.names[server]
	room := min(m.maxNamesPerServer, m.maxNames-(m.namesTotal-len(old)))
	set := make(nameSet, min(room, len(cat.Tools)+len(cat.Prompts)))
	names := make([]string, 0, len(cat.Tools)+len(cat.Prompts))
	for _, t := range cat.Tools {
		names = append(names, t.Name)
	}
	for _, p := range cat.Prompts {
		names = append(names, p.Name)
	}
	for _, keep := range []bool{true, false} {
		for _, n := range names {
			if len(set) >= room {
				break
			}
			if _, had := old[n]; had == keep {
				set[n] = struct{}{}
			}
		}
	}
	for n := range old {
		if _, still := set[n]; !still {
			m.calls.DeletePartialMatch(prometheus.Labels{"server": server, "tool": n})
		}
	}
	m.namesTotal += len(set) - len(old)
	m.names[server] = set
	distinct := make(nameSet, len(names))
	for _, n := range names {
		distinct[n] = struct{}{}
	}
	m.namesOver[server] = len(distinct) - len(set)
}

// nameLabel is the tool label for a call: the name if its server offers
// it, else OtherName. Resource URIs are never labels. m.namesMu must be
// held for reading.
func (m *Metrics) nameLabel(c *upstream.Call) string {
	if c.Method == "resources/read" {
		return ""
	}
	if _, known := m.names[c.Server][c.Name]; known {
		return c.Name
	}
	return OtherName
}

func (m *Metrics) callStarted(c *upstream.Call) {
	m.inFlight.WithLabelValues(c.Server).Inc()
}

func (m *Metrics) callFinished(c *upstream.Call) {
	m.inFlight.WithLabelValues(c.Server).Dec()
	// A transport refuses a response past a bound inside the round trip
	// or the read, for every transport its own way; the call's error,
	// which names the bound, is the one place all of them are seen.
	if limit := recovery.LimitOf(c.Err); limit != "" {
		m.limitHits.Hit(limits.Name(limit))
	}
	m.namesMu.RLock()
	m.calls.WithLabelValues(c.Server, c.Method, m.nameLabel(c), string(c.Outcome)).Inc()
	m.namesMu.RUnlock()
	m.duration.WithLabelValues(c.Server, c.Method).Observe(c.Duration.Seconds())
	if len(c.Attempts) > 1 {
		m.retries.WithLabelValues(c.Server, c.Attempts[0].Class.String()).Inc()
	}
}

func (m *Metrics) stateChanged(server string, from, to upstream.State) {
	switch {
	case to == upstream.StateParked:
		m.parks.WithLabelValues(server).Inc()
	case from == upstream.StateParked && to != upstream.StateStopped:
		m.revivals.WithLabelValues(server).Inc()
	}
}

func (m *Metrics) connectFinished(server string, gen uint64, initial bool, err error) {
	if !initial {
		result := "success"
		if err != nil {
			result = "failure"
		}
		m.reconnects.WithLabelValues(server, result).Inc()
	}
}

func (m *Metrics) restarted(server string, reason upstream.RestartReason) {
	m.restarts.WithLabelValues(server, string(reason)).Inc()
}

func (m *Metrics) breakerChanged(server string, from, to upstream.BreakerState) {
	m.breaker.WithLabelValues(server, from.String(), to.String()).Inc()
}

func (m *Metrics) notification(server, kind string, forwarded bool) {
	result := "dropped"
	if forwarded {
		result = "forwarded"
	}
	m.notifications.WithLabelValues(server, kind, result).Inc()
}
