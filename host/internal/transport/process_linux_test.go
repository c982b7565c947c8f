package transport_test

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// When the host is SIGKILLed, no process its server started survives:
// not the server (Pdeathsig) and not the wrapper's background child, which
// Pdeathsig does not reach (the group's keeper kills it).
func TestSIGKILLOfHostKillsWholeGroup(t *testing.T) {
	holder := exec.Command(os.Args[0], "-test.run=^$", "sh", "sleep 300 & exec sleep 301")
	holder.Env = append(os.Environ(), holderEnv+"=1")
	holder.Stderr = os.Stderr
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("holder: %v", err)
	}
	server, _ := strconv.Atoi(strings.TrimSpace(line))
	pgid, err := syscall.Getpgid(server)
	if err != nil {
		t.Fatal(err)
	}
	if pgid == server {
		t.Fatalf("server %d leads its own group: no keeper", server)
	}
	// The keeper, the server and the server's background child.
	testutil.Eventually(t, 10*time.Second, "the server's background child", func() bool {
		return len(testutil.GroupMembers(pgid)) >= 3
	})
	procs := testutil.GroupMembers(pgid)

	holder.Process.Signal(syscall.SIGKILL)
	holder.Wait()
	killed := time.Now()
	for {
		var alive []int
		for _, pid := range procs {
			if testutil.Alive(pid) {
				alive = append(alive, pid)
			}
		}
		if len(alive) == 0 {
			t.Logf("group of %d gone %s after SIGKILL of the host", len(procs), time.Since(killed).Round(time.Millisecond))
			return
		}
		if time.Since(killed) > time.Second {
			t.Fatalf("processes %v of %v alive 1s after the host was SIGKILLed", alive, procs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
