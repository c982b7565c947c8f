//go:build unix

package hardening_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// consoleSecretName is the variable the needs_config server of the
// triage test lacks.
const consoleSecretName = "CONSOLE_TRIAGE_KEY"

// The console as a triage tool, in headless Chromium against the real
// binary: logged in through the one-time address `mcpvisor ui -print`
// gives, it shows the summary bar (2 ready, 1 problem, 1 parked), the
// servers that need a person first (the needs_config one, last in the
// file, is the first row), the parked one's next attempt, tools
// collapsed; a tool called through the form built from its input schema
// answers in the page and is listed among the recent calls; the missing
// secret typed into the needs_config row is stored (never logged) and the
// server becomes ready without a restart of the host, its reason cleared.
// The screenshot is written to the test's artifact directory (go test
// -artifacts keeps it) and its path logged.
func TestConsoleTriageInBrowser(t *testing.T) {
	chromium := chromiumPath(t)
	state := t.TempDir()
	env := append(os.Environ(), "MCPVISOR_SECRETS=file", "XDG_STATE_HOME="+state)
	servers := fmt.Sprintf("server \"web\" {\n  url = %s\n}\n\nserver \"broken\" {\n  command = \"sh\"\n  args = [\"-c\", \"echo broken-on-purpose >&2; exit 3\"]\n  reconnect {\n    max_retries = 0\n  }\n}\n\n",
		hclString(startHostileToolUpstream(t))) + echoBlock() +
		fmt.Sprintf("\nserver \"needy\" {\n  command = %s\n  env = { KEY = env(%q) }\n}\n", hclString(bins["echo"]), consoleSecretName)
	mv := startMcpvisorEnv(t, env, fmt.Sprintf("  auth {\n    bearer_token = %s\n  }\n", hclString(consoleToken)), servers)
	if !strings.Contains(mv.stderr.String(), "console: http://"+mv.addr+"/ui") {
		t.Errorf("run did not print the console's address at start:\n%s", tail(mv.stderr.String(), 4000))
	}
	// `/` leads to the console (behind the same ingress as every path).
	if resp, _ := consoleRequest(t, mv, "GET", "/", http.Header{"Authorization": {"Bearer " + consoleToken}}); resp.StatusCode != 303 || resp.Header.Get("Location") != "/ui" {
		t.Errorf("GET /: %s to %q, want 303 to /ui", resp.Status, resp.Header.Get("Location"))
	}

	code, out, errOut := runCLI(t, "ui", "-print", "-config", mv.config)
	login := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(login, "http://"+mv.addr+"/ui/login?code=") {
		t.Fatalf("mcpvisor ui -print: exit %d %q %s", code, out, errOut)
	}

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 1000), chromedp.UserDataDir(t.TempDir()))...)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()
	browser, cancelTimeout := context.WithTimeout(browser, 120*time.Second)
	defer cancelTimeout()
	poll := func(what, js string) {
		t.Helper()
		if _, err := chromedp.Run(browser, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(60*time.Second))); err != nil {
			text, _ := chromedp.Run(browser, chromedp.Text(chromedp.CSS(`body`)))
			t.Fatalf("%s: %v\npage:\n%s", what, err, text)
		}
	}

	if err := chromedp.Do(browser, chromedp.Navigate(login), chromedp.WaitVisible(chromedp.CSS(`#live-status.ok`))); err != nil {
		t.Fatalf("opening the one-time login address in chromium: %v", err)
	}
	if url := run(t, browser, chromedp.Location()); url != "http://"+mv.addr+"/ui" {
		t.Errorf("after login the browser is at %q, want /ui (the code out of the address bar)", url)
	}
	poll("the summary bar did not come to 2 ready, 1 problem, 1 parked",
		`document.querySelector('[data-count=ready] b').textContent === "2" && document.querySelector('[data-count=problem] b').textContent === "1" && document.querySelector('[data-count=parked] b').textContent === "1"`)
	rows := run(t, browser, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("table.servers tbody tr")).map(r => r.dataset.server + ":" + r.className)`))
	if len(rows) != 4 || !strings.HasPrefix(rows[0], "needy:") || !strings.Contains(rows[0], "problem") || !strings.HasPrefix(rows[1], "broken:") {
		t.Errorf("rows %q: want the needs_config server, then the parked one, first", rows)
	}
	next := run(t, browser, chromedp.Text(chromedp.CSS(`tr[data-server="broken"] .next`)))
	if !strings.Contains(next, "next attempt") {
		t.Errorf("parked row's next attempt %q", next)
	}
	if reason := run(t, browser, chromedp.Text(chromedp.CSS(`tr[data-server="echo"] td.reason`))); !strings.HasPrefix(reason, "-") {
		t.Errorf("a ready server's reason %q, want none", reason)
	}
	if open := run(t, browser, chromedp.Evaluate[bool](`document.getElementById("tools-echo").open`)); open {
		t.Errorf("echo's tools are not collapsed")
	}
	connect := run(t, browser, chromedp.Text(chromedp.CSS(`#connect`)))
	if !strings.Contains(connect, "mcpvisor client install -http -config "+mv.config+" cursor") || !strings.Contains(connect, "http://"+mv.addr+"/mcp") {
		t.Errorf("connect panel lacks the exact commands and endpoint:\n%s", connect)
	}
	if logs := run(t, browser, chromedp.Evaluate[string](`document.querySelector('#logs-broken pre').textContent`)); !strings.Contains(logs, "broken-on-purpose") {
		t.Errorf("the parked server's recent logs %q lack the line it wrote to stderr", logs)
	}

	// A call through the form built from echo__add's input schema.
	err := chromedp.Do(browser,
		chromedp.Click(chromedp.CSS(`#tools-echo > summary`)),
		chromedp.Click(chromedp.CSS(`#tool-echo__add > summary`)),
		chromedp.SendKeys(chromedp.CSS(`#call-echo__add input[name="a"]`), "2"),
		chromedp.SendKeys(chromedp.CSS(`#call-echo__add input[name="b"]`), "3.5"),
		chromedp.Click(chromedp.CSS(`#call-echo__add button[type="submit"]`)),
	)
	if err != nil {
		t.Fatalf("filling echo__add's form: %v", err)
	}
	poll("the call's result did not show in the page", `document.getElementById("result-echo__add").textContent.includes("5.5")`)
	// The call reaches the recent calls over the live stream; the open
	// form and its result survive the update.
	poll("the console's call is not among the recent calls", `Array.from(document.querySelectorAll("table.calls tbody tr")).some(r => r.textContent.includes("add"))`)
	if res := run(t, browser, chromedp.Evaluate[string](`document.getElementById("result-echo__add").textContent`)); !strings.Contains(res, "5.5") {
		t.Errorf("the result %q did not survive a live update", res)
	}

	path := filepath.Join(t.ArtifactDir(), "console-triage.png")
	shot := run(t, browser, chromedp.CaptureScreenshot())
	checkScreenshot(t, shot)
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("console screenshot: %s", path)
	if keep := os.Getenv("MCPVISOR_KEEP_SCREENSHOT"); keep != "" {
		os.WriteFile(keep, shot, 0o644)
	}

	// The missing secret, typed into the needs_config row.
	const value = "triage-secret-value-4c1e"
	err = chromedp.Do(browser,
		chromedp.SendKeys(chromedp.CSS(`#secret-needy-`+consoleSecretName+` input[name="value"]`), value),
		chromedp.Click(chromedp.CSS(`#secret-needy-`+consoleSecretName+` button[type="submit"]`)),
	)
	if err != nil {
		t.Fatalf("typing the secret: %v", err)
	}
	poll("the needs_config server did not become ready after its secret was set", `document.querySelector('tr[data-server="needy"]').classList.contains("state-ready")`)
	if reason := run(t, browser, chromedp.Text(chromedp.CSS(`tr[data-server="needy"] td.reason`))); !strings.HasPrefix(reason, "-") {
		t.Errorf("needy's reason %q after it became ready, want it cleared", reason)
	}
	notice := run(t, browser, chromedp.Text(chromedp.CSS(`#notice`)))
	if !strings.Contains(notice, "stored "+consoleSecretName) {
		t.Errorf("notice %q, want the store confirmed", notice)
	}
	mv.alive(t) // the same process: no restart
	if strings.Contains(mv.stderr.String(), value) || strings.Contains(run(t, browser, chromedp.Text(chromedp.CSS(`body`))), value) {
		t.Errorf("the secret's value is in the host's log or the page")
	}
	if _, err := os.Stat(filepath.Join(state, "mcpvisor", "secrets.json")); err != nil {
		t.Errorf("the secret store file: %v", err)
	}
}
