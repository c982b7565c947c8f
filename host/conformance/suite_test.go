//go:build unix

package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// suiteTimeout bounds one run of every server scenario. A run takes about two
// seconds; a scenario waiting on something that never comes times out inside
// the suite well before this.
const suiteTimeout = 2 * time.Minute

// outcome sums up one scenario's checks.
type outcome string

const (
	// passed: at least one SUCCESS check, no FAILURE and no WARNING.
	passed outcome = "pass"
	// warned: no FAILURE, but a WARNING or no SUCCESS at all. The suite's own
	// summary counts this as passed; its baseline mode does not.
	warned outcome = "warn"
	// failed: a FAILURE check, or no results for the scenario.
	failed outcome = "fail"
)

// rank orders outcomes from worst to best.
func (o outcome) rank() int { return map[outcome]int{failed: 0, warned: 1, passed: 2}[o] }

// check is one entry of a scenario's checks.json.
type check struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	Description  string `json:"description"`
	Status       string `json:"status"` // SUCCESS, FAILURE, WARNING, INFO, …
	ErrorMessage string `json:"errorMessage"`
}

// result is what the suite reported for one scenario.
type result struct {
	Outcome outcome
	Checks  []check
}

// problems describes the FAILURE and WARNING checks, one per line.
func (r result) problems() string {
	var b strings.Builder
	for _, c := range r.Checks {
		if c.Status == "FAILURE" || c.Status == "WARNING" {
			fmt.Fprintf(&b, "    %s %s (%s): %s\n", c.Status, c.ID, c.Description, c.ErrorMessage)
		}
	}
	if b.Len() == 0 && r.Outcome != passed {
		b.WriteString("    no SUCCESS check\n")
	}
	return b.String()
}

func summarize(checks []check) outcome {
	var success, warning bool
	for _, c := range checks {
		switch c.Status {
		case "FAILURE":
			return failed
		case "WARNING":
			warning = true
		case "SUCCESS":
			success = true
		}
	}
	if warning || !success {
		return warned
	}
	return passed
}

// runSuite runs every server scenario of the conformance suite (--suite all,
// pending ones included) against the MCP endpoint url and returns each
// scenario's result by name. A scenario the suite lists but wrote no result
// for is reported as failed. It skips or fails the test as requireTools does.
func runSuite(t *testing.T, url string) map[string]result {
	t.Helper()
	tl := requireTools(t)
	scenarios := listScenarios(t, tl)
	out := t.TempDir()
	stdout := runNode(t, tl, out, suiteTimeout, "server", "--url", url, "--suite", "all", "-o", out)
	results, err := readResults(out)
	if err != nil {
		t.Fatalf("conformance suite against %s: %v\n%s", url, err, tail(stdout, 8000))
	}
	for _, s := range scenarios {
		if _, ok := results[s]; !ok {
			results[s] = result{Outcome: failed, Checks: []check{{
				ID: s, Status: "FAILURE", ErrorMessage: "the suite wrote no checks.json for this scenario",
			}}}
		}
	}
	t.Logf("conformance suite against %s: %d scenarios", url, len(results))
	return results
}

// runScenario runs one server scenario against url and returns its result.
func runScenario(t *testing.T, url, scenario string) result {
	t.Helper()
	tl := requireTools(t)
	out := t.TempDir()
	stdout := runNode(t, tl, out, suiteTimeout, "server", "--url", url, "--scenario", scenario, "-o", out)
	results, err := readResults(out)
	if err != nil {
		t.Fatalf("conformance scenario %s against %s: %v\n%s", scenario, url, err, tail(stdout, 8000))
	}
	r, ok := results[scenario]
	if !ok {
		return result{Outcome: failed, Checks: []check{{ID: scenario, Status: "FAILURE", ErrorMessage: "the suite wrote no checks.json for this scenario"}}}
	}
	return r
}

// scenarioLine matches a line of `conformance list --server`:
// "  - tools-list [2025-06-18,2025-11-25]".
var scenarioLine = regexp.MustCompile(`^\s+- (\S+)`)

// listScenarios returns the names of the suite's server scenarios.
func listScenarios(t *testing.T, tl tools) []string {
	t.Helper()
	out := runNode(t, tl, t.TempDir(), time.Minute, "list", "--server")
	var names []string
	for _, line := range strings.Split(out, "\n") {
		if m := scenarioLine.FindStringSubmatch(line); m != nil {
			names = append(names, m[1])
		}
	}
	if len(names) == 0 {
		t.Fatalf("conformance list --server named no scenarios:\n%s", out)
	}
	return names
}

// runNode runs the suite with args in dir under Node 22 and returns its
// combined output. Exit status 1 means "a scenario failed" and is left to
// the caller to judge from the results; anything else fails the test.
func runNode(t *testing.T, tl tools, dir string, timeout time.Duration, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, tl.Node22, append([]string{tl.Suite}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "FORCE_COLOR=0")
	// The suite may start helpers of its own: kill the whole group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if ctx.Err() != nil {
		t.Fatalf("conformance %s: no result within %v\n%s", args[0], timeout, tail(out.String(), 8000))
	}
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) {
		t.Fatalf("conformance %s: %v\n%s", args[0], err, tail(out.String(), 8000))
	}
	return out.String()
}

// resultDir matches the directory the suite writes a server scenario's
// checks.json into: server-<scenario>-<ISO timestamp with - for : and .>.
var resultDir = regexp.MustCompile(`^server-(.+)-\d{4}-\d{2}-\d{2}T[0-9-]+Z$`)

// readResults reads every scenario's checks.json under dir.
func readResults(dir string) (map[string]result, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	results := make(map[string]result)
	for _, e := range ents {
		m := resultDir.FindStringSubmatch(e.Name())
		if !e.IsDir() || m == nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "checks.json"))
		if err != nil {
			return nil, err
		}
		var checks []check
		if err := json.Unmarshal(b, &checks); err != nil {
			return nil, fmt.Errorf("%s/checks.json: %w", e.Name(), err)
		}
		if _, dup := results[m[1]]; dup {
			return nil, fmt.Errorf("two result directories for scenario %s", m[1])
		}
		results[m[1]] = result{Outcome: summarize(checks), Checks: checks}
	}
	if len(results) == 0 {
		return nil, errors.New("no scenario results written")
	}
	return results, nil
}

func sortedNames(ms ...map[string]result) []string {
	var names []string
	for _, m := range ms {
		for k := range m {
			if !slices.Contains(names, k) {
				names = append(names, k)
			}
		}
	}
	slices.Sort(names)
	return names
}
