//go:build unix

package upstream_test

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// remoteProbeEvery mirrors the supervisor's rate limit on early probes of
// a parked remote server.
const remoteProbeEvery = 500 * time.Millisecond

// A remote server back from an outage is revived by the next calls long
// before its breaker's cooldown (an hour here) has passed: a call may
// probe a parked remote server early, at most once per remoteProbeEvery
// however many calls arrive while it is still down.
func TestParkedRemoteServerRevivedByUseBeforeCooldown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	up := testutil.StartServer(t, echoBin, "-http", addr)
	proxy := newSessionProxy(t, up.URL)
	proxy.method.Store("initialize") // count connection attempts
	srv := httpServer("remote", proxy.URL+"/mcp")
	srv.Breaker = config.Breaker{Threshold: 3, Cooldown: time.Hour}
	srv.Reconnect.ParkedRetry = 8 * time.Hour
	h := start(t, srv, nil)
	h.waitState("ready", 1)

	syscall.Kill(-up.Cmd.Process.Pid, syscall.SIGKILL)
	h.waitState("parked", 1)

	ctx := context.Background()
	attempts := proxy.toolCalls.Load()
	began := time.Now()
	for range 50 {
		_, err := call(ctx, h.sup, "echo", `{"text":"down"}`)
		var re *recovery.Error
		if !errors.As(err, &re) || re.Class != recovery.Unavailable {
			t.Fatalf("call while the server is down: %v, want an unavailable error", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	probes := proxy.toolCalls.Load() - attempts
	if limit := int64(time.Since(began)/remoteProbeEvery) + 1; probes < 1 || probes > limit {
		t.Errorf("50 calls over %s while down made %d connection attempts, want 1 to %d", time.Since(began).Round(time.Millisecond), probes, limit)
	}

	// The calls' failed probes do not stretch the server's own parked
	// wait: that is still the first one, the cooldown.
	if st := h.sup.Status(); st.NextAttempt.Sub(st.Since) > srv.Breaker.Cooldown+time.Minute {
		t.Errorf("after the calls' probes the parked wait is %s, want the cooldown (%s)", st.NextAttempt.Sub(st.Since).Round(time.Minute), srv.Breaker.Cooldown)
	}

	testutil.StartServer(t, echoBin, "-http", addr)
	back := time.Now()
	// Far below the cooldown; in practice about remoteProbeEvery.
	deadline := back.Add(20 * time.Second)
	for {
		res, err := call(ctx, h.sup, "echo", `{"text":"back"}`)
		if err == nil {
			if got := text(t, res); got != "back" {
				t.Fatalf("result %q", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls still fail %s after the server came back: %v", time.Since(back).Round(time.Millisecond), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("revived by a call %s after the server came back", time.Since(back).Round(time.Millisecond))
	if st := h.sup.Status(); st.State != "ready" || st.Breaker != "closed" {
		t.Errorf("after revival: state %s, breaker %s; want ready, closed", st.State, st.Breaker)
	}
	if h.lastCatalog() == nil {
		t.Error("revived server's tools not registered again")
	}
}
