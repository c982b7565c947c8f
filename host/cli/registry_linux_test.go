//go:build linux

package cli_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// registryModule is the official MCP registry the test builds and runs
// (docs/registry.md, "Tested against"). v1.8.9 needs a huma release the
// module proxy does not serve; v1.8.8 has the same v0 API.
const registryModule = "github.com/modelcontextprotocol/registry"
const registryVersion = "v1.8.8"

// postgresBin is where Debian's postgresql package keeps initdb and postgres.
const postgresBin = "/usr/lib/postgresql/15/bin"

// nobody is the unprivileged user PostgreSQL runs as when the tests run as
// root (it refuses to run as root).
const nobody = 65534

// officialRegistry runs the official registry server, built from its Go
// module, against a PostgreSQL of its own, seeded with the module's
// data/seed.json (real published server.json entries: npm, oci, mcpb,
// nuget, pypi) and testdata/registry-seed.json (remotes, arguments,
// secrets). It returns the registry's base URL.
func officialRegistry(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(postgresBin, "initdb")); err != nil {
		msg := "PostgreSQL 15 is not installed (" + postgresBin + "): run `make system-tools` as root, or apt-get install postgresql"
		if os.Getenv("MCPVISOR_E2E") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	dir, err := os.MkdirTemp("", "mv-registry-") // short: the socket path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: nobody, Gid: nobody}
		if err := os.Chown(dir, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}

	// The registry binary: `go install module@version`, as a user would,
	// outside this module (the build cache makes it cheap after once).
	start := time.Now()
	goCmd := func(args ...string) []byte {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-buildvcs=false", "GOWORK=off")
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr)
		}
		return out
	}
	goCmd("install", registryModule+"/cmd/registry@"+registryVersion)
	var mod struct{ Dir string }
	if err := json.Unmarshal(goCmd("mod", "download", "-json", registryModule+"@"+registryVersion), &mod); err != nil {
		t.Fatal(err)
	}
	t.Logf("built the registry %s in %s", registryVersion, time.Since(start).Round(time.Millisecond))

	var seed []json.RawMessage
	for _, f := range []string{filepath.Join(mod.Dir, "data", "seed.json"), filepath.Join("testdata", "registry-seed.json")} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var entries []json.RawMessage
		if err := json.Unmarshal(b, &entries); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		seed = append(seed, entries...)
	}
	seedFile := filepath.Join(dir, "seed.json")
	b, _ := json.Marshal(seed)
	if err := os.WriteFile(seedFile, b, 0o644); err != nil {
		t.Fatal(err)
	}

	// PostgreSQL on a unix socket in dir only (no TCP listener).
	pgLog := &testutil.Buffer{}
	initdb := exec.Command(filepath.Join(postgresBin, "initdb"), "-D", filepath.Join(dir, "data"), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8", "--locale=C")
	initdb.Dir, initdb.Stdout, initdb.Stderr = dir, pgLog, pgLog
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if err := initdb.Run(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, pgLog)
	}
	_, port, _ := strings.Cut(freePort(t), ":")
	pg := exec.Command(filepath.Join(postgresBin, "postgres"), "-D", filepath.Join(dir, "data"), "-k", dir, "-p", port,
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "max_connections=20")
	pg.Dir, pg.Stdout, pg.Stderr = dir, pgLog, pgLog
	pg.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopProcess(t, pg, syscall.SIGINT) }) // fast shutdown

	// The registry, seeded at start. The JWT key only signs publish
	// tokens, which the test never asks for.
	key := make([]byte, 32)
	rand.Read(key)
	addr := freePort(t)
	regLog := &testutil.Buffer{}
	reg := exec.Command(filepath.Join(dir, "registry"))
	reg.Dir, reg.Stdout, reg.Stderr = dir, regLog, regLog
	reg.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	reg.Env = append(os.Environ(),
		"MCP_REGISTRY_DATABASE_URL=postgres:///postgres?host="+dir+"&port="+port+"&user=postgres&sslmode=disable",
		"MCP_REGISTRY_SERVER_ADDRESS="+addr,
		"MCP_REGISTRY_SEED_FROM="+seedFile,
		"MCP_REGISTRY_ENABLE_REGISTRY_VALIDATION=false", // no asking npm, PyPI or Docker Hub
		"MCP_REGISTRY_DATABASE_MIN_CONNECTIONS=1",
		"MCP_REGISTRY_DATABASE_MAX_CONNECTIONS=4",
		"MCP_REGISTRY_JWT_PRIVATE_KEY="+hex.EncodeToString(key),
	)
	if err := reg.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopProcess(t, reg, syscall.SIGTERM) })
	base := "http://" + addr
	testutil.Eventually(t, 60*time.Second, "the registry answering /v0/health", func() bool {
		if reg.ProcessState != nil {
			return false
		}
		resp, err := http.Get(base + "/v0/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if !strings.Contains(regLog.String(), fmt.Sprintf("all %d servers created", len(seed))) {
		t.Fatalf("the registry did not import every seed entry:\n%s\npostgres:\n%s", regLog, pgLog)
	}
	return base
}

// stopProcess signals cmd's process group and waits for it, killing it
// when it does not stop.
func stopProcess(t *testing.T, cmd *exec.Cmd, sig syscall.Signal) {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		t.Errorf("%s did not stop on %s", cmd.Path, sig)
	}
}

// TestRegistrySearchAndAdd drives the real binary against the official
// registry server (docs/registry.md): search, versions, a server block for
// every package type and both remote transports, secrets written as env()
// and asked for at a terminal, and the error paths, each leaving
// config.hcl byte for byte as it was.
func TestRegistrySearchAndAdd(t *testing.T) {
	base := officialRegistry(t)
	env := addEnv(t)
	path := filepath.Join(t.TempDir(), "config.hcl")
	head := fmt.Sprintf("# mine\nhost {\n  registry { url = %q }\n}\n", base)
	if err := os.WriteFile(path, []byte(head), 0o600); err != nil {
		t.Fatal(err)
	}

	// Search: the latest version of each match, with what it offers.
	code, out, errb := mv(t, env, "search", "-config", path, "mcpvisor-test")
	for _, want := range []string{"io.github.mcpvisor-test/files", "npm oci", "io.github.mcpvisor-test/remote-weather", "2.1.0", "remote(streamable-http)", "io.github.mcpvisor-test/search-pypi", "pypi"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("search mcpvisor-test: exit %d, want %q in\n%s%s", code, want, out, errb)
		}
	}
	if strings.Contains(out, "1.0.0") || strings.Contains(out, "airtable") {
		t.Errorf("search listed an older version or a server not matching:\n%s", out)
	}
	code, out, errb = mv(t, env, "search", "-config", path, "airtable")
	if code != 0 || !strings.Contains(out, "1.7.3") || strings.Contains(out, "1.7.2") || !strings.Contains(out, "npm oci mcpb") {
		t.Errorf("search airtable: exit %d\n%s%s", code, out, errb)
	}
	code, out, errb = mv(t, env, "search", "-config", path, "-versions", "io.github.domdomegg/airtable-mcp-server")
	if code != 0 || !strings.Contains(out, "1.7.2") || !strings.Contains(out, "1.7.3") {
		t.Errorf("search -versions: exit %d\n%s%s", code, out, errb)
	}
	code, out, errb = mv(t, env, "search", "-config", path, "nothing-like-this")
	if code != 0 || !strings.Contains(errb, "no server in the MCP registry at "+base) {
		t.Errorf("search without a match: exit %d\n%s%s", code, out, errb)
	}
	code, out, errb = mv(t, env, "search", "-config", path, "we")
	if code != 1 || !strings.Contains(errb, "the MCP registry at "+base+" refused") || !strings.Contains(errb, "at least 3 characters") {
		t.Errorf("search with a 2-letter query: exit %d, want 1 and the registry's reason\n%s%s", code, out, errb)
	}

	// Every package type and both remotes, through add's one path.
	adds := []struct {
		args   []string
		block  string
		stdout string // what it says about the variable it reads
	}{
		{[]string{"airtable", "-registry", "io.github.domdomegg/airtable-mcp-server"},
			"server \"airtable\" {\n  command = \"npx\"\n  args    = [\"-y\", \"airtable-mcp-server@1.7.3\"]\n  env = {\n    AIRTABLE_API_KEY = env(\"AIRTABLE_API_KEY\")\n  }\n}\n",
			"run `mcpvisor secret set AIRTABLE_API_KEY`"},
		{[]string{"airtable-docker", "-registry", "io.github.domdomegg/airtable-mcp-server@1.7.2", "-use", "oci"},
			"server \"airtable-docker\" {\n  command = \"docker\"\n  args    = [\"run\", \"-i\", \"--rm\", \"-e\", \"AIRTABLE_API_KEY\", \"docker.io/domdomegg/airtable-mcp-server:1.7.2\"]\n  env = {\n    AIRTABLE_API_KEY = env(\"AIRTABLE_API_KEY\")\n  }\n}\n",
			"run `mcpvisor secret set AIRTABLE_API_KEY`"},
		{[]string{"time", "-registry", "io.github.domdomegg/time-mcp-pypi"},
			"server \"time\" {\n  command = \"uvx\"\n  args    = [\"time-mcp-pypi==1.0.6\"]\n}\n", ""},
		{[]string{"files", "-registry", "io.github.mcpvisor-test/files@0.6.2"},
			"server \"files\" {\n  command = \"npx\"\n  args    = [\"-y\", \"@modelcontextprotocol/server-filesystem@2025.8.21\", env(\"ALLOWED_DIR\")]\n  env = {\n    LOG_LEVEL = \"info\"\n  }\n}\n",
			"run `mcpvisor secret set ALLOWED_DIR`"},
		{[]string{"files-docker", "-registry", "io.github.mcpvisor-test/files", "-use", "oci"},
			"server \"files-docker\" {\n  command = \"docker\"\n  args    = [\"run\", \"-i\", \"--rm\", \"--mount\", \"type=bind,src=${env(\"SOURCE_PATH\")},dst=/project\", \"-e\", \"LOG_LEVEL\", \"docker.io/mcp/filesystem:1.0.2\", \"/project\"]\n  env = {\n    LOG_LEVEL = \"info\"\n  }\n}\n",
			"run `mcpvisor secret set SOURCE_PATH`"},
		{[]string{"search", "-registry", "io.github.mcpvisor-test/search-pypi"},
			"server \"search\" {\n  command = \"uvx\"\n  args    = [\"mcp-search-example==3.0.1\", \"--api-key\", env(\"API_KEY\"), \"--region\", \"us\"]\n}\n",
			"run `mcpvisor secret set API_KEY`"},
		{[]string{"weather", "-registry", "io.github.mcpvisor-test/remote-weather"},
			"server \"weather\" {\n  url = \"https://weather.example.com/mcp/eu\"\n  headers = {\n    \"Authorization\" = \"Bearer ${env(\"API_TOKEN\")}\"\n    \"X-Client\"      = \"mcpvisor-test\"\n  }\n}\n",
			"run `mcpvisor secret set API_TOKEN`"},
		{[]string{"weather-sse", "-registry", "io.github.mcpvisor-test/remote-weather@1.0.0", "-use", "remote"},
			"server \"weather-sse\" {\n  url       = \"https://weather.example.com/sse\"\n  transport = \"sse\"\n  headers = {\n    \"X-Api-Key\" = env(\"X_API_KEY\")\n  }\n}\n",
			"run `mcpvisor secret set X_API_KEY`"},
	}
	for _, a := range adds {
		before, _ := os.ReadFile(path)
		code, out, errb := mv(t, env, append([]string{"add", "-config", path}, a.args...)...)
		after, _ := os.ReadFile(path)
		if code != 0 || string(after) != string(before)+"\n"+a.block || !strings.Contains(out, a.stdout) {
			t.Errorf("add %s: exit %d\nstdout: %s\nstderr: %s\nappended:\n%s\nwant:\n%s", strings.Join(a.args, " "), code, out, errb, strings.TrimPrefix(string(after), string(before)), a.block)
		}
	}
	if code, out, errb := mv(t, env, "validate", "-config", path); code != 0 {
		t.Errorf("validate after the adds: exit %d\n%s%s", code, out, errb)
	}

	// A secret asked for at a terminal goes to the secret store, not the file.
	const secret = "sk-typed-at-the-prompt-1234"
	out, errb = addAtTerminal(t, env, secret, "add", "-config", path, "search-tty", "-registry", "io.github.mcpvisor-test/search-pypi")
	cfg, _ := os.ReadFile(path)
	if !strings.Contains(errb, "value of API_KEY (not shown)") || !strings.Contains(errb, "stored the value of API_KEY") ||
		strings.Contains(out+errb+string(cfg), secret) || !strings.Contains(string(cfg), "server \"search-tty\"") {
		t.Errorf("add at a terminal:\nstdout: %s\nstderr: %s\nconfig:\n%s", out, errb, cfg)
	}
	if code, out, _ := mv(t, env, "secret", "list"); code != 0 || !strings.Contains(out, "API_KEY") || strings.Contains(out, secret) {
		t.Errorf("secret list after the prompt: exit %d\n%s", code, out)
	}

	// Refusals: nothing is written.
	badJSON := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"server": {"name": "io.github.x/y", "packages": [`)
	}))
	defer badJSON.Close()
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "<html><body>not a registry</body></html>")
	}))
	defer html.Close()
	newer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A registry holding what mcpvisor cannot run yet.
		fmt.Fprint(w, `{"server": {"name": "io.github.x/y", "version": "1.0.0", "packages": [{"registryType": "cargo", "identifier": "y", "version": "1.0.0", "transport": {"type": "stdio"}}], "remotes": [{"type": "websocket", "url": "wss://y.example/mcp"}]}}`)
	}))
	defer newer.Close()
	closed := "http://" + freePort(t)
	refusals := []struct {
		registry string // "" = the official registry server
		args     []string
		code     int
		want     []string
	}{
		{"", []string{"x", "-registry", "io.github.nope/nope"}, 1, []string{"the MCP registry at " + base + " has no server io.github.nope/nope", "mcpvisor search"}},
		{"", []string{"x", "-registry", "io.github.domdomegg/time-mcp-pypi@9.9.9"}, 1, []string{"has no version 9.9.9 of io.github.domdomegg/time-mcp-pypi", "mcpvisor search -versions io.github.domdomegg/time-mcp-pypi"}},
		{"", []string{"x", "-registry", "io.github.domdomegg/time-mcp-nuget"}, 1, []string{"it offers nuget", "runs npm, pypi and oci packages", "mcpvisor add x -- COMMAND"}},
		{"", []string{"x", "-registry", "io.github.domdomegg/airtable-mcp-server", "-use", "pypi"}, 1, []string{"it offers no pypi (it offers npm, oci, mcpb)"}},
		{"", []string{"x", "-registry", "io.github.domdomegg/airtable-mcp-server", "-use", "cargo"}, 2, []string{`-use "cargo": it is one of npm, pypi, oci, remote`}},
		{"", []string{"x", "-registry", "airtable"}, 2, []string{"a registry server name has a namespace and a name"}},
		{"", []string{"x", "-registry", "io.github.domdomegg/airtable-mcp-server", "-env", "K"}, 2, []string{"-registry takes the command"}},
		{"", []string{"airtable", "-registry", "io.github.domdomegg/airtable-mcp-server"}, 2, []string{`a server "airtable" is already in`}},
		{closed, []string{"x", "-registry", "io.github.x/y"}, 1, []string{"cannot reach the MCP registry at " + closed, "connection refused", "registry { url } in the host block of"}},
		{badJSON.URL, []string{"x", "-registry", "io.github.x/y"}, 1, []string{"the MCP registry at " + badJSON.URL + " did not answer as an MCP registry", "not the registry's JSON"}},
		{html.URL, []string{"x", "-registry", "io.github.x/y"}, 1, []string{"did not answer as an MCP registry", "without /v0"}},
		{newer.URL, []string{"x", "-registry", "io.github.x/y"}, 1, []string{"its remote wss://y.example/mcp", `transport "websocket"`}},
		{newer.URL, []string{"x", "-registry", "io.github.x/y", "-use", "npm"}, 1, []string{"it offers no npm (it offers cargo, remote(websocket))"}},
	}
	for _, r := range refusals {
		p := path
		if r.registry != "" {
			p = filepath.Join(t.TempDir(), "config.hcl")
			if err := os.WriteFile(p, []byte(fmt.Sprintf("host {\n  registry { url = %q }\n}\n", r.registry)), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		before, _ := os.ReadFile(p)
		code, out, errb := mv(t, env, append([]string{"add", "-config", p}, r.args...)...)
		after, _ := os.ReadFile(p)
		if code != r.code || !bytes.Equal(before, after) {
			t.Errorf("add %s: exit %d (want %d), file changed: %v\nstdout: %s\nstderr: %s", strings.Join(r.args, " "), code, r.code, !bytes.Equal(before, after), out, errb)
		}
		for _, w := range r.want {
			if !strings.Contains(errb, w) {
				t.Errorf("add %s: want %q in stderr:\n%s", strings.Join(r.args, " "), w, errb)
			}
		}
	}
	code, out, errb = mv(t, env, "search", "-config", filepath.Join(t.TempDir(), "none.hcl"), "-versions", "io.github.x/y")
	if code != 1 || !strings.Contains(errb, "the MCP registry at https://registry.modelcontextprotocol.io") {
		t.Errorf("search without a config file asks the official registry: exit %d\n%s%s", code, out, errb)
	}
}

// addAtTerminal runs the real binary with a pseudo-terminal as its
// standard input, types typed at the secret prompt, and returns what it
// wrote to stdout and stderr.
func addAtTerminal(t *testing.T, env []string, typed string, args ...string) (stdout, stderr string) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	defer ptmx.Close()
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	go func() { // drain what the terminal shows, so that it never blocks
		buf := make([]byte, 4096)
		for {
			if _, err := ptmx.Read(buf); err != nil {
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), addHangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, mcpvisorBin, args...)
	var out, errb testutil.Buffer
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, tty, &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the secret prompt", func() bool { return strings.Contains(errb.String(), "(not shown): ") })
	if _, err := ptmx.WriteString(typed + "\r"); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("mcpvisor %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), errb.String()
}
