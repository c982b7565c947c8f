package audit_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcpvisor/mcpvisor/host/internal/audit"
	"github.com/mcpvisor/mcpvisor/host/internal/identity"
	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
	"github.com/mcpvisor/mcpvisor/host/internal/upstream"
)

// recordDigest opens the log at path, records one call with args and
// returns its arguments payload.
func recordDigest(t *testing.T, path, args string, logger hclog.Logger) map[string]any {
	t.Helper()
	l, err := audit.Open(path, false, "", logger)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	os.Truncate(path, 0)
	if err := l.Record(&upstream.Call{Server: "s", Method: "tools/call", Name: "t", Arguments: []byte(args), Start: time.Now()}, "", nil); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		t.Fatal("no audit line")
	}
	var line struct {
		Arguments map[string]any `json:"arguments"`
	}
	if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
		t.Fatal(err)
	}
	return line.Arguments
}

// The digest key persists in its 0600 file: a second process digests the
// same arguments the same way.
func TestDigestKeyPersists(t *testing.T) {
	state := t.TempDir()
	t.Setenv("STATE_DIRECTORY", "")
	t.Setenv("XDG_STATE_HOME", state)
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	first := recordDigest(t, path, `{"password":"hunter2"}`, nil)
	second := recordDigest(t, path, `{"password":"hunter2"}`, nil)
	if first["hmac_sha256"] == nil || first["hmac_sha256"] != second["hmac_sha256"] || first["digest_key"] != second["digest_key"] {
		t.Errorf("digests differ across opens: %v, %v", first, second)
	}
	fi, err := os.Stat(filepath.Join(state, "mcpvisor", "audit-hmac.key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v %v", fi, err)
	}
}

// A key file others can read is refused: the process uses a key of its
// own and says so.
func TestDigestKeyFileReadableByOthers(t *testing.T) {
	state := t.TempDir()
	t.Setenv("STATE_DIRECTORY", "")
	t.Setenv("XDG_STATE_HOME", state)
	keyPath := filepath.Join(state, "mcpvisor", "audit-hmac.key")
	os.MkdirAll(filepath.Dir(keyPath), 0o700)
	if err := os.WriteFile(keyPath, []byte(strings.Repeat("ab", 32)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(keyPath, 0o644)
	var logs testutil.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs})
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	first := recordDigest(t, path, `{"a":1}`, logger)
	second := recordDigest(t, path, `{"a":1}`, logger)
	if !strings.Contains(logs.String(), "cannot use the audit digest key file") || !strings.Contains(logs.String(), "chmod 600") {
		t.Errorf("no warning about the key file:\n%s", logs.String())
	}
	if first["hmac_sha256"] == second["hmac_sha256"] {
		t.Errorf("two processes refused the same key file yet digest alike: %v", first)
	}
}

// TestRecordRefusal: a call the policies refused is one line with the
// caller, the policy and the rule, no attempts, and a URI's credentials
// redacted as on every line.
func TestRecordRefusal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := audit.Open(path, false, "r1", hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	who := &identity.Subject{Via: identity.ViaOIDC, ID: "u1", Groups: []string{"analysts"}}
	if err := l.RecordRefusal(audit.Refusal{Time: time.Now(), Server: "files", Method: "resources/read", Name: "https://user:hunter2@example.com/x",
		Outcome: "denied", Policy: "analysts", Rule: `policy "analysts" deny "https://*"`, Error: "denied"}, who); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var line map[string]any
	if err := json.Unmarshal(raw, &line); err != nil {
		t.Fatalf("audit line %q: %v", raw, err)
	}
	sub, _ := line["subject"].(map[string]any)
	if line["outcome"] != "denied" || line["policy"] != "analysts" || line["rule"] != `policy "analysts" deny "https://*"` ||
		line["attempts"] != 0.0 || line["replica"] != "r1" || line["server"] != "files" || sub["id"] != "u1" {
		t.Errorf("refusal line %v", line)
	}
	if strings.Contains(string(raw), "hunter2") {
		t.Errorf("the refusal line holds the URI's password: %s", raw)
	}
}

// TestRecordEvent checks the record of a memory-limit stop: a line with
// the server, the event and the reason, redacted, beside the calls'.
func TestRecordEvent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := audit.Open(path, false, "r1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	reason := errors.New("memory limit 64MiB exceeded (token=ghp_0123456789abcdefghijABCDEFGHIJ012345)")
	if err := l.RecordEvent("hog", audit.EventMemoryLimit, reason); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var e map[string]any
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	msg, _ := e["error"].(string)
	if e["server"] != "hog" || e["event"] != "memory_limit" || e["replica"] != "r1" || e["time"] == nil ||
		!strings.HasPrefix(msg, "memory limit 64MiB exceeded") || strings.Contains(msg, "ghp_0123") {
		t.Fatalf("event record = %s", b)
	}
}
