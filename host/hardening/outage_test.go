//go:build unix

package hardening_test

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

const (
	// outage is how long the HTTP upstream is down: long enough to spend
	// the default retry budget and park.
	outage = 30 * time.Second
	// healBound bounds how long after the upstream is back the agent's
	// calls may keep failing. The default breaker cooldown is 60 s; a
	// healthy mcpvisor heals within about half a second (calls probe a parked remote
	// server at most twice a second).
	healBound = 10 * time.Second
)

// Regression (#14): with the default config, an HTTP upstream that is down
// for 30 s — long enough to park — serves an agent's calls again within
// seconds of coming back, not after the breaker's 60 s cooldown.
func TestHTTPOutageHealsUnderDefaults(t *testing.T) {
	addr := freeAddr(t)
	up := testutil.StartServer(t, bins["echo"], "-http", addr)
	mv := startMcpvisor(t, fmt.Sprintf("server \"web\" {\n  url = %s\n}\n", hclString(up.URL)))
	cs := connectClient(t, mv)
	waitTool(t, cs, "web__echo")

	call := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "web__echo", Arguments: map[string]any{"text": "hi"}})
		if err == nil && res.IsError {
			err = fmt.Errorf("tool error: %s", contentText(res))
		}
		return err
	}
	if err := call(); err != nil {
		t.Fatalf("call before the outage: %v", err)
	}

	// The agent keeps calling, twice a second, throughout.
	var (
		mu        sync.Mutex
		lastFail  time.Time
		lastErr   error
		succeeded time.Time
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
			err := call()
			mu.Lock()
			if err != nil {
				lastFail, lastErr = time.Now(), err
			} else {
				succeeded = time.Now()
			}
			mu.Unlock()
		}
	})
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	syscall.Kill(-up.Cmd.Process.Pid, syscall.SIGKILL)
	down := time.Now()
	parked := false
	for time.Since(down) < outage {
		if !parked && mv.status(t)["web"].State == "parked" {
			parked = true
			t.Logf("parked %s into the outage", time.Since(down).Round(time.Second))
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !parked {
		t.Fatalf("web never parked during a %s outage (state %s): the test does not show what it means to", outage, mv.status(t)["web"].State)
	}

	testutil.StartServer(t, bins["echo"], "-http", addr)
	back := time.Now()
	for {
		mu.Lock()
		ok := succeeded.After(back)
		mu.Unlock()
		if ok {
			break
		}
		if time.Since(back) > healBound {
			mu.Lock()
			err := lastErr
			mu.Unlock()
			t.Fatalf("calls still fail %s after the upstream came back (default config): %v", healBound, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("first successful call %s after the upstream came back; last failure %s after", succeeded.Sub(back).Round(time.Millisecond), lastFail.Sub(back).Round(time.Millisecond))
	if st := mv.status(t)["web"]; st.State != "ready" {
		t.Errorf("web is %s after healing, want ready", st.State)
	}
}
