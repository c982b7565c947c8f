//go:build unix

package hardening_test

// The audit log as the binary writes it: secrets redacted however they
// are spelled, a digest that cannot confirm a guess, and no record lost
// when the file is removed under a running host (docs/security.md,
// "Audit log").

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// auditRecords reads the JSON lines of the audit file at path.
func auditRecords(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// waitRecords waits until the audit file at path has n lines.
func waitRecords(t *testing.T, path string, n int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for {
		recs := auditRecords(t, path)
		if len(recs) >= n {
			return recs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d audit lines in %s within %s, want %d", len(recs), path, readyTimeout, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startAudited runs mcpvisor with include_arguments on, the echo and
// everything servers, and its digest key under a state directory of the
// test's; it returns the audit file's and the key file's paths.
func startAudited(t *testing.T) (mv *mcpvisor, auditPath, keyPath string) {
	t.Helper()
	dir := t.TempDir()
	auditPath = filepath.Join(dir, "audit.jsonl")
	state := filepath.Join(dir, "state")
	env := append(withoutXDG(shortTempDir(t)), "XDG_STATE_HOME="+state)
	servers := echoBlock() + fmt.Sprintf("server \"every\" {\n  command = %s\n}\n", hclString(bins["everything"]))
	hostAttrs := fmt.Sprintf("  audit {\n    path = %s\n    include_arguments = true\n  }\n", hclString(auditPath))
	mv = startMcpvisorEnv(t, env, hostAttrs, servers)
	return mv, auditPath, filepath.Join(state, "mcpvisor", "audit-hmac.key")
}

func TestAuditRedaction(t *testing.T) {
	mv, auditPath, keyPath := startAudited(t)
	cs := connectClient(t, mv)
	waitTool(t, cs, "echo__echo")

	// Each secret is unique, so that a leak names its form.
	secrets := map[string]any{
		// Nine forms that leaked.
		"authToken":    "s01-auth-token-value",
		"sessionToken": "s02-session-token-value",
		"githubToken":  "s03-github-token-value",
		"accessKey":    "s04-access-key-value",
		"secretKey":    "s05-secret-key-value",
		"password":     map[string]any{"value": "s06-nested-password", "hint": "s06-nested-hint"},
		"pwd":          "s07-pwd-value",
		"bearer":       "s08-bearer-value",
		"dsn":          "postgres://app:s09-url-password@db.internal:5432/prod",
		// Seven that were already redacted.
		"api_key":       "s10-api-key-value",
		"client_secret": "s11-client-secret-value",
		"note":          "Authorization: Bearer s12-bearer-in-text",
		"gh":            "use ghp_s13abcdefghijklmnopqrstuvwxyz0123 here",
		"openai":        "sk-s14abcdefghijklmnopqrstuvwxyz",
		"aws":           "AKIAS15FODNN7EXAMPLE",
		"slack":         "xoxb-s16-1234567890-abcdefghij",
	}
	leaks := []string{"s01-", "s02-", "s03-", "s04-", "s05-", "s06-", "s07-", "s08-", "s09-", "s10-", "s11-", "s12-", "s13", "s14", "S15", "s16-"}
	args := map[string]any{"text": "hello audit", "max_tokens": 100}
	for k, v := range secrets {
		args[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__echo", Arguments: args})
	const uriSecret = "ghp_uriabcdefghijklmnopqrstuvwxyz0123456"
	uri := "test://template/" + uriSecret + "/data"
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri}); err != nil {
		t.Logf("resources/read %s: %v", uri, err)
	}
	recs := waitRecords(t, auditPath, 2)

	raw, err := os.ReadFile(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range leaks {
		if strings.Contains(string(raw), s) {
			t.Errorf("secret %q is in the audit log", s)
		}
	}
	if strings.Contains(string(raw), uriSecret) {
		t.Errorf("the resource URI's token is in the audit log")
	}
	for _, keep := range []string{"hello audit", `"max_tokens":100`, "db.internal:5432/prod"} {
		if !strings.Contains(string(raw), keep) {
			t.Errorf("%q is not in the audit log: over-redacted", keep)
		}
	}
	var call, read map[string]any
	for _, r := range recs {
		switch r["method"] {
		case "tools/call":
			call = r
		case "resources/read":
			read = r
		}
	}
	if read == nil || !strings.Contains(fmt.Sprint(read["uri"]), "[redacted]") {
		t.Errorf("resources/read line %v: want its uri redacted", read)
	}
	if call == nil {
		t.Fatalf("no tools/call line:\n%s", raw)
	}

	// The digest is an HMAC under the key file's key, not a SHA-256 of
	// the arguments.
	payload, _ := call["arguments"].(map[string]any)
	digest, _ := payload["hmac_sha256"].(string)
	argJSON, _ := json.Marshal(args)
	plain := sha256.Sum256(argJSON)
	if strings.Contains(string(raw), hex.EncodeToString(plain[:])) {
		t.Errorf("the audit log holds SHA-256(arguments), which confirms a guessed secret offline")
	}
	fi, err := os.Stat(keyPath)
	if err != nil {
		t.Fatalf("no digest key file: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("digest key file mode %04o, want 0600", fi.Mode().Perm())
	}
	keyHex, _ := os.ReadFile(keyPath)
	key, err := hex.DecodeString(strings.TrimSpace(string(keyHex)))
	if err != nil {
		t.Fatal(err)
	}
	m := hmac.New(sha256.New, key)
	m.Write(argJSON)
	if want := hex.EncodeToString(m.Sum(nil)); digest != want {
		t.Errorf("arguments digest %q, want HMAC-SHA256 under the key file's key %q (payload %v)", digest, want, payload)
	}
}

// A host whose audit file is deleted keeps recording: the next record
// lands in a new file at the path, and the host says so.
func TestAuditFileDeleted(t *testing.T) {
	mv, auditPath, _ := startAudited(t)
	cs := connectClient(t, mv)
	waitTool(t, cs, "echo__echo")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__echo", Arguments: map[string]any{"text": "before"}}); err != nil {
		t.Fatal(err)
	}
	waitRecords(t, auditPath, 1)
	if err := os.Remove(auditPath); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__echo", Arguments: map[string]any{"text": "after"}}); err != nil {
		t.Fatal(err)
	}
	recs := waitRecords(t, auditPath, 1)
	if v := fmt.Sprint(recs[0]["arguments"]); !strings.Contains(v, "after") {
		t.Errorf("the new audit file starts with %v, want the call made after the deletion", recs[0])
	}
	waitStderr(t, mv, "audit log file was removed or renamed")
	fi, err := os.Stat(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("the new audit file has mode %04o, want 0600", fi.Mode().Perm())
	}
}
