package host

// Policies (docs/auth.md, docs/design.md §19): the host compiles the
// configuration's policy blocks into a policy.Engine, which the gateway
// asks on every request; a reload swaps the engine without touching a
// server, and the rate limit buckets outlive it. Every decision on a call
// is counted (mcpvisor_policy_decisions_total) and every refusal audited.

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/audit"
	"github.com/mcpvisor/mcpvisor/host/internal/gateway"
	"github.com/mcpvisor/mcpvisor/host/internal/identity"
	"github.com/mcpvisor/mcpvisor/host/internal/limits"
	"github.com/mcpvisor/mcpvisor/host/internal/policy"
	"github.com/mcpvisor/mcpvisor/host/internal/registry"
)

// setPolicies compiles cfg's policies and puts them in force. It reports
// whether they differ from the ones in force before.
func (h *Host) setPolicies(cfg *config.Config) bool {
	next := policy.New(cfg.Policies, cfg.Host.StdioSubject, h.limiters)
	old := h.policy.Swap(next)
	changed := !old.Same(next)
	if changed && h.registry != nil {
		h.policyNames.reset(h.registry.Tools())
	}
	return changed
}

/*
A tool renamed under the policies: an upstream names its tools, and the
exposed name can change while the policies stay (a clash with another
server's tool adds a hash suffix, a tool appearing or going changes which
of two clashing names wins). A policy written against the old name may
no longer mean the tool. toolNames remembers, per server block and
upstream tool name, the exposed name when the policies in force were put
in force (or, for a tool that came later, when it was first listed since),
and GET /tools says when it differs (ExposedTool.RenamedFrom), which
`mcpvisor policy check` reports.
*/

// toolNames are the tools' exposed names as of the policies in force.
type toolNames struct {
	mu   sync.Mutex           // guards seen
	seen map[[2]string]string // by server block and upstream name
}

// reset makes tools' current names the ones of the policies now in force.
func (n *toolNames) reset(tools []registry.ToolEntry) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.seen = make(map[[2]string]string, len(tools))
	for _, t := range tools {
		n.seen[[2]string{t.Server, t.Original}] = t.Tool.Name
	}
}

// renamedFrom is the name the tool had as of the policies in force, when
// it differs from exposed; "" otherwise (a tool first seen is
// remembered as it is).
func (n *toolNames) renamedFrom(server, original, exposed string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.seen == nil {
		n.seen = map[[2]string]string{}
	}
	key := [2]string{server, original}
	was, ok := n.seen[key]
	if !ok {
		n.seen[key] = exposed
		return ""
	}
	if was != exposed {
		return was
	}
	return ""
}

// policyEngine is the policies in force (nil: none).
func (h *Host) policyEngine() *policy.Engine { return h.policy.Load() }

// onVerdict counts a policy decision and audits a refusal: of a call, a
// completion or a subscription.
func (h *Host) onVerdict(_ context.Context, v *gateway.Verdict) {
	decision, name := "allow", v.Decision.Policy
	switch {
	case !v.Decision.Allowed:
		decision = "deny"
	case v.Limited != nil:
		decision, name = "rate_limited", v.Limited.Policy
		h.limitHits.Hit(limits.CallsPerMinute)
	}
	h.telemetry.PolicyDecision(decision, name)
	if decision == "allow" || h.audit == nil {
		return
	}
	r := audit.Refusal{Time: v.Start, Server: v.Server, Method: v.Method, Name: v.Original, Policy: name}
	if v.Method == "completion/complete" {
		r.Kind = v.Kind.String() // what the completion's reference names
	}
	if r.Name == "" {
		r.Name = v.Name
	}
	if v.Downstream != nil {
		r.Downstream = v.Downstream
	}
	if decision == "deny" {
		r.Outcome, r.Rule, r.Error = "denied", v.Decision.Rule, v.Decision.Rule
	} else {
		r.Outcome, r.Rule = "rate_limited", v.Limited.Rule
		r.Error = v.Limited.Rule + ": retry in " + v.Limited.RetryAfter.String()
	}
	if err := h.audit.RecordRefusal(r, v.Subject); err != nil {
		h.logger.Error("audit log write failed for a refused call", "path", h.audit.Path(), "error", err)
	}
}

// auditSessionRefusal audits a new session refused at a session cap
// (sessionCap): limit names the bound (max_sessions,
// max_sessions_per_subject), n its value.
func (h *Host) auditSessionRefusal(r *http.Request, who *identity.Subject, limit string, n int) {
	if h.audit == nil {
		return
	}
	rule := fmt.Sprintf("%s = %d", limit, n)
	ref := audit.Refusal{Time: time.Now(), Method: "initialize", Outcome: "session_limit", Rule: rule,
		Error: fmt.Sprintf("a new session refused for %s: %s, and every session that bound counts has a request in flight or a stream open", callerSelector(who), rule)}
	if err := h.audit.RecordRefusal(ref, who); err != nil {
		h.logger.Error("audit log write failed for a refused session", "path", h.audit.Path(), "error", err)
	}
}
