package upstream_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/host/internal/upstream"
)

func TestBreakerOpensAndHalfOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := upstream.NewBreaker(3, time.Minute, nil)
		for i := 0; i < 2; i++ {
			if b.Failure() {
				t.Fatalf("opened after %d failures, threshold is 3", i+1)
			}
			if ok, _, _ := b.Allow(); !ok {
				t.Fatal("closed breaker refused a call")
			}
		}
		if !b.Failure() {
			t.Fatal("third failure did not open the breaker")
		}
		ok, probe, retryAt := b.Allow()
		if ok || probe {
			t.Fatal("open breaker let a call through before the cooldown")
		}
		if want := time.Now().Add(time.Minute); !retryAt.Equal(want) {
			t.Errorf("retryAt = %v, want %v", retryAt, want)
		}

		time.Sleep(time.Minute)
		ok, probe, _ = b.Allow()
		if !ok || !probe {
			t.Fatalf("after the cooldown: ok=%v probe=%v, want a probe", ok, probe)
		}
		// Only one probe at a time.
		if ok, _, _ := b.Allow(); ok {
			t.Fatal("a second call went through while the probe was in flight")
		}
		b.Success()
		if st, n, _ := b.Snapshot(); st != upstream.BreakerClosed || n != 0 {
			t.Fatalf("after probe success: %v with %d failures, want closed with 0", st, n)
		}
	})
}

func TestBreakerProbeFailureReopens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := upstream.NewBreaker(1, 10*time.Second, nil)
		b.Failure()
		time.Sleep(10 * time.Second)
		if ok, probe, _ := b.Allow(); !ok || !probe {
			t.Fatal("no probe after the cooldown")
		}
		if !b.Failure() {
			t.Fatal("probe failure did not re-open the breaker")
		}
		ok, _, retryAt := b.Allow()
		if ok {
			t.Fatal("call went through right after a failed probe")
		}
		if want := time.Now().Add(10 * time.Second); !retryAt.Equal(want) {
			t.Errorf("fresh cooldown ends %v, want %v", retryAt, want)
		}
	})
}

func TestBreakerResetOnReconnect(t *testing.T) {
	b := upstream.NewBreaker(2, time.Hour, nil)
	b.Failure()
	b.Failure()
	if st, _, _ := b.Snapshot(); st != upstream.BreakerOpen {
		t.Fatalf("state %v, want open", st)
	}
	b.Reset()
	if ok, probe, _ := b.Allow(); !ok || probe {
		t.Fatal("a successful reconnect did not close the breaker")
	}
}

func TestBreakerReleasedProbeAllowsAnother(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := upstream.NewBreaker(1, time.Second, nil)
		b.Failure()
		time.Sleep(time.Second)
		_, probe, _ := b.Allow()
		b.Release(probe)
		if ok, probe, _ := b.Allow(); !ok || !probe {
			t.Fatal("a released probe blocked the next one")
		}
	})
}
