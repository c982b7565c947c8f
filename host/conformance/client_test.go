//go:build unix

package conformance_test

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// clientOKLine is what internal/client prints last when every call it made
// through mcpvisor succeeded.
const clientOKLine = "mcpvisor-conformance-client: ok"

// clientSpecVersions are the spec versions whose client scenarios must all
// be run: `conformance list --client --spec-version V` for each. "extension"
// holds the client_credentials (secret and private_key_jwt) and
// cross-app-access scenarios, "draft" those of the next spec.
var clientSpecVersions = []string{"2025-03-26", "2025-06-18", "2025-11-25", "extension", "draft"}

// clientRuns are the suite invocations of TestClientConformance. The auth
// suite covers every auth scenario of 2025-06-18 and 2025-11-25, the
// backcompat suite the two of 2025-03-26, and the extensions and draft
// suites those of the "extension" and "draft" versions; the suite runs a suite's
// scenarios in parallel and one --scenario at a time.
var clientRuns = [][]string{
	{"--suite", "auth"},
	{"--suite", "backcompat"},
	{"--suite", "extensions"},
	{"--suite", "draft"},
	{"--scenario", "initialize"},
	{"--scenario", "tools_call"},
	{"--scenario", "sse-retry"},
}

// clientTimeout bounds one suite invocation; the suite's own per-scenario
// client timeout (30 s) ends a hung client before this.
const clientTimeout = 2 * time.Minute

// clientExpectation is how a client scenario ends: the suite's checks and
// whether the client command succeeded (every call through mcpvisor did).
type clientExpectation struct {
	outcome  outcome
	clientOK bool
	reason   string
}

// expectedClient lists the client scenarios that end other than with every
// check passed and the client succeeding. The test fails if one does better
// or worse, so the list cannot go stale.
var expectedClient = map[string]clientExpectation{
	"auth/scope-retry-limit": {passed, false, "the scenario's server answers 403 insufficient_scope to every " +
		"authorized request however many scopes are granted; the check is that the client gives up after at " +
		"most three authorizations (mcpvisor's login makes one and reports that the server refused its tokens), " +
		"so the client's failure is the expected end (the scenario sets allowClientError)"},
	"auth/resource-mismatch": {passed, false, "the scenario's protected resource metadata names another resource " +
		"(https://evil.example.com/mcp); the check is that the client makes no authorization request for it. The " +
		"go-sdk's discovery, which mcpvisor's login is built on, refuses that metadata and falls back to the " +
		"server's root as its authorization server, where registration fails, so the login fails before any " +
		"authorization request (the scenario sets allowClientError)"},
}

// notRunClient are client scenarios of clientSpecVersions that do not test
// mcpvisor, and why.
var notRunClient = map[string]string{
	"elicitation-sep1034-client-defaults": "checks that the client answering elicitation/create fills in the " +
		"schema's defaults; mcpvisor answers no elicitation itself, it forwards the request to the downstream " +
		"client that made the call, which is the one the check is about",
}

// TestClientConformance runs the conformance suite's client scenarios
// with mcpvisor as the client: internal/client writes a one-server config
// for the scenario's URL (with an oauth block for the auth scenarios), logs
// in with host.Login, an HTTP client acting as the browser, and calls every
// tool through a host.Host. Every scenario must pass, except those listed in
// expectedClient (which must end exactly as listed) and notRunClient.
func TestClientConformance(t *testing.T) {
	tl := requireTools(t)
	out := t.TempDir()
	for _, args := range clientRuns {
		cmd := append([]string{"client", "--command", tl.Client, "-o", out}, args...)
		runNode(t, tl, out, clientTimeout, cmd...)
	}
	results, err := readClientResults(out)
	if err != nil {
		t.Fatalf("reading the client scenarios' results: %v", err)
	}

	var want []string
	for _, v := range clientSpecVersions {
		for _, s := range listClientScenarios(t, tl, v) {
			if !slices.Contains(want, s) {
				want = append(want, s)
			}
		}
	}
	slices.Sort(want)

	var table strings.Builder
	fmt.Fprintf(&table, "\n  %-44s %-7s %-7s %s", "scenario", "checks", "client", "expected")
	for _, name := range want {
		if why, ok := notRunClient[name]; ok {
			fmt.Fprintf(&table, "\n  %-44s %-7s %-7s not run: %s", name, "-", "-", why)
			if _, ran := results[name]; ran {
				t.Errorf("scenario %s ran but is in notRunClient; remove it there", name)
			}
			continue
		}
		r, ok := results[name]
		if !ok {
			t.Errorf("scenario %s (spec versions %v) was not run; add it to clientRuns", name, clientSpecVersions)
			continue
		}
		exp, listed := expectedClient[name]
		if !listed {
			exp = clientExpectation{outcome: passed, clientOK: true}
		}
		client := map[bool]string{true: "ok", false: "error"}[r.clientOK]
		note := "pass, ok"
		if listed {
			note = fmt.Sprintf("%s, %s: %s", exp.outcome, map[bool]string{true: "ok", false: "error"}[exp.clientOK], exp.reason)
		}
		fmt.Fprintf(&table, "\n  %-44s %-7s %-7s %s", name, r.Outcome, client, note)
		if r.Outcome != exp.outcome || r.clientOK != exp.clientOK {
			t.Errorf("scenario %s: checks %s, client %s; want checks %s, client %s:\n%s    client stderr (tail):\n%s",
				name, r.Outcome, client, exp.outcome, map[bool]string{true: "ok", false: "error"}[exp.clientOK],
				r.problems(), indent(tail(r.stderr, 3000)))
		}
	}
	for name := range results {
		if !slices.Contains(want, name) {
			t.Logf("scenario %s ran but is not in spec versions %v", name, clientSpecVersions)
		}
	}
	for name := range expectedClient {
		if !slices.Contains(want, name) {
			t.Errorf("scenario %s is in expectedClient but the suite no longer lists it", name)
		}
	}
	t.Logf("client conformance scenarios, mcpvisor as the client:%s", table.String())
}

// clientResult is a client scenario's checks and how the client ended.
type clientResult struct {
	result
	clientOK bool
	stderr   string
}

// clientResultDir matches the directory, relative to the output
// directory, the suite writes a client scenario's results into:
// <scenario>-<ISO timestamp with - for : and .>, where the scenario may
// contain a slash ("auth/metadata-default").
var clientResultDir = regexp.MustCompile(`^(.+)-\d{4}-\d{2}-\d{2}T[0-9-]+Z$`)

// readClientResults reads every client scenario's checks.json and the
// client's stdout.txt and stderr.txt under dir.
func readClientResults(dir string) (map[string]clientResult, error) {
	results := make(map[string]clientResult)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "checks.json" {
			return err
		}
		rel, err := filepath.Rel(dir, filepath.Dir(path))
		if err != nil {
			return err
		}
		m := clientResultDir.FindStringSubmatch(filepath.ToSlash(rel))
		if m == nil {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var checks []check
		if err := json.Unmarshal(b, &checks); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if _, dup := results[m[1]]; dup {
			return fmt.Errorf("two result directories for scenario %s", m[1])
		}
		stdout, _ := os.ReadFile(filepath.Join(filepath.Dir(path), "stdout.txt"))
		stderr, _ := os.ReadFile(filepath.Join(filepath.Dir(path), "stderr.txt"))
		results[m[1]] = clientResult{
			result:   result{Outcome: summarize(checks), Checks: checks},
			clientOK: strings.TrimSpace(lastLine(string(stdout))) == clientOKLine,
			stderr:   string(stderr),
		}
		return nil
	})
	if err == nil && len(results) == 0 {
		err = fmt.Errorf("no scenario results under %s", dir)
	}
	return results, err
}

// listClientScenarios returns the names of the client scenarios of spec
// version v.
func listClientScenarios(t *testing.T, tl tools, v string) []string {
	t.Helper()
	out := runNode(t, tl, t.TempDir(), time.Minute, "list", "--client", "--spec-version", v)
	var names []string
	for _, line := range strings.Split(out, "\n") {
		if m := scenarioLine.FindStringSubmatch(line); m != nil {
			names = append(names, m[1])
		}
	}
	if len(names) == 0 {
		t.Fatalf("conformance list --client --spec-version %s named no scenarios:\n%s", v, out)
	}
	return names
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	return s[strings.LastIndex(s, "\n")+1:]
}

func indent(s string) string {
	return "      " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n      ")
}
