package plugin_test

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// A plugin runs in a process group led by its keeper, like a stdio server
// (transport's TestSIGKILLOfHostKillsWholeGroup shows the keeper at work),
// and Close leaves nothing of the group, keeper included.
func TestPluginGroupHasKeeper(t *testing.T) {
	p := startPeer(t, "-unix", filepath.Join(t.TempDir(), "tools.sock"))
	link, err := dial(t, server("over-unix", "unix", bin("mcpvisor-transport-unix"), map[string]any{"socket": p.addr}))
	if err != nil {
		t.Fatal(err)
	}
	pid := link.(interface{ Pid() int }).Pid()
	pgid, err := syscall.Getpgid(pid)
	if err != nil {
		t.Fatal(err)
	}
	if pgid == pid {
		t.Errorf("plugin %d leads its own group: no keeper", pid)
	}
	if err := link.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if left := testutil.GroupMembers(pgid); len(left) > 0 {
		t.Errorf("processes left in group %d after Close: %v", pgid, left)
	}
}
