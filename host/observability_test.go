//go:build unix

package host_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/mcpvisor/mcpvisor/host"
	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// scrape reads the host's /metrics and returns its families by name.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value is the sample of family name whose labels include want (0 when
// there is none).
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	total := 0.0
	f := fams[name]
	if f == nil {
		return 0
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, lp := range m.Label {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		}
	}
	return total
}

// outcomes are a server's mcpvisor_calls_total by tool and outcome.
func outcomes(fams map[string]*dto.MetricFamily, server string) map[string]float64 {
	out := map[string]float64{}
	if f := fams["mcpvisor_calls_total"]; f != nil {
		for _, m := range f.Metric {
			l := map[string]string{}
			for _, lp := range m.Label {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["server"] == server {
				out[l["tool"]+"/"+l["outcome"]] += m.Counter.GetValue()
			}
		}
	}
	return out
}

func delta(before, after map[string]float64) map[string]float64 {
	d := map[string]float64{}
	for k, v := range after {
		if v-before[k] != 0 {
			d[k] = v - before[k]
		}
	}
	return d
}

// SIGKILL of an upstream while calls are in flight and more keep coming:
// the counters move by exactly what the clients saw. The sleeping calls
// (not read-only) die with the process and are not replayed; the echo
// calls (read-only) all get an answer, some on the new session; the
// server restarts once.
func TestMetricsCountWhatHappenedAcrossSIGKILL(t *testing.T) {
	h, cs := startHostWithClient(t, fmt.Sprintf(`
server "echo" {
  command = %q
}
`, bins["echo"]), nil, nil, linePipes, nil)
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	before := scrape(t, srv.URL)
	restarts0 := value(before, "mcpvisor_server_restarts_total", map[string]string{"server": "echo"})
	calls0 := outcomes(before, "echo")

	const sleepers = 3
	sleepErrs := make(chan error, sleepers)
	for range sleepers {
		go func() {
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__sleep", Arguments: map[string]any{"ms": 60000}})
			sleepErrs <- err
		}()
	}
	testutil.Eventually(t, 30*time.Second, "the sleeping calls in flight", func() bool {
		return value(scrape(t, srv.URL), "mcpvisor_calls_in_flight", map[string]string{"server": "echo"}) == sleepers
	})

	// Load: echo calls from four clients' worth of goroutines, bounded.
	const workers, perWorker = 4, 40
	var mu sync.Mutex
	echoOK, echoErr := 0, 0
	var done sync.WaitGroup
	var firstDone sync.WaitGroup
	firstDone.Add(workers)
	for w := range workers {
		done.Add(1)
		go func() {
			defer done.Done()
			for i := range perWorker {
				text := fmt.Sprintf("w%d-%d", w, i)
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__echo", Arguments: map[string]any{"text": text}})
				mu.Lock()
				if err == nil && !res.IsError && textOf(t, res.Content[0]) == text {
					echoOK++
				} else {
					echoErr++
				}
				mu.Unlock()
				if i == 4 {
					firstDone.Done()
				}
			}
		}()
	}
	firstDone.Wait()
	pid := statusOf(t, h, "echo").Pid
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for range sleepers {
		err := <-sleepErrs
		if err == nil || !strings.Contains(err.Error(), "outcome is unknown") {
			t.Errorf("sleeping call across SIGKILL: %v, want an outcome-unknown error", err)
		}
	}
	done.Wait()
	testutil.Eventually(t, 30*time.Second, "echo ready again", func() bool {
		st := statusOf(t, h, "echo")
		return st.State == "ready" && st.Generation == 2
	})

	after := scrape(t, srv.URL)
	if d := value(after, "mcpvisor_server_restarts_total", map[string]string{"server": "echo"}) - restarts0; d != 1 {
		t.Errorf("restarts moved by %v, want 1", d)
	}
	if d := value(after, "mcpvisor_server_restarts_total", map[string]string{"server": "echo", "reason": "exit"}) -
		value(before, "mcpvisor_server_restarts_total", map[string]string{"server": "echo", "reason": "exit"}); d != 1 {
		t.Errorf("restarts with reason exit moved by %v, want 1 (a crash)", d)
	}
	d := delta(calls0, outcomes(after, "echo"))
	if got := d["sleep/crashed_not_replayed"]; got != sleepers {
		t.Errorf("sleep crashed_not_replayed moved by %v, want %d (all: %v)", got, sleepers, d)
	}
	answered := d["echo/ok"] + d["echo/replayed"]
	failed := 0.0
	total := 0.0
	for k, v := range d {
		if strings.HasPrefix(k, "echo/") {
			total += v
			if k != "echo/ok" && k != "echo/replayed" {
				failed += v
			}
		}
	}
	if total != workers*perWorker || answered != float64(echoOK) || failed != float64(echoErr) {
		t.Errorf("echo outcomes %v: %v answered, %v failed of %v; the clients saw %d answered, %d failed of %d",
			d, answered, failed, total, echoOK, echoErr, workers*perWorker)
	}
	if v := value(after, "mcpvisor_calls_in_flight", map[string]string{"server": "echo"}); v != 0 {
		t.Errorf("%v calls still in flight", v)
	}
	if v := value(after, "mcpvisor_downstream_sessions", nil); v != 1 {
		t.Errorf("mcpvisor_downstream_sessions = %v, want 1", v)
	}
	st := statusOf(t, h, "echo")
	if st.Calls == 0 || st.Errors < sleepers || !strings.Contains(st.LastCallError, "outcome is unknown") && echoErr == 0 {
		t.Errorf("status calls %d errors %d last call error %q", st.Calls, st.Errors, st.LastCallError)
	}
}

// promtool, the Prometheus project's own checker, accepts the exposition
// after every kind of outcome has been counted.
func TestPromtoolAcceptsMetrics(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian: apt-get install prometheus); the exposition is not checked")
	}
	h, cs := startHost(t, fmt.Sprintf(`
server "echo" {
  command = %q
}
`, bins["echo"]), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, c := range []mcp.CallToolParams{
		{Name: "echo__echo", Arguments: map[string]any{"text": "x"}},
		{Name: "echo__fail", Arguments: map[string]any{"message": "m"}},
		{Name: "echo__jsonrpc_error"},
		{Name: "echo__crash"},
	} {
		cs.CallTool(ctx, &c)
	}
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"mcpvisor_calls_total", "mcpvisor_call_duration_seconds_bucket", "mcpvisor_server_state",
		"mcpvisor_breaker_state", `outcome="crashed_not_replayed"`, `outcome="tool_error"`, `outcome="protocol_error"`} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("exposition lacks %s", want)
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// Tool labels come only from the server's catalog: a name no catalog
// offers is counted under one label value.
func TestMetricsToolLabelBounded(t *testing.T) {
	h := readyHost(t, fmt.Sprintf(`
server "echo" {
  command = %q
}
`, bins["echo"]))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The library's CallTool routes by exposed name; the registry refuses
	// unknown names before they reach a server, so an unknown original
	// name can only come from a call the upstream does not know.
	for i := range 3 {
		h.CallTool(ctx, "echo__echo", map[string]any{"text": fmt.Sprint(i)})
	}
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	fams := scrape(t, srv.URL)
	for _, m := range fams["mcpvisor_calls_total"].Metric {
		for _, lp := range m.Label {
			if lp.GetName() == "tool" && lp.GetValue() != "echo" {
				t.Errorf("unexpected tool label %q", lp.GetValue())
			}
		}
	}
	if v := value(fams, "mcpvisor_calls_total", map[string]string{"server": "echo", "tool": "echo", "outcome": "ok"}); v != 3 {
		t.Errorf("echo ok = %v, want 3", v)
	}
}

func readyz(t *testing.T, base string) (int, host.Readiness) {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r host.Readiness
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, r
}

// /readyz is 503 naming the server while a required server is parked, and
// 200 again once Revive brought it back; a parked server that is not
// required leaves the host ready. /healthz stays ok throughout.
func TestReadyzFollowsRequiredServer(t *testing.T) {
	h := readyHost(t, fmt.Sprintf(`
server "echo" {
  command  = %q
  required = true
  reconnect { max_retries = 0 }
}
server "notes" {
  command  = %q
  reconnect { max_retries = 0 }
}
`, bins["echo"], bins["notes"]))
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	if code, r := readyz(t, srv.URL); code != http.StatusOK || !r.Ready {
		t.Fatalf("all ready: %d %+v", code, r)
	}

	park := func(name string) {
		t.Helper()
		syscall.Kill(statusOf(t, h, name).Pid, syscall.SIGKILL)
		testutil.Eventually(t, 30*time.Second, name+" parked", func() bool { return statusOf(t, h, name).State == "parked" })
	}
	park("notes")
	code, r := readyz(t, srv.URL)
	if code != http.StatusOK || !r.Ready || len(r.NotReady) != 1 || r.NotReady[0].Name != "notes" || r.NotReady[0].Required {
		t.Fatalf("optional server parked: %d %+v", code, r)
	}

	park("echo")
	code, r = readyz(t, srv.URL)
	if code != http.StatusServiceUnavailable || r.Ready || !strings.Contains(r.Reason, "echo") {
		t.Fatalf("required server parked: %d %+v", code, r)
	}
	names := []string{}
	for _, s := range r.NotReady {
		names = append(names, s.Name+"="+string(s.State))
	}
	sort.Strings(names)
	if strings.Join(names, ",") != "echo=parked,notes=parked" {
		t.Errorf("not ready: %v", names)
	}
	resp, err := http.Get(srv.URL + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz while not ready: %v %v", err, resp)
	}
	resp.Body.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Revive(ctx, "echo"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "/readyz 200 after revive", func() bool {
		code, _ := readyz(t, srv.URL)
		return code == http.StatusOK
	})
	fams := scrape(t, srv.URL)
	if v := value(fams, "mcpvisor_server_parks_total", map[string]string{"server": "echo"}); v != 1 {
		t.Errorf("echo parks = %v, want 1", v)
	}
	if v := value(fams, "mcpvisor_server_revivals_total", map[string]string{"server": "echo"}); v != 1 {
		t.Errorf("echo revivals = %v, want 1", v)
	}
	if v := value(fams, "mcpvisor_server_state", map[string]string{"server": "notes", "state": "parked"}); v != 1 {
		t.Errorf("notes parked gauge = %v, want 1", v)
	}
}

// auditLines reads the audit file.
func auditLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// The audit log has one line per call with its outcome — a crash
// included — and never the arguments' text unless asked; with
// include_arguments they are there, secrets redacted.
func TestAuditLog(t *testing.T) {
	const secretText = "the-argument-text-itself"
	const token = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
	t.Setenv("XDG_STATE_HOME", t.TempDir()) // the audit digest key file
	for _, include := range []bool{false, true} {
		t.Run(fmt.Sprintf("include_arguments=%v", include), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "audit.jsonl")
			h, cs := startHostWithClient(t, fmt.Sprintf(`
host {
  audit {
    path              = %q
    include_arguments = %v
  }
}
server "echo" {
  command = %q
}
`, path, include, bins["echo"]), nil, nil, overHTTP, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			calls := []struct {
				tool    string
				args    map[string]any
				outcome string
			}{
				{"echo", map[string]any{"text": secretText + " " + token}, "ok"},
				{"fail", map[string]any{"message": "no"}, "tool_error"},
				{"jsonrpc_error", nil, "protocol_error"},
				{"crash", nil, "crashed_not_replayed"},
			}
			for _, c := range calls {
				cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__" + c.tool, Arguments: c.args})
			}
			testutil.Eventually(t, 30*time.Second, "echo back", func() bool {
				st := statusOf(t, h, "echo")
				return st.State == "ready" && st.Generation == 2
			})
			if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__echo", Arguments: map[string]any{"text": "again"}}); err != nil {
				t.Fatal(err)
			}
			calls = append(calls, struct {
				tool    string
				args    map[string]any
				outcome string
			}{"echo", nil, "ok"})

			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("audit file mode %v, want 0600", fi.Mode().Perm())
			}
			raw, _ := os.ReadFile(path)
			if strings.Contains(string(raw), token) {
				t.Errorf("audit log contains the token:\n%s", raw)
			}
			if strings.Contains(string(raw), secretText) != include {
				t.Errorf("argument text in the audit log: %v, want %v:\n%s", !include, include, raw)
			}
			lines := auditLines(t, path)
			if len(lines) != len(calls) {
				t.Fatalf("%d audit lines for %d calls:\n%s", len(lines), len(calls), raw)
			}
			for i, c := range calls {
				l := lines[i]
				if l["tool"] != c.tool || l["outcome"] != c.outcome || l["server"] != "echo" || l["method"] != "tools/call" {
					t.Errorf("line %d: %v, want tool %s outcome %s", i, l, c.tool, c.outcome)
				}
				if l["client"] != "test" || l["session"] == nil || l["session"] == "" {
					t.Errorf("line %d: session %v client %v", i, l["session"], l["client"])
				}
				if _, ok := l["time"].(string); !ok {
					t.Errorf("line %d has no time", i)
				}
			}
			if lines[3]["error_kind"] != "process_died" || lines[3]["generation"] != 1.0 || lines[4]["generation"] != 2.0 {
				t.Errorf("crash line %v; next %v", lines[3], lines[4])
			}
			args, _ := lines[0]["arguments"].(map[string]any)
			if args == nil || args["hmac_sha256"] == nil || args["hmac_sha256"] == "" || args["bytes"] == nil {
				t.Errorf("arguments %v lack size and digest", lines[0]["arguments"])
			}
			if include && !strings.Contains(fmt.Sprint(args["value"]), "[redacted]") {
				t.Errorf("included arguments %v not redacted", args["value"])
			}

			// Rotation: rename, reopen, and the next call lands in a new file.
			if err := os.Rename(path, path+".1"); err != nil {
				t.Fatal(err)
			}
			if err := h.ReopenAuditLog(); err != nil {
				t.Fatal(err)
			}
			cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo__echo", Arguments: map[string]any{"text": "rotated"}})
			if n := len(auditLines(t, path)); n != 1 {
				t.Errorf("%d lines in the reopened file, want 1", n)
			}
			if n := len(auditLines(t, path+".1")); n != len(calls) {
				t.Errorf("%d lines in the rotated file, want %d", n, len(calls))
			}
		})
	}
}

// /metrics and /readyz sit behind the same ingress as /mcp: the bearer
// token, and a loopback Host on a loopback listener.
func TestObservabilityEndpointsBehindIngress(t *testing.T) {
	h := readyHost(t, fmt.Sprintf(`
host {
  auth {
    bearer_token = "t0ken"
  }
}
server "echo" {
  command = %q
}
`, bins["echo"]))
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	for _, path := range []string{"/metrics", "/readyz"} {
		noToken := http.StatusUnauthorized
		if path == "/readyz" {
			noToken = http.StatusOK // a probe; see TestProbesWithoutToken
		}
		for _, tc := range []struct {
			token, host string
			want        int
		}{
			{"", "", noToken},
			{"wrong", "", http.StatusUnauthorized},
			{"t0ken", "evil.example", http.StatusForbidden},
			{"t0ken", "", http.StatusOK},
		} {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("%s with token %q host %q: %d, want %d", path, tc.token, tc.host, resp.StatusCode, tc.want)
			}
		}
	}
}

// An idle server (stopped after idle_timeout; the next call starts it)
// leaves the host ready, even when it is required.
func TestReadyzCountsIdleServerReady(t *testing.T) {
	// settled, not ready: it may be idle by the time that is looked at.
	h := settledHost(t, fmt.Sprintf(`
server "echo" {
  command      = %q
  required     = true
  idle_timeout = "200ms"
}
`, bins["echo"]))
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	testutil.Eventually(t, 30*time.Second, "echo idle", func() bool { return statusOf(t, h, "echo").State == host.StateIdle })
	if code, r := readyz(t, srv.URL); code != http.StatusOK || !r.Ready || len(r.NotReady) != 0 {
		t.Fatalf("/readyz with the required server idle: %d %+v", code, r)
	}
}
