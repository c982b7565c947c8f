//go:build unix

package cli_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// serverStateOf is the state of server in the running host at addr.
func serverStateOf(t *testing.T, addr, server string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/status")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var doc struct {
		Servers []struct {
			Name  string `json:"name"`
			State string `json:"state"`
		} `json:"servers"`
	}
	if json.NewDecoder(resp.Body).Decode(&doc) != nil {
		return ""
	}
	for _, s := range doc.Servers {
		if s.Name == server {
			return s.State
		}
	}
	return ""
}

// A secret without a restart (docs/config.md, "Secrets"): a server whose
// env() reads a variable set nowhere is held in needs_config by a running
// host, and validate agrees (a warning, exit 0); `secret set` reads the
// value from standard input (never argv), stores it outside the config,
// and reloads the host, which starts the server; `add -env K=V` stores V
// the same way; `secret list` prints names only; `secret rm` removes one.
func TestSecretSetStartsNeedsConfigServer(t *testing.T) {
	const value, value2 = "s3cret-value-for-the-store", "an0ther-s3cret-from-add"
	env := addEnv(t)
	home := strings.TrimPrefix(env[len(env)-2], "HOME=")
	addr := freePort(t)
	path := filepath.Join(t.TempDir(), "config.hcl")
	cfg := fmt.Sprintf(addConfigHead, addr, echoBin) + fmt.Sprintf("server \"keyed\" {\n  command = %q\n  env = { MV_TEST_KEY = env(\"MV_TEST_KEY\") }\n}\n", echoBin)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errb := mv(t, env, "validate", "-config", path)
	if code != 0 || !strings.Contains(errb, `server "keyed": env() reads MV_TEST_KEY`) || !strings.Contains(errb, "mcpvisor secret set MV_TEST_KEY") {
		t.Errorf("validate with the variable set nowhere: exit %d, want 0 and a warning\nstdout: %s\nstderr: %s", code, out, errb)
	}
	startRun(t, env, path, addr)
	testutil.Eventually(t, 30*time.Second, "keyed in needs_config", func() bool { return serverStateOf(t, addr, "keyed") == "needs_config" })

	// The value on the command line is refused, not stored, not echoed.
	code, out, errb = mv(t, env, "secret", "set", "-config", path, "MV_TEST_KEY="+value)
	if code != 2 || !strings.Contains(errb, "not taken from the command line") || strings.Contains(out+errb, value) {
		t.Errorf("secret set NAME=VALUE: exit %d\nstdout: %s\nstderr: %s", code, out, errb)
	}
	code, out, errb = mvIn(t, env, value+"\n", "secret", "set", "-config", path, "MV_TEST_KEY")
	if code != 0 || !strings.Contains(out, "stored secret MV_TEST_KEY") || !strings.Contains(out, "restarted keyed") {
		t.Fatalf("secret set: exit %d\nstdout: %s\nstderr: %s", code, out, errb)
	}
	testutil.Eventually(t, 30*time.Second, "keyed ready", func() bool { return serverStateOf(t, addr, "keyed") == "ready" })
	if strings.Contains(out+errb, value) {
		t.Errorf("secret set echoed the value:\n%s%s", out, errb)
	}

	code, out, errb = mv(t, env, "add", "-config", path, "second", "-env", "MV_TEST_KEY2="+value2, "--", echoBin)
	if code != 0 || !strings.Contains(out, `server "second" is ready`) {
		t.Fatalf("add -env K=V: exit %d\nstdout: %s\nstderr: %s", code, out, errb)
	}
	got, _ := os.ReadFile(path)
	if bytes.Contains(got, []byte(value)) || bytes.Contains(got, []byte(value2)) || !bytes.Contains(got, []byte(`MV_TEST_KEY2 = env("MV_TEST_KEY2")`)) {
		t.Errorf("the config holds a value, or lacks the env() reference:\n%s", got)
	}

	code, out, errb = mv(t, env, "secret", "list")
	if code != 0 || out != "MV_TEST_KEY\nMV_TEST_KEY2\n" || strings.Contains(out+errb, value) {
		t.Errorf("secret list: exit %d\nstdout: %q\nstderr: %s", code, out, errb)
	}
	store := filepath.Join(home, ".local", "state", "mcpvisor", "secrets.json")
	if fi, err := os.Stat(store); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the file store %s: %v, mode %v; want 0600", store, err, fi.Mode().Perm())
	}
	code, out, errb = mv(t, env, "secret", "rm", "-config", path, "MV_TEST_KEY2")
	if code != 0 || !strings.Contains(out, "removed secret MV_TEST_KEY2") {
		t.Errorf("secret rm: exit %d\nstdout: %s\nstderr: %s", code, out, errb)
	}
	if code, _, errb := mv(t, env, "secret", "rm", "MV_TEST_KEY2"); code != 1 || !strings.Contains(errb, "no secret MV_TEST_KEY2") {
		t.Errorf("secret rm of a removed one: exit %d\nstderr: %s", code, errb)
	}
	// A store others can read is refused, not used.
	if err := os.Chmod(store, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errb := mv(t, env, "secret", "list"); code != 1 || !strings.Contains(errb, "accessible by group or others") {
		t.Errorf("secret list of a 0644 store: exit %d\nstderr: %s", code, errb)
	}
}
