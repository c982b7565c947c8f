package upstream_test

import "testing"

// A running stdio server's process group is measured for the status and
// metrics endpoints (WithUsage), not in the Status that state changes and
// probes read; a stopped one has no measure.
func TestUsageOfStdioServer(t *testing.T) {
	h := start(t, stdioServer("echo", echoBin), nil)
	st := h.waitState("ready", 1)
	if st.RSSBytes != 0 {
		t.Fatalf("Status measured the process group: %d bytes", st.RSSBytes)
	}
	u, ok := h.sup.Usage()
	if !ok || u.RSS <= 0 || u.Processes != 1 {
		t.Fatalf("Usage() = %+v, %v; want the echo server's RSS, one process", u, ok)
	}
	if withUsage := h.sup.WithUsage(h.sup.Status()); withUsage.RSSBytes <= 0 || withUsage.Pid != st.Pid {
		t.Fatalf("WithUsage = %+v", withUsage)
	}
}
