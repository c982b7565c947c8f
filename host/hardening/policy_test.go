//go:build unix

package hardening_test

// Policies (docs/auth.md) against the real binary: callers identified by a
// real OpenID provider's tokens and by the shared token see different
// lists, a call outside policy gets JSON-RPC -32011 naming the rule and
// never reaches the upstream (which counts every call it gets), refusals
// are audited with the subject and counted in the metrics, a rate limit
// says when to retry and the retry then works, a reload changes the
// policies without restarting a server, stdio runs as the local user, and
// `mcpvisor policy check` explains decisions from the file alone.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// countingUpstream is an MCP server over streamable HTTP whose tools
// count the calls that reach them.
type countingUpstream struct {
	url string

	mu    sync.Mutex
	calls map[string]int
}

func startCountingUpstream(t *testing.T, tools ...string) *countingUpstream {
	t.Helper()
	u := &countingUpstream{calls: map[string]int{}}
	srv := mcp.NewServer(&mcp.Implementation{Name: "counting", Version: "1"}, nil)
	for _, name := range tools {
		srv.AddTool(&mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				u.mu.Lock()
				u.calls[name]++
				u.mu.Unlock()
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "called " + name}}}, nil
			})
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	u.url = hs.URL
	return u
}

func (u *countingUpstream) count(tool string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls[tool]
}

// listedTools is the sorted names of tools/list.
func listedTools(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callBound)
	defer cancel()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	return names
}

// waitListed waits until tools/list is exactly want (the servers connect
// after mcpvisor is up).
func waitListed(t *testing.T, cs *mcp.ClientSession, want ...string) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for {
		got := listedTools(t, cs)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("tools/list %v; want %v", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rpcError calls tool and returns the JSON-RPC error it must fail with.
func rpcError(t *testing.T, cs *mcp.ClientSession, tool string) *jsonrpc.Error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callBound)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}})
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		t.Fatalf("calling %s: %v %+v; want a JSON-RPC error", tool, err, res)
	}
	return we
}

// callOK calls tool and fails the test unless it answers.
func callOK(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callBound)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil || res.IsError {
		t.Fatalf("calling %s: %v %+v", tool, err, res)
	}
	return res
}

// errorData decodes a JSON-RPC error's data.
func errorData(t *testing.T, e *jsonrpc.Error) map[string]any {
	t.Helper()
	var d map[string]any
	if err := json.Unmarshal(e.Data, &d); err != nil {
		t.Fatalf("error data %q: %v", e.Data, err)
	}
	return d
}

// metricsWithToken is mcpvisor's /metrics, asked with the shared token.
func (mv *mcpvisor) metricsWithToken(t *testing.T, token string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+mv.addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := newHTTPClient(t, healthzTimeout).Do(req)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s %s", resp.Status, body)
	}
	return string(body)
}

// replicaLabel is the replica label every series of mcpvisor carries.
var replicaLabel = regexp.MustCompile(`,?replica="[^"]*"`)

// metricValue reads one series of mcpvisor's /metrics, named without its
// replica label (0 when absent).
func (mv *mcpvisor) metricValue(t *testing.T, token, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(mv.metricsWithToken(t, token), "\n") {
		if name, value, ok := strings.Cut(line, " "); ok && strings.Replace(replicaLabel.ReplaceAllString(name, ""), "{,", "{", 1) == series {
			var v float64
			fmt.Sscan(value, &v)
			return v
		}
	}
	return 0
}

const policySubjects = `
policy "engineering" {
  subjects = ["group:engineering"]
  tools    = ["gh__*"]
  deny     = ["*__delete_*"]
}

policy "ops" {
  subjects = ["token"]
  tools    = ["gh__read"]
}
`

// TestPolicySubjects: an OIDC subject (group engineering) and the shared
// token's caller see the lists their policies allow; a denied call gets
// -32011 naming the rule, never reaches the upstream, is audited with the
// subject and counted by policy.
func TestPolicySubjects(t *testing.T) {
	const shared = "shared-secret-for-the-policy-test"
	gh := startCountingUpstream(t, "search_code", "delete_repo", "read")
	p := startProvider(t, "")
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	servers := fmt.Sprintf("server \"gh\" {\n  url = %s\n}\n", hclString(gh.url)) + policySubjects
	mv := startMcpvisorWith(t, oidcHost(p.issuer, fmt.Sprintf("    token = %s\n", hclString(shared)), "")+
		fmt.Sprintf("  audit {\n    path = %s\n  }\n", hclString(auditPath)), servers)
	p.audience = "http://" + mv.addr + "/mcp"

	eng, err := connectWithToken(t, mv, p.token(t, clientGood))
	if err != nil {
		t.Fatalf("connecting with a provider's token: %v", err)
	}
	ops, err := connectWithToken(t, mv, shared)
	if err != nil {
		t.Fatalf("connecting with the shared token: %v", err)
	}
	waitListed(t, eng, "gh__read", "gh__search_code")
	waitListed(t, ops, "gh__read")

	// GET /tools (what `mcpvisor tools` reads) is filtered the same way.
	for token, want := range map[string][]string{shared: {"gh__read"}, p.token(t, clientGood): {"gh__read", "gh__search_code"}} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+mv.addr+"/tools", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := newHTTPClient(t, healthzTimeout).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var tools []struct{ Name string }
		json.NewDecoder(resp.Body).Decode(&tools)
		resp.Body.Close()
		var names []string
		for _, tool := range tools {
			names = append(names, tool.Name)
		}
		slices.Sort(names)
		if !slices.Equal(names, want) {
			t.Errorf("GET /tools: %v; want %v", names, want)
		}
	}

	// Allowed calls reach the upstream.
	callOK(t, eng, "gh__search_code", nil)
	callOK(t, ops, "gh__read", nil)

	// A deny wins over the policy's allow.
	e := rpcError(t, eng, "gh__delete_repo")
	if d := errorData(t, e); e.Code != -32011 || d["kind"] != "denied" || d["policy"] != "engineering" || d["rule"] != `policy "engineering" deny "*__delete_*"` ||
		!strings.Contains(e.Message, `policy "engineering" deny "*__delete_*"`) || !strings.Contains(e.Message, "mcpvisor policy check") {
		t.Errorf("denied call: code %d, message %q, data %s; want -32011 naming the deny rule", e.Code, e.Message, e.Data)
	}
	// No policy allows the shared token gh__search_code: the default deny.
	e = rpcError(t, ops, "gh__search_code")
	if d := errorData(t, e); e.Code != -32011 || d["policy"] != "" || !strings.Contains(e.Message, "no policy allows tool \"gh__search_code\" to the shared token's caller (default deny") {
		t.Errorf("default deny: code %d, message %q, data %s", e.Code, e.Message, e.Data)
	}
	if n := gh.count("delete_repo"); n != 0 {
		t.Errorf("the upstream's delete_repo ran %d times; a denied call must never reach it", n)
	}
	if n := gh.count("search_code"); n != 1 {
		t.Errorf("the upstream's search_code ran %d times; want 1 (the allowed call only)", n)
	}

	// Audit: the allowed calls as usual, the refusals with subject and rule.
	recs := waitRecords(t, auditPath, 4)
	var denied []map[string]any
	for _, r := range recs {
		if r["outcome"] == "denied" {
			denied = append(denied, r)
		}
	}
	if len(denied) != 2 {
		t.Fatalf("%d denied audit lines in %v; want 2", len(denied), recs)
	}
	for _, r := range denied {
		sub, _ := r["subject"].(map[string]any)
		switch r["tool"] {
		case "delete_repo":
			if sub["via"] != "oidc" || sub["id"] != "user-"+clientGood || r["policy"] != "engineering" || r["rule"] != `policy "engineering" deny "*__delete_*"` || r["server"] != "gh" || r["attempts"] != 0.0 {
				t.Errorf("audit line of the denied delete: %v", r)
			}
		case "search_code":
			if sub["via"] != "token" || !strings.Contains(fmt.Sprint(r["rule"]), "default deny") {
				t.Errorf("audit line of the token's denied search: %v", r)
			}
		default:
			t.Errorf("unexpected denied audit line %v", r)
		}
	}

	// Metrics: by decision and policy, never by subject.
	for series, want := range map[string]float64{
		`mcpvisor_policy_decisions_total{decision="allow",policy="engineering"}`: 1,
		`mcpvisor_policy_decisions_total{decision="allow",policy="ops"}`:         1,
		`mcpvisor_policy_decisions_total{decision="deny",policy="engineering"}`:  1,
		`mcpvisor_policy_decisions_total{decision="deny",policy=""}`:             1,
	} {
		if got := mv.metricValue(t, shared, series); got != want {
			t.Errorf("%s = %v; want %v", series, got, want)
		}
	}
	if strings.Contains(mv.metricsWithToken(t, shared), "user-"+clientGood) {
		t.Error("a metric names the subject")
	}
}

// TestPolicyRateLimit: past a per-tool rate, a call gets -32012 with when
// to retry; after waiting that long it goes through. The limit hit is
// counted, and the refused call never reached the upstream.
func TestPolicyRateLimit(t *testing.T) {
	const shared = "shared-secret-for-the-rate-test"
	gh := startCountingUpstream(t, "search_code", "read")
	servers := fmt.Sprintf("server \"gh\" {\n  url = %s\n}\n", hclString(gh.url)) + `
policy "ops" {
  subjects = ["token"]
  tools    = ["gh__*"]
  rate "gh__search_*" {
    calls_per_minute = 12
    burst            = 1
  }
}
`
	mv := startMcpvisorWith(t, fmt.Sprintf("  auth {\n    token = %s\n  }\n", hclString(shared)), servers)
	cs, err := connectWithToken(t, mv, shared)
	if err != nil {
		t.Fatal(err)
	}
	waitListed(t, cs, "gh__read", "gh__search_code")
	callOK(t, cs, "gh__search_code", nil)
	e := rpcError(t, cs, "gh__search_code")
	d := errorData(t, e)
	ms, _ := d["retry_after_ms"].(float64)
	if e.Code != -32012 || d["kind"] != "rate_limited" || d["rule"] != `policy "ops" rate "gh__search_*"` || ms <= 0 || ms > 5000 ||
		!strings.Contains(e.Message, "retry in ") || d["retry_at"] == nil {
		t.Fatalf("call past the rate: code %d, message %q, data %s; want -32012 with retry_after_ms in (0, 5000]", e.Code, e.Message, e.Data)
	}
	// The other tool has no labelled rate: not limited.
	callOK(t, cs, "gh__read", nil)
	if n := gh.count("search_code"); n != 1 {
		t.Errorf("the upstream's search_code ran %d times; want 1", n)
	}
	if hits := mv.metricValue(t, shared, `mcpvisor_limit_hits_total{limit="calls_per_minute"}`); hits != 1 {
		t.Errorf("mcpvisor_limit_hits_total{limit=\"calls_per_minute\"} = %v; want 1", hits)
	}
	if got := mv.metricValue(t, shared, `mcpvisor_policy_decisions_total{decision="rate_limited",policy="ops"}`); got != 1 {
		t.Errorf("rate_limited decisions %v; want 1", got)
	}
	// Waiting as told is enough.
	time.Sleep(time.Duration(ms) * time.Millisecond)
	callOK(t, cs, "gh__search_code", nil)
	if n := gh.count("search_code"); n != 2 {
		t.Errorf("the upstream's search_code ran %d times; want 2", n)
	}
}

// TestPolicyReload: a SIGHUP with changed policies changes what a caller
// sees and may call, tells the client its list changed, and restarts no
// server.
func TestPolicyReload(t *testing.T) {
	const shared = "shared-secret-for-the-reload-test"
	auth := fmt.Sprintf("  auth {\n    token = %s\n  }\n", hclString(shared))
	policyFor := func(tools string) string {
		return fmt.Sprintf("policy \"ops\" {\n  subjects = [\"token\"]\n  tools    = [%s]\n}\n", tools)
	}
	mv := startMcpvisorWith(t, auth, echoBlock()+policyFor(`"echo__echo", "echo__pid"`))
	changed := make(chan struct{}, 16)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	client := mcp.NewClient(&mcp.Implementation{Name: "reload-test", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   "http://" + mv.addr + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{base: tr, token: shared}},
		MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: sessionProtocol})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	waitListed(t, cs, "echo__echo", "echo__pid")
	pid := textOf(callOK(t, cs, "echo__pid", nil))
	if e := rpcError(t, cs, "echo__add"); e.Code != -32011 {
		t.Fatalf("echo__add before the reload: %d %q; want -32011", e.Code, e.Message)
	}
	for len(changed) > 0 {
		<-changed
	}

	cfg := hostConfig(mv.addr, auth, echoBlock()+policyFor(`"echo__add", "echo__pid"`))
	if err := os.WriteFile(mv.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(mv.pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(readyTimeout):
		t.Fatalf("no tools/list_changed within %s of the reload", readyTimeout)
	}
	waitListed(t, cs, "echo__add", "echo__pid")
	callOK(t, cs, "echo__add", map[string]any{"a": 1, "b": 2})
	if e := rpcError(t, cs, "echo__echo"); e.Code != -32011 {
		t.Errorf("echo__echo after the reload: %d %q; want -32011", e.Code, e.Message)
	}
	if got := textOf(callOK(t, cs, "echo__pid", nil)); got != pid {
		t.Errorf("the echo server's pid went from %s to %s: a policy reload restarted it", pid, got)
	}
}

// textOf is a result's first text content.
func textOf(res *mcp.CallToolResult) string {
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			return tc.Text
		}
	}
	return ""
}

// TestPolicyStdio: `mcpvisor run --stdio` runs as the local user named by
// stdio_subject: its list is filtered, a tools/call it may make goes
// through (on the forwarding path), and one it may not gets -32011.
func TestPolicyStdio(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.hcl")
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	cfg := "host {\n  log_level = \"debug\"\n  drain = \"0s\"\n  stdio_subject = \"tester\"\n  audit {\n    path = " + hclString(auditPath) + "\n  }\n}\n\n" + echoBlock() + `
policy "me" {
  subjects = ["sub:tester"]
  tools    = ["echo__echo", "echo__pid"]
  deny     = ["echo__pid"]
}
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startLines(t, exec.Command(bins[testutil.Mcpvisor], "run", "--stdio", "-config", path))
	c.initialize(t)
	c.waitTool(t, "echo__echo")
	c.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	var list struct {
		Result struct {
			Tools []struct{ Name string } `json:"tools"`
		} `json:"result"`
	}
	json.Unmarshal([]byte(c.answer(t, 1)), &list)
	if len(list.Result.Tools) != 1 || list.Result.Tools[0].Name != "echo__echo" {
		t.Errorf("tools/list over stdio %+v; want echo__echo only", list.Result.Tools)
	}
	c.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo__echo","arguments":{"text":"hi"}}}`)
	if got := c.answer(t, 2); !strings.Contains(got, `"text":"hi"`) {
		t.Errorf("allowed call over stdio: %s", got)
	}
	for id, tool := range map[int]string{3: "echo__pid", 4: "echo__add"} {
		c.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{}}}`, id, tool))
		var resp struct {
			Error *jsonrpc.Error `json:"error"`
		}
		got := c.answer(t, id)
		json.Unmarshal([]byte(got), &resp)
		if resp.Error == nil || resp.Error.Code != -32011 || !strings.Contains(resp.Error.Message, `the local user "tester"`) {
			t.Errorf("%s over stdio: %s; want -32011 naming the local user tester", tool, got)
		}
	}
	// The audit log names the local user, on the allowed call too.
	recs := waitRecords(t, auditPath, 3)
	outcomes := map[string]string{}
	for _, r := range recs {
		sub, _ := r["subject"].(map[string]any)
		if sub["via"] != "local" || sub["id"] != "tester" {
			t.Errorf("audit line %v; want subject {via: local, id: tester}", r)
		}
		outcomes[fmt.Sprint(r["tool"])] = fmt.Sprint(r["outcome"])
	}
	if outcomes["echo"] != "ok" || outcomes["pid"] != "denied" || outcomes["add"] != "denied" {
		t.Errorf("audit outcomes %v; want echo ok, pid and add denied", outcomes)
	}
}

// TestPolicyCheckCLI: `mcpvisor policy check` explains a decision from the
// config file, with exit code 0 for allow, 1 for deny, 2 for bad usage.
func TestPolicyCheckCLI(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.hcl")
	if err := os.WriteFile(path, []byte(policySubjects+`
policy "search" {
  subjects = ["email:alice@example.com"]
  tools    = ["gh__search_*"]
  rate "gh__search_*" {
    calls_per_minute = 10
  }
}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"group:engineering", "gh__delete_repo"}, 1, []string{`deny: tool "gh__delete_repo" for a token with group:engineering`, `decided by: policy "engineering" deny "*__delete_*"`, "policies that apply: engineering"}},
		{[]string{"sub:u1", "email:alice@example.com", "group:engineering", "gh__search_code"}, 0, []string{`allow: tool "gh__search_code"`, `decided by: policy "engineering" tools "gh__*"`, "policies that apply: engineering, search", `rate limit: policy "search" rate "gh__search_*": 10 calls a minute per subject, over every tool it matches (burst 10)`}},
		{[]string{"token", "gh__read"}, 0, []string{`allow: tool "gh__read" for the shared token's caller`, `policy "ops" tools "gh__read"`}},
		{[]string{"sub:nobody", "gh__read"}, 1, []string{`no policy applies to subject "nobody" (default deny)`}},
	} {
		code, stdout, stderr := runCLI(t, append([]string{"policy", "check", "-config", path}, tc.args...)...)
		if code != tc.code {
			t.Errorf("policy check %v: exit %d; want %d\nstdout: %s\nstderr: %s", tc.args, code, tc.code, stdout, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(stdout, w) {
				t.Errorf("policy check %v: output lacks %q:\n%s", tc.args, w, stdout)
			}
		}
	}
	if code, _, stderr := runCLI(t, "policy", "check", "-config", path, "groups:engineering", "gh__read"); code != 2 || !strings.Contains(stderr, `did you mean "group:engineering"?`) {
		t.Errorf("a misspelled subject kind: exit %d, stderr %q; want 2 with a suggestion", code, stderr)
	}
}

// TestPolicyControlSocketIsLocal: on a host without auth, `mcpvisor call`
// reaches the running host through its control socket, which only the
// local user can: it calls as the local user. A client of the TCP
// listener is anonymous, and the local user's policy does not apply to it.
func TestPolicyControlSocketIsLocal(t *testing.T) {
	mv := startMcpvisorWith(t, "  stdio_subject = \"tester\"\n", echoBlock()+`
policy "me" {
  subjects = ["local"]
  tools    = ["echo__echo"]
}
`)
	code, stdout, stderr := runCLI(t, "call", "-config", mv.config, "echo__echo", `{"text":"from the socket"}`)
	if code != 0 || !strings.Contains(stdout, "from the socket") {
		t.Errorf("mcpvisor call echo__echo through the control socket: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	code, _, stderr = runCLI(t, "call", "-config", mv.config, "echo__add", `{"a":1,"b":2}`)
	if code != 1 || !strings.Contains(stderr, `the local user "tester"`) || !strings.Contains(stderr, "default deny") {
		t.Errorf("mcpvisor call echo__add: exit %d, stderr %q; want 1 naming the local user and the default deny", code, stderr)
	}
	cs := connectClient(t, mv)
	if e := rpcError(t, cs, "echo__echo"); e.Code != -32011 || !strings.Contains(e.Message, "an anonymous caller") {
		t.Errorf("echo__echo over TCP without auth: %d %q; want -32011 for an anonymous caller", e.Code, e.Message)
	}
}
