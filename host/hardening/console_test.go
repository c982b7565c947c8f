//go:build unix

package hardening_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// consoleToken is the host's bearer token in the console tests.
const consoleToken = "console-test-token-7d1f"

// hostileDescription is a tool description that would run script and add
// an element if the console put it into the page unescaped.
const hostileDescription = `<script>document.title="pwned"</script><img id="injected" src="x" onerror="document.title='pwned'">`

// chromiumPath finds headless Chromium: the test skips without it, except
// in CI (CI=true), where .ci/system-tools.sh installs it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed; CI must have it (.ci/system-tools.sh installs Debian's chromium package)")
	}
	t.Skip("chromium is not installed (apt-get install -y chromium); skipping the browser test of the web console")
	return ""
}

// startHostileToolUpstream serves, over streamable HTTP, one tool "greet"
// whose description is hostileDescription.
func startHostileToolUpstream(t *testing.T) string {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "hostile-text", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "greet", Description: hostileDescription, InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello"}}}, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

// consoleHost starts mcpvisor with a bearer token and three servers: "web"
// (the hostile upstream), "broken" (a command that exits at once, so it
// parks after its first failure) and "echo" (a process that runs).
func consoleHost(t *testing.T, hostAttrs string) *mcpvisor {
	t.Helper()
	hostAttrs += fmt.Sprintf("  auth {\n    bearer_token = %s\n  }\n", hclString(consoleToken))
	servers := fmt.Sprintf("server \"web\" {\n  url = %s\n}\n\nserver \"broken\" {\n  command = \"sh\"\n  args = [\"-c\", \"echo broken-on-purpose >&2; exit 3\"]\n  reconnect {\n    max_retries = 0\n  }\n}\n",
		hclString(startHostileToolUpstream(t))) + echoBlock()
	return startMcpvisorWith(t, hostAttrs, servers)
}

// consoleRequest sends one request to the host with extra headers and returns the
// response (body read) without following redirects.
func consoleRequest(t *testing.T, mv *mcpvisor, method, path string, header http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+mv.addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if h := header.Get("Host"); h != "" {
		req.Host = h
	}
	hc := newHTTPClient(t, healthzTimeout)
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp, string(body)
}

// The console is behind the same ingress as /status: a rebinding Host and
// a missing or wrong token are refused; the token, once, from loopback,
// becomes an HttpOnly SameSite=Strict cookie that is not the token, and
// that cookie authorizes a control POST only when its Origin is the
// console's own.
func TestConsoleIngress(t *testing.T) {
	mv := consoleHost(t, "")

	if resp, _ := consoleRequest(t, mv, "GET", "/ui", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /ui without the token: %s, want 401", resp.Status)
	}
	if resp, _ := consoleRequest(t, mv, "GET", "/ui?token=wrong", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /ui?token=wrong: %s, want 401", resp.Status)
	}
	auth := http.Header{"Authorization": {"Bearer " + consoleToken}}
	rebind := http.Header{"Authorization": {"Bearer " + consoleToken}, "Host": {"evil.example:80"}}
	if resp, _ := consoleRequest(t, mv, "GET", "/ui", rebind); resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET /ui with Host evil.example: %s, want 403", resp.Status)
	}
	if resp, _ := consoleRequest(t, mv, "GET", "/ui?token="+consoleToken, http.Header{"Host": {"evil.example"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET /ui?token= with Host evil.example: %s, want 403", resp.Status)
	}
	if resp, _ := consoleRequest(t, mv, "GET", "/ui/events", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /ui/events without the token: %s, want 401", resp.Status)
	}
	resp, body := consoleRequest(t, mv, "GET", "/ui", auth)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "broken") {
		t.Errorf("GET /ui with the token: %s, want 200 and a page naming the servers:\n%s", resp.Status, tail(body, 2000))
	}

	resp, _ = consoleRequest(t, mv, "GET", "/ui?token="+consoleToken, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui" {
		t.Fatalf("GET /ui?token=TOKEN: %s to %q, want 303 to /ui", resp.Status, resp.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "mcpvisor_console" {
			cookie = c
		}
	}
	if cookie == nil {
		t.Fatalf("GET /ui?token=TOKEN set no console cookie: %q", resp.Header.Values("Set-Cookie"))
	}
	if !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || strings.Contains(cookie.Value, consoleToken) {
		t.Errorf("console cookie %q: want HttpOnly, SameSite=Strict and not the token itself", resp.Header.Get("Set-Cookie"))
	}
	withCookie := http.Header{"Cookie": {cookie.String()}}
	if resp, _ := consoleRequest(t, mv, "GET", "/ui", withCookie); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /ui with the console cookie: %s, want 200", resp.Status)
	}
	// The cookie is the console's, not a bearer token for the rest.
	if resp, _ := consoleRequest(t, mv, "GET", "/status", withCookie); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /status with only the console cookie: %s, want 401", resp.Status)
	}
	// CSRF: a control POST with the cookie but without the console's own
	// Origin is not authorized by it.
	if resp, _ := consoleRequest(t, mv, "POST", "/control/revive?server=broken", withCookie); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /control/revive with the cookie and no Origin: %s, want 401", resp.Status)
	}
	cross := http.Header{"Cookie": {cookie.String()}, "Origin": {"http://127.0.0.1:1"}}
	if resp, _ := consoleRequest(t, mv, "POST", "/control/revive?server=broken", cross); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /control/revive with the cookie from another origin: %s, want 401", resp.Status)
	}
	same := http.Header{"Cookie": {cookie.String()}, "Origin": {"http://" + mv.addr}}
	if resp, body := consoleRequest(t, mv, "POST", "/control/revive?server=broken", same); resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		t.Errorf("POST /control/revive with the cookie from the console's origin: %s %s, want it served", resp.Status, body)
	}
}

// The console in a real browser: headless Chromium opens /ui with the
// token, gets the live update, shows both servers, the parked one's
// reason, the recent call (without its arguments) and the hostile tool
// description as text; the screenshot is a real rendering; the revive
// button reaches the host and its answer shows in the page.
func TestConsoleInBrowser(t *testing.T) {
	chromium := chromiumPath(t)
	mv := consoleHost(t, "")

	// One call through the host, with an argument the console must not show.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	client := mcp.NewClient(&mcp.Implementation{Name: "console-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   "http://" + mv.addr + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{tr, consoleToken}},
		MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: sessionProtocol})
	if err != nil {
		t.Fatalf("connecting to mcpvisor's /mcp: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	waitTool(t, cs, "web__greet")
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "web__greet", Arguments: map[string]any{"secret": "argument-value-never-shown"}}); err != nil {
		t.Fatalf("calling greet: %v", err)
	}
	var parkedReason string
	deadline := time.Now().Add(readyTimeout)
	for {
		if st := mv.statusWithToken(t); st["broken"].State == "parked" && st["echo"].State == "ready" {
			parkedReason = st["broken"].LastError
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server broken did not park, or echo get ready, within %s", readyTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900), chromedp.UserDataDir(t.TempDir()))...)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()
	browser, cancelTimeout := context.WithTimeout(browser, 90*time.Second)
	defer cancelTimeout()

	err = chromedp.Do(browser,
		chromedp.Navigate("http://"+mv.addr+"/ui?token="+consoleToken),
		// "live" is written by the first update the stream pushes.
		chromedp.WaitVisible(chromedp.CSS(`#live-status.ok`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-server="broken"].state-parked`)),
	)
	if err != nil {
		t.Fatalf("opening the console in chromium: %v", err)
	}
	// Tools are collapsed per server (consoletriage.go): open web's.
	if err := chromedp.Do(browser, chromedp.Click(chromedp.CSS(`#tools-web > summary`))); err != nil {
		t.Fatalf("opening web's tools: %v", err)
	}
	status := run(t, browser, chromedp.Text(chromedp.CSS(`#live-status`)))
	text := run(t, browser, chromedp.Text(chromedp.CSS(`body`)))
	title := run(t, browser, chromedp.Title())
	noInjected := run(t, browser, chromedp.Evaluate[bool](`document.getElementById("injected") === null`))
	shot := run(t, browser, chromedp.CaptureScreenshot())
	// RSS and CPU time come from /proc for the running process, "-" for
	// the others.
	rss := run(t, browser, chromedp.Evaluate[string](`document.querySelector('tr[data-server="echo"]').cells[4].textContent`))
	cpu := run(t, browser, chromedp.Evaluate[string](`document.querySelector('tr[data-server="echo"]').cells[5].textContent`))
	if !strings.HasSuffix(rss, " MiB") || rss == "0.0 MiB" || cpu == "-" {
		t.Errorf("echo's RSS %q and CPU %q, want them read from /proc", rss, cpu)
	}
	webRSS := run(t, browser, chromedp.Evaluate[string](`document.querySelector('tr[data-server="web"]').cells[4].textContent`))
	if webRSS != "-" {
		t.Errorf("web (no process) RSS %q, want -", webRSS)
	}
	if status != "live" {
		t.Errorf("live status %q, want live", status)
	}
	for _, want := range []string{"web", "broken", "parked", parkedReason, "greet", hostileDescription} {
		if !strings.Contains(text, want) {
			t.Errorf("console text lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "argument-value-never-shown") {
		t.Errorf("console shows a call's argument:\n%s", text)
	}
	if title == "pwned" || !noInjected {
		t.Errorf("the hostile tool description ran or injected markup (title %q, #injected absent: %v)", title, noInjected)
	}
	checkScreenshot(t, shot)

	// A call made while the page is open reaches it over the live stream,
	// without a reload.
	if n := run(t, browser, chromedp.Evaluate[int](`document.querySelectorAll("table.calls tbody tr").length`)); n != 1 {
		t.Errorf("recent calls listed: %d, want 1", n)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "web__greet", Arguments: map[string]any{}}); err != nil {
		t.Fatalf("calling greet again: %v", err)
	}
	if _, err := chromedp.Run(browser, chromedp.Poll[bool](`document.querySelectorAll("table.calls tbody tr").length === 2`, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Errorf("the second call did not appear in the open page: %v", err)
	}

	err = chromedp.Do(browser, chromedp.Click(chromedp.CSS(`button[data-action="revive"][data-server="broken"]`)))
	if err != nil {
		t.Fatalf("clicking revive: %v", err)
	}
	if _, err := chromedp.Run(browser, chromedp.Poll[bool](`document.getElementById("notice").textContent.includes("HTTP ")`, chromedp.WithPollingTimeout(60*time.Second))); err != nil {
		t.Fatalf("no answer to revive in the page: %v", err)
	}
	notice := run(t, browser, chromedp.Text(chromedp.CSS(`#notice`)))
	// The host answered the request the button sent: its JSON (the
	// server's state after the revive, or why it failed) is in the page.
	if !strings.HasPrefix(notice, "revive broken: HTTP 200: now ") && !strings.HasPrefix(notice, "revive broken: HTTP 500: ") {
		t.Errorf("notice after revive %q, want the host's answer", notice)
	}
	t.Logf("after revive: %s", notice)
	if !strings.Contains(mv.stderr.String(), "broken") {
		t.Errorf("host log does not mention the revived server")
	}
}

// run runs one chromedp action and returns its value.
func run[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	return v
}

// checkScreenshot requires a PNG that decodes and is a real rendering: of
// the window's size and with more than a handful of colours.
func checkScreenshot(t *testing.T, shot []byte) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	b := img.Bounds()
	if b.Dx() < 640 || b.Dy() < 400 {
		t.Errorf("screenshot is %dx%d, want the 1280x900 window", b.Dx(), b.Dy())
	}
	colours := map[[3]uint32]bool{}
	for y := b.Min.Y; y < b.Max.Y; y += 3 {
		for x := b.Min.X; x < b.Max.X; x += 3 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colours[[3]uint32{r, g, bl}] = true
		}
	}
	if len(colours) < 16 {
		t.Errorf("screenshot has %d colours: a blank page, not the console", len(colours))
	}
	if os.Getenv("MCPVISOR_KEEP_SCREENSHOT") != "" {
		os.WriteFile(os.Getenv("MCPVISOR_KEEP_SCREENSHOT"), shot, 0o644)
	}
}

// bearerTransport adds the host's bearer token to every request.
type bearerTransport struct {
	base  http.RoundTripper
	token string
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// statusWithToken is status on a host with consoleToken.
func (mv *mcpvisor) statusWithToken(t *testing.T) map[string]serverStatus {
	t.Helper()
	resp, body := consoleRequest(t, mv, "GET", "/status", http.Header{"Authorization": {"Bearer " + consoleToken}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /status: %s", resp.Status)
	}
	var doc struct {
		Servers []serverStatus `json:"servers"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("GET /status: %v", err)
	}
	out := map[string]serverStatus{}
	for _, s := range doc.Servers {
		out[s.Name] = s
	}
	return out
}

// The console's live-update streams are bounded (console { max_streams }):
// past the limit a page gets 503 saying why, and a closed stream frees its
// place.
func TestConsoleStreamsBounded(t *testing.T) {
	const limit = 3
	mv := consoleHost(t, fmt.Sprintf("  console {\n    max_streams = %d\n  }\n", limit))
	open := func() (*http.Response, error) {
		req, _ := http.NewRequest("GET", "http://"+mv.addr+"/ui/events", nil)
		req.Header.Set("Authorization", "Bearer "+consoleToken)
		tr := &http.Transport{DisableKeepAlives: true, Proxy: nil}
		t.Cleanup(tr.CloseIdleConnections)
		return (&http.Client{Transport: tr}).Do(req)
	}
	var streams []*http.Response
	t.Cleanup(func() {
		for _, s := range streams {
			s.Body.Close()
		}
	})
	for i := range limit {
		resp, err := open()
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		streams = append(streams, resp)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("stream %d: %s %q, want 200 text/event-stream", i, resp.Status, resp.Header.Get("Content-Type"))
		}
		// The first event arrives at once: the stream is counted.
		line := make([]byte, len("event: update\n"))
		if _, err := io.ReadFull(resp.Body, line); err != nil || string(line) != "event: update\n" {
			t.Fatalf("stream %d: first bytes %q, %v; want an update event", i, line, err)
		}
	}
	resp, err := open()
	if err != nil {
		t.Fatalf("stream past the limit: %v", err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "max_streams") {
		t.Errorf("stream past the limit: %s %q, want 503 saying why", resp.Status, body)
	}
	streams[0].Body.Close()
	streams = streams[1:]
	deadline := time.Now().Add(readyTimeout)
	for {
		resp, err := open()
		if err == nil && resp.StatusCode == http.StatusOK {
			streams = append(streams, resp)
			break
		}
		if err == nil {
			resp.Body.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("a closed stream did not free its place within %s", readyTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	mv.healthz(t, "with the console's streams open")
}
