//go:build unix

package host_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcpvisor/mcpvisor/host"
	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// TestReloadWithPluginLock: a plugin server runs the binary its lock file
// entry records. Rebuilt on disk without relocking, the running plugin is
// left alone on reload (with a warning), and its next start is refused
// with both hashes; relocked and reloaded, the server restarts on the new
// binary.
func TestReloadWithPluginLock(t *testing.T) {
	if bins["testpeer"] == "" {
		t.Fatal("the test peer was not built")
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.hcl")
	lockPath := filepath.Join(dir, config.LockFileName)
	plugin := filepath.Join(dir, "bin", "testpeer")
	if err := os.MkdirAll(filepath.Dir(plugin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := testutil.GoBuild(plugin, "./plugins/internal/testpeer", "-ldflags", "-X main.version=1"); err != nil {
		t.Fatal(err)
	}
	src := `server "self" {
  plugin "testpeer" {
    command = "./bin/testpeer"
    args    = ["-plugin"]
  }
}
`
	if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	relock := func() *config.Config {
		t.Helper()
		cfg, err := config.Load(cfgPath)
		if err != nil {
			t.Fatal(err)
		}
		lock, rep := cfg.LockPlugins()
		if lock == nil {
			t.Fatalf("LockPlugins: %v", rep.Diags)
		}
		if err := lock.Write(); err != nil {
			t.Fatal(err)
		}
		if cfg, err = config.Load(cfgPath); err != nil {
			t.Fatal(err)
		}
		return cfg
	}

	var log testutil.Buffer
	h, err := host.New(relock(), host.WithLogger(hclog.New(&hclog.LoggerOptions{Output: &log, Level: hclog.Info})))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	h.WaitSettled(ctx)
	first := statusOf(t, h, "self")
	if first.State != "ready" {
		t.Fatalf("status %+v", first)
	}
	pid := callPid(t, h)
	hash1 := mustHash(t, plugin)

	// Rebuilt, not relocked.
	if err := testutil.GoBuild(plugin, "./plugins/internal/testpeer", "-ldflags", "-X main.version=2"); err != nil {
		t.Fatal(err)
	}
	hash2 := mustHash(t, plugin)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.Reload(ctx, cfg)
	if err != nil || !slices.Equal(res.Unchanged, []string{"self"}) {
		t.Fatalf("reload: %+v, %v", res, err)
	}
	if got := callPid(t, h); got != pid {
		t.Errorf("the verified plugin was replaced on reload: pid %d → %d", pid, got)
	}
	if !strings.Contains(log.String(), "plugin binary changed on disk") || !strings.Contains(log.String(), "sha256="+hash2) {
		t.Errorf("no warning about the changed binary:\n%s", log.String())
	}

	// Its next start is refused.
	syscall.Kill(pid, syscall.SIGKILL)
	defer func() {
		if t.Failed() {
			t.Logf("status %+v\nlog:\n%s", statusOf(t, h, "self"), log.String())
		}
	}()
	testutil.Eventually(t, 30*time.Second, "the respawn refused", func() bool {
		return strings.Contains(statusOf(t, h, "self").LastError, "checksum mismatch")
	})
	st := statusOf(t, h, "self")
	t.Logf("after the kill: %s: %s", st.State, st.LastError)
	for _, want := range []string{
		plugin + " has SHA-256 " + hash2,
		lockPath + " records " + hash1,
		"`mcpvisor plugins lock -config " + cfgPath + "`",
	} {
		if !strings.Contains(st.LastError, want) {
			t.Errorf("last error lacks %q: %s", want, st.LastError)
		}
	}

	// Relocked: the lock entry changed, so reload restarts the server.
	res, err = h.Reload(ctx, relock())
	if err != nil || !slices.Equal(res.Restarted, []string{"self"}) {
		t.Fatalf("reload after relocking: %+v, %v", res, err)
	}
	h.WaitSettled(ctx)
	if st := statusOf(t, h, "self"); st.State != "ready" {
		t.Fatalf("after relocking: %+v", st)
	}
	callPid(t, h)
}

// callPid calls the plugin's pid tool through the host.
func callPid(t *testing.T, h *host.Host) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := h.CallTool(ctx, "self__pid", nil)
	if err != nil {
		t.Fatalf("self__pid: %v", err)
	}
	pid, err := strconv.Atoi(textOf(t, res.Content[0]))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func mustHash(t *testing.T, path string) string {
	t.Helper()
	sum, err := config.FileSHA256(path)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}
