package host

// The operator endpoints (docs/auth.md, "The operator endpoints";
// docs/design.md §19): POST /control/revive, /control/restart,
// /control/reload and /control/console-login change what runs or open the
// console, and the web console /ui shows every caller's recent calls and
// has the revive and restart buttons. They answer operators only:
//
//   - the local operator credential's holder, the local user (the CLI
//     sends it; the console's login turns into it; localsock.go);
//   - the shared token's caller (the token is the operator's secret);
//   - an OIDC subject when a policy that applies to it has
//     operator = true (policy.Engine.Operator).
//
// A caller of a host without auth is none of those: anyone who reaches
// the host may call /mcp and read /status, not operate it. And a request
// from a process an mcpvisor host started is refused whatever it sent
// (localsock.go), so a server that found a token is no operator either.
//
// Anyone else gets 403 with a JSON body saying what is missing; the
// refusal is logged (warn) and counted in mcpvisor_policy_decisions_total
// as decision "operator_denied" (one label value: no subject label).
// Every POST (carried out or failed) and every refusal is written to the
// audit log with the subject (audit.Operation). /status, /tools and
// /metrics are read-only and stay open to every caller the ingress
// admits, but /status shows a caller who is not an operator no more than
// readiness: each server's name, state and own last error.

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/mcpvisor/mcpvisor/host/internal/audit"
	"github.com/mcpvisor/mcpvisor/host/internal/identity"
	"github.com/mcpvisor/mcpvisor/host/internal/policy"
)

// decisionOperatorDenied is the decision label of a refused operator
// request in mcpvisor_policy_decisions_total.
const decisionOperatorDenied = "operator_denied"

// OperatorRefusal is the JSON body of a 403 from an operator endpoint.
type OperatorRefusal struct {
	// Error says who was refused and what to add to the configuration.
	Error string `json:"error"`
	// Rule is the policy decision: which policies apply to the caller and
	// that none has operator = true.
	Rule string `json:"rule"`
}

// isOperator decides whether r's caller may use the operator endpoints.
func (h *Host) isOperator(r *http.Request) policy.Decision {
	s := identity.FromContext(r.Context())
	if s == nil {
		return policy.Decision{Rule: "the caller sent no credential: on a host without auth too, the operator endpoints need the local operator credential (the CLI sends it over the control socket; `mcpvisor ui` opens the console), the shared token, or an OIDC operator"}
	}
	return h.policyEngine().Operator(s)
}

// operatorOnly serves next to operators only (see the note at the top of
// this file); anyone else gets 403.
func (h *Host) operatorOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := h.isOperator(r)
		s := identity.FromContext(r.Context())
		if d.Allowed {
			// Never a server's process, whatever credential it found
			// (localsock.go). Over the control socket the ingress has
			// refused one already; over TCP the kernel's socket tables
			// say who holds the connection's far end.
			if why := h.door.serverPeer(r); why != "" {
				h.auditOperation(r, s, d, http.StatusForbidden, why)
				h.telemetry.PolicyDecision(decisionOperatorDenied, "")
				h.logger.Named("http").Warn("operator endpoint refused: the caller is a process mcpvisor started",
					"method", r.Method, "path", r.URL.Path, "subject", callerSelector(s), "reason", why, "remote", r.RemoteAddr)
				refuseServer(w, why)
				return
			}
			if r.Method != http.MethodPost {
				next.ServeHTTP(w, r)
				return
			}
			// Who changed what runs: in the log and in the audit log.
			h.logger.Named("http").Info("operator request", "path", r.URL.Path, "server", r.URL.Query().Get("server"),
				"subject", callerSelector(s), "allowed_by", d.Rule, "remote", r.RemoteAddr)
			rec := &operationRecorder{ResponseWriter: w}
			next.ServeHTTP(rec, r)
			h.auditOperation(r, s, d, cmp.Or(rec.status, http.StatusOK), rec.failure())
			return
		}
		h.auditOperation(r, s, d, http.StatusForbidden, "")
		h.telemetry.PolicyDecision(decisionOperatorDenied, "")
		h.logger.Named("http").Warn("operator endpoint refused: the caller is not an operator",
			"method", r.Method, "path", r.URL.Path, "subject", callerSelector(s), "rule", d.Rule, "remote", r.RemoteAddr)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusForbidden)
		json.NewEncoder(w).Encode(OperatorRefusal{
			Error: fmt.Sprintf("Forbidden: the caller %s is not an operator: add operator = true to a policy whose subjects include it (docs/auth.md, \"The operator endpoints\")", callerSelector(s)),
			Rule:  d.Rule,
		})
	})
}

// callerSelector names s the way a policy's subjects would: sub:ID for an
// OIDC subject or the local user, token, anonymous.
func callerSelector(s *identity.Subject) string {
	switch {
	case s == nil:
		return "anonymous"
	case s.Via == identity.ViaToken:
		return "token"
	}
	return fmt.Sprintf("sub:%s", s.ID)
}

// statusFor is the status report as r's caller may see it: a caller who
// is not an operator gets what readiness says (each server's name, state,
// since when, and the server's own last error, as /readyz names it) and
// nothing else: no process ids, memory, sandbox, generations or call
// counts, and not the last call error, which another caller's call left
// (its text can quote that call's arguments); nor the configuration's
// path.
func (h *Host) statusFor(r *http.Request, rep StatusReport) StatusReport {
	if h.isOperator(r).Allowed {
		return rep
	}
	servers := make([]ServerStatus, len(rep.Servers))
	for i, st := range rep.Servers {
		servers[i] = ServerStatus{Name: st.Name, State: st.State, Since: st.Since, LastError: st.LastError, LastErrorAt: st.LastErrorAt}
	}
	rep.Servers = servers
	rep.Config, rep.HTTP, rep.Clients = "", "", nil
	return rep
}

// auditOperation writes the audit line of an operator request: carried out
// (status below 400), failed, or refused (denied: d says why).
func (h *Host) auditOperation(r *http.Request, s *identity.Subject, d policy.Decision, status int, errText string) {
	if h.audit == nil {
		return
	}
	op := audit.Operation{Time: time.Now(), Subject: s, Operation: r.URL.Path, Server: r.URL.Query().Get("server"),
		Outcome: audit.OperationOK, Status: status, Rule: d.Rule, Error: errText}
	switch {
	case !d.Allowed:
		op.Outcome = audit.OperationDenied
	case status >= http.StatusBadRequest:
		op.Outcome = audit.OperationFailed
	}
	if err := h.audit.RecordOperation(op); err != nil {
		h.logger.Error("audit log write failed for an operator request", "path", h.audit.Path(), "error", err)
	}
}

// maxOperationError bounds what auditOperation keeps of a failed
// operation's answer.
const maxOperationError = 4 << 10

// operationRecorder keeps the status and the start of the answer of an
// operator request, for its audit line.
type operationRecorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (o *operationRecorder) WriteHeader(code int) {
	if o.status == 0 {
		o.status = code
	}
	o.ResponseWriter.WriteHeader(code)
}

func (o *operationRecorder) Write(b []byte) (int, error) {
	if o.status == 0 {
		o.status = http.StatusOK
	}
	if n := maxOperationError - o.body.Len(); n > 0 {
		o.body.Write(b[:min(n, len(b))])
	}
	return o.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (o *operationRecorder) Unwrap() http.ResponseWriter { return o.ResponseWriter }

// failure is the error of a failed operation's answer: the JSON error
// field of ControlResult (or a reload's answer), else its text.
func (o *operationRecorder) failure() string {
	if o.status < http.StatusBadRequest {
		return ""
	}
	var body struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(o.body.Bytes(), &body) == nil && body.Error != "" {
		return body.Error
	}
	return strings.TrimSpace(o.body.String())
}
