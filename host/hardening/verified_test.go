//go:build unix

package hardening_test

// What policies trust and whose names they match (docs/auth.md), against
// the real binary and a real OpenID provider: an email: selector matches
// only an address the provider verified; a deny holds whatever case,
// confusable letters or clash suffix the upstream's naming gives a tool;
// a rate on a glob is one bucket for everything it matches; operator
// requests and every refusal are in the audit log with the subject; and
// /status shows a caller who is not an operator only readiness.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// controlPost POSTs to a /control endpoint with token and returns the
// status and body.
func controlPost(t *testing.T, mv *mcpvisor, path, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+mv.addr+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := newHTTPClient(t, 3*time.Minute).Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 64<<10)
	n, _ := resp.Body.Read(buf)
	b.Write(buf[:n])
	return resp.StatusCode, b.String()
}

// statusServers is GET /status with token, each server as JSON.
func statusServers(t *testing.T, mv *mcpvisor, token string) []map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+mv.addr+"/status", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := newHTTPClient(t, healthzTimeout).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Servers []map[string]any `json:"servers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || len(doc.Servers) == 0 {
		t.Fatalf("GET /status: %v %+v", err, doc)
	}
	return doc.Servers
}

// TestUnverifiedEmailIsNoOperator: a token whose email the provider did
// not verify (email_verified false) matches no email: selector, whatever
// its case: it cannot restart a server, and the refusal is audited with
// email_verified false. A verified email still matches, and its restart is
// audited. /status shows the one who is not an operator no pid.
func TestUnverifiedEmailIsNoOperator(t *testing.T) {
	policies := `
policy "oncall" {
  subjects = ["email:carol@example.com", "email:user-svc-good@example.com"]
  operator = true
  tools    = ["*"]
}
`
	p, mv, auditPath := startOIDCHost(t, "", "", echoBlock()+policies)
	carol, good := p.token(t, clientCarol), p.token(t, clientGood)
	mv.healthz(t, "before the restarts")

	code, body := controlPost(t, mv, "/control/restart?server=echo", carol)
	if code != http.StatusForbidden {
		t.Fatalf("restart with an unverified email Carol@Example.COM: %d %s; want 403", code, body)
	}
	rec := waitAudit(t, auditPath, func(r map[string]any) bool { return r["operation"] == "/control/restart" && r["outcome"] == "denied" })
	if sub, _ := rec["subject"].(map[string]any); sub["email"] != "Carol@Example.COM" || sub["email_verified"] != false {
		t.Errorf("audit line of the refused restart: %v; want the subject with email_verified false", rec)
	}
	for _, srv := range statusServers(t, mv, carol) {
		for _, field := range []string{"pid", "rss_bytes", "generation", "sandbox"} {
			if v, ok := srv[field]; ok && v != float64(0) && v != "" {
				t.Errorf("/status for a caller who is not an operator shows %s = %v", field, v)
			}
		}
	}

	// Positive control: the verified email restarts, and it is audited.
	if code, body := controlPost(t, mv, "/control/restart?server=echo", good); code != http.StatusOK {
		t.Fatalf("restart with a verified email: %d %s; want 200", code, body)
	}
	rec = waitAudit(t, auditPath, func(r map[string]any) bool { return r["operation"] == "/control/restart" && r["outcome"] == "ok" })
	if sub, _ := rec["subject"].(map[string]any); sub["id"] != "user-"+clientGood || rec["server"] != "echo" || sub["email_verified"] != true {
		t.Errorf("audit line of the restart: %v; want the operator's subject and the server", rec)
	}
	if pid := statusServers(t, mv, good)[0]["pid"]; pid == nil || pid == float64(0) {
		t.Errorf("/status for an operator lost the pid: %v", pid)
	}
}

// TestDenyHoldsWhateverTheUpstreamNamesIt: with deny = ["*__delete*",
// "weird__del_ete"], the upstream's Delete, dеlete (a Cyrillic е, exposed
// as weird__d_lete) and del/ete (exposed with a clash suffix beside
// del_ete) are all refused with -32011 and never reach it; read still
// works; the refusals are audited with the subject.
func TestDenyHoldsWhateverTheUpstreamNamesIt(t *testing.T) {
	up := startCountingUpstream(t, "Delete", "d\u0435lete", "del/ete", "del_ete", "read")
	policies := `
policy "all" {
  subjects = ["*"]
  tools    = ["*"]
  deny     = ["*__delete*", "weird__del_ete"]
}
`
	p, mv, auditPath := startOIDCHost(t, "", "", fmt.Sprintf("server \"weird\" {\n  url = %s\n}\n", hclString(up.url))+policies)
	cs, err := connectWithToken(t, mv, p.token(t, clientGood))
	if err != nil {
		t.Fatal(err)
	}
	waitListed(t, cs, "weird__read")
	suffixed := func(full string) string {
		sum := sha256.Sum256([]byte(full))
		return "weird__del_ete_" + hex.EncodeToString(sum[:])[:8]
	}
	denied := 0
	for _, name := range []string{"weird__Delete", "weird__d_lete", "weird__del_ete", suffixed("weird__del/ete"), suffixed("weird__del_ete")} {
		e := rpcError(t, cs, name)
		if e.Code == recovery.CodeDenied {
			denied++
		}
	}
	// Two of the three del_ete names exist (the clash's winner and the
	// suffixed loser); both are refused.
	if denied != 4 {
		t.Errorf("%d of the names refused with -32011; want 4 (Delete, d_lete, del_ete and its suffixed twin)", denied)
	}
	for _, tool := range []string{"Delete", "d\u0435lete", "del/ete", "del_ete"} {
		if n := up.count(tool); n != 0 {
			t.Errorf("the upstream's %q was called %d times despite the deny", tool, n)
		}
	}
	callOK(t, cs, "weird__read", nil)
	rec := waitAudit(t, auditPath, func(r map[string]any) bool { return r["outcome"] == "denied" && r["tool"] == "Delete" })
	if sub, _ := rec["subject"].(map[string]any); sub["id"] != "user-"+clientGood || !strings.Contains(fmt.Sprint(rec["rule"]), `deny "*__delete*"`) {
		t.Errorf("audit line of the denied Delete: %v", rec)
	}
}

// TestRateGlobIsOneBucket: rate "gh__search_*" limits a subject's calls
// to every tool it matches together: spreading them over three tools
// gets the third -32012 (audited), and another subject is not limited by
// them.
func TestRateGlobIsOneBucket(t *testing.T) {
	up := startCountingUpstream(t, "search_a", "search_b", "search_c")
	policies := `
policy "all" {
  subjects = ["*"]
  tools    = ["*"]
  rate "gh__search_*" {
    calls_per_minute = 1
    burst            = 2
  }
}
`
	p, mv, auditPath := startOIDCHost(t, "", "", fmt.Sprintf("server \"gh\" {\n  url = %s\n}\n", hclString(up.url))+policies)
	cs, err := connectWithToken(t, mv, p.token(t, clientGood))
	if err != nil {
		t.Fatal(err)
	}
	waitListed(t, cs, "gh__search_a", "gh__search_b", "gh__search_c")
	callOK(t, cs, "gh__search_a", nil)
	callOK(t, cs, "gh__search_b", nil)
	if e := rpcError(t, cs, "gh__search_c"); e.Code != recovery.CodeRateLimited {
		t.Fatalf("the third call under rate \"gh__search_*\" (another tool): %v; want -32012", e)
	}
	if n := up.count("search_c"); n != 0 {
		t.Errorf("the rate-limited call reached the upstream %d times", n)
	}
	rec := waitAudit(t, auditPath, func(r map[string]any) bool { return r["outcome"] == "rate_limited" })
	if sub, _ := rec["subject"].(map[string]any); sub["id"] != "user-"+clientGood {
		t.Errorf("audit line of the rate-limited call: %v", rec)
	}
	other, err := connectWithToken(t, mv, p.token(t, clientThird))
	if err != nil {
		t.Fatal(err)
	}
	waitListed(t, other, "gh__search_a", "gh__search_b", "gh__search_c")
	callOK(t, other, "gh__search_c", nil)
}
