package transport_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
	"github.com/mcpvisor/mcpvisor/host/internal/transport"
)

// holderEnv, set in the test binary's environment, makes it a process
// that starts the stdio server in its arguments and then waits to be
// killed (see TestSIGKILLOfHostKillsWholeGroup).
const holderEnv = "MCPVISOR_TEST_PROCESS_HOLDER"

func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) != "" {
		holdProcess(os.Args[len(os.Args)-2], os.Args[len(os.Args)-1])
		return
	}
	if mode := os.Getenv(limitedEnv); mode != "" {
		limitedProcess(mode)
		return
	}
	os.Exit(testutil.RunWithLeakCheck(m))
}

// holdProcess runs `command -c script` as a stdio server, prints its pid,
// and blocks until killed.
func holdProcess(command, script string) {
	p, err := transport.StartProcess(transport.ProcessConfig{Command: command, Args: []string{"-c", script}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println(p.Pid())
	<-p.Done()
	p.Close(context.Background())
	os.Exit(1)
}
