//go:build unix

package hardening_test

// Sessions per subject (docs/auth.md, "Sessions"), against the real binary
// and a real OpenID provider: a DELETE the go-sdk refuses (a bad
// MCP-Protocol-Version, another subject's token) leaves the session as it
// was, so it can still make room at max_sessions; one subject cannot hold
// every session (max_sessions_per_subject), and at the cap the subject
// with the most sessions gives one up.

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// subjectSession is one raw HTTP session of a subject's token.
type subjectSession struct {
	id    string
	token string
}

// openSession initializes a session with token and returns its answer's
// status, body and session id.
func openSession(t *testing.T, mv *mcpvisor, token string) (int, string, string) {
	t.Helper()
	resp, body := mcpPost(t, mv, "Bearer "+token)
	return resp.StatusCode, body, resp.Header.Get("Mcp-Session-Id")
}

// mustOpenSession initializes a session with token, or fails the test.
func mustOpenSession(t *testing.T, mv *mcpvisor, token, who string) subjectSession {
	t.Helper()
	code, body, id := openSession(t, mv, token)
	if code != http.StatusOK || id == "" {
		t.Fatalf("initialize for %s: %d %s", who, code, body)
	}
	return subjectSession{id: id, token: token}
}

// sessionRequest sends method on session s (a ping for POST) with token
// and headers, and returns the status and body.
func sessionRequest(t *testing.T, mv *mcpvisor, method string, s subjectSession, token string, headers map[string]string) (int, string) {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	}
	req, _ := http.NewRequest(method, "http://"+mv.addr+"/mcp", body)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Session-Id", s.id)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", sessionProtocol)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := newHTTPClient(t, 30*time.Second).Do(req)
	if err != nil {
		t.Fatalf("%s /mcp: %v", method, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(b)
}

// holdStream opens the GET stream of session s and keeps it open until
// the test ends: the session is busy all along.
func holdStream(t *testing.T, mv *mcpvisor, s subjectSession) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+mv.addr+"/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Mcp-Session-Id", s.id)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", sessionProtocol)
	tr := &http.Transport{}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("GET stream: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET stream: %s %s", resp.Status, b)
	}
	t.Cleanup(func() { resp.Body.Close(); tr.CloseIdleConnections() })
	// The stream is open once the host has answered it; the session's
	// request is counted from before that answer.
}

// TestRefusedDeleteChangesNothing: a subject that fills max_sessions and
// then sends DELETEs the host refuses (400 for a bad MCP-Protocol-Version,
// 403 with another subject's token) has not locked anyone out: the
// sessions are still there, still idle, and make room for a newcomer.
func TestRefusedDeleteChangesNothing(t *testing.T) {
	p, mv, _ := startOIDCHost(t, "  max_sessions = 3\n", "", echoBlock())
	hog, other := p.token(t, clientGood), p.token(t, clientCarol)
	var held []subjectSession
	for range 3 {
		held = append(held, mustOpenSession(t, mv, hog, "the first subject"))
	}
	for _, s := range held[:2] {
		if code, body := sessionRequest(t, mv, http.MethodDelete, s, hog, map[string]string{"Mcp-Protocol-Version": "1999-01-01"}); code != http.StatusBadRequest {
			t.Fatalf("DELETE with a bad MCP-Protocol-Version: %d %s; want 400", code, body)
		}
	}
	if code, body := sessionRequest(t, mv, http.MethodDelete, held[2], other, nil); code != http.StatusForbidden {
		t.Fatalf("DELETE of another subject's session: %d %s; want 403", code, body)
	}
	// The refused DELETEs closed nothing: every session still answers.
	for i, s := range held {
		if code, body := sessionRequest(t, mv, http.MethodPost, s, hog, nil); code != http.StatusOK {
			t.Fatalf("session %d after a refused DELETE: %d %s; want it still open", i, code, body)
		}
	}
	// Another subject gets a session: an idle one of the first makes room.
	if code, body, _ := openSession(t, mv, other); code != http.StatusOK {
		t.Fatalf("initialize for another subject at max_sessions after refused DELETEs: %d %s; want 200 (an idle session makes room)", code, body)
	}
}

// TestSessionsPerSubject: a subject holding max_sessions_per_subject
// streams is refused one more, with an error naming the limit (and an
// audit line with its subject), while another subject still gets
// sessions.
func TestSessionsPerSubject(t *testing.T) {
	p, mv, auditPath := startOIDCHost(t, "  max_sessions = 4\n  max_sessions_per_subject = 2\n", "", echoBlock())
	hog, other := p.token(t, clientGood), p.token(t, clientCarol)
	for range 2 {
		holdStream(t, mv, mustOpenSession(t, mv, hog, "the hog"))
	}
	code, body, _ := openSession(t, mv, hog)
	if code != http.StatusTooManyRequests || !strings.Contains(body, "max_sessions_per_subject") {
		t.Fatalf("the hog's third session: %d %s; want 429 naming max_sessions_per_subject", code, body)
	}
	rec := waitAudit(t, auditPath, func(r map[string]any) bool { return r["outcome"] == "session_limit" })
	if sub, _ := rec["subject"].(map[string]any); sub["id"] != "user-"+clientGood || !strings.Contains(fmt.Sprint(rec["rule"]), "max_sessions_per_subject = 2") {
		t.Errorf("audit line of the refused session: %v; want the hog's subject and the rule", rec)
	}
	// Another subject is not locked out: both its sessions open (the
	// host is then at max_sessions = 4), and work.
	for range 2 {
		s := mustOpenSession(t, mv, other, "another subject")
		if code, body := sessionRequest(t, mv, http.MethodPost, s, other, nil); code != http.StatusOK {
			t.Fatalf("another subject's session: %d %s", code, body)
		}
	}
}

// TestEvictionPrefersTheBiggestSubject: at max_sessions, the newcomer's
// room comes from the subject with the most sessions, even when another
// subject's session has been idle longer.
func TestEvictionPrefersTheBiggestSubject(t *testing.T) {
	p, mv, _ := startOIDCHost(t, "  max_sessions = 3\n  max_sessions_per_subject = 2\n", "", echoBlock())
	big, small, newcomer := p.token(t, clientGood), p.token(t, clientCarol), p.token(t, clientThird)
	idlest := mustOpenSession(t, mv, small, "the small subject") // idle the longest
	time.Sleep(10 * time.Millisecond)                            // a later last use for the others
	bigs := []subjectSession{mustOpenSession(t, mv, big, "the big subject"), mustOpenSession(t, mv, big, "the big subject")}
	mustOpenSession(t, mv, newcomer, "a newcomer")
	if code, body := sessionRequest(t, mv, http.MethodPost, idlest, small, nil); code != http.StatusOK {
		t.Errorf("the small subject's only session after a newcomer at max_sessions: %d %s; want it kept (the big subject has two)", code, body)
	}
	gone := 0
	for _, s := range bigs {
		if code, _ := sessionRequest(t, mv, http.MethodPost, s, big, nil); code == http.StatusNotFound {
			gone++
		}
	}
	if gone != 1 {
		t.Errorf("%d of the big subject's sessions closed for the newcomer; want 1", gone)
	}
}

// waitAudit waits for an audit line match accepts and returns it.
func waitAudit(t *testing.T, path string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			for _, r := range auditRecords(t, path) {
				if match(r) {
					return r
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no such audit line in %s", path)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startOIDCHost is startOIDCMcpvisor with extra host attributes
// (hostExtra), extra oidc lines and the server blocks to run.
func startOIDCHost(t *testing.T, hostExtra, oidcExtra, servers string) (*testProvider, *mcpvisor, string) {
	t.Helper()
	p := startProvider(t, "")
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	mv := startMcpvisorWith(t, hostExtra+oidcHost(p.issuer, "", oidcExtra)+fmt.Sprintf("  audit {\n    path = %s\n  }\n", hclString(auditPath)), servers)
	p.audience = "http://" + mv.addr + "/mcp"
	return p, mv, auditPath
}
