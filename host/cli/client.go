package cli

/*
Design note: writing other clients' configurations.

`client install` edits a file another program owns (Claude Desktop's,
Cursor's, VS Code's …), often one holding the user's other servers and,
for Claude Code, much more. The rules:

  - Nothing but mcpvisor's own entry changes. The file is edited in
    place: the offsets of the top-level members and of the servers are
    found with encoding/json's decoder, and only the bytes of mcpvisor's
    entry (with its separator) are inserted, replaced or cut; every other
    byte stays as it was. The entry is indented as its neighbours are.
  - A file that is not a JSON object (a syntax error, comments, a
    half-written file) is refused and left untouched, as is one whose
    servers key holds no object.
  - An entry of that name that does not run mcpvisor is someone else's:
    install refuses to replace it, uninstall to remove it.
  - The previous file is copied to FILE.bak (same mode) before the new one
    replaces it; the new one is written to a temporary file in the same
    directory, synced and renamed over the old, so a crash leaves the old
    file or the new one, never half of one. The mode is kept, a symlink is
    followed (the link stays a link).

See docs/clients.md and docs/security.md, "Writing other clients' configs".
*/

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// maxClientConfigBytes bounds the client file read into memory. Claude
// Code's ~/.claude.json keeps project history and grows to megabytes; 64
// MiB is far beyond any real one.
const maxClientConfigBytes = 64 << 20

// mcpClient is a client `client install` knows.
type mcpClient struct {
	// title is the client's name as its users know it.
	title string
	// key is the top-level key holding the servers: "mcpServers", or
	// "servers" for VS Code.
	key string
	// typed clients get "type": "stdio" in the entry.
	typed bool
	// urlKey is the member an HTTP entry (-http) names the endpoint in:
	// "url", or "serverUrl" for Windsurf; "" for a client whose file
	// holds stdio servers only.
	urlKey string
	// userFile is the user-level file; projectFile the file in a project
	// directory ("" when the client has none).
	userFile    func() (string, error)
	projectFile string
}

// clientNames is the order help and errors list the clients in.
var clientNames = []string{"claude-desktop", "claude-code", "cursor", "vscode", "windsurf"}

var mcpClients = map[string]mcpClient{
	// Claude Desktop's file starts stdio servers only: remote servers are
	// added in its Connectors settings, not in the file.
	"claude-desktop": {title: "Claude Desktop", key: "mcpServers", userFile: inConfigDir("Claude", "claude_desktop_config.json")},
	"claude-code":    {title: "Claude Code", key: "mcpServers", typed: true, urlKey: "url", userFile: inHome(".claude.json"), projectFile: ".mcp.json"},
	"cursor":         {title: "Cursor", key: "mcpServers", urlKey: "url", userFile: inHome(".cursor", "mcp.json"), projectFile: filepath.Join(".cursor", "mcp.json")},
	"vscode":         {title: "VS Code", key: "servers", typed: true, urlKey: "url", userFile: inConfigDir("Code", "User", "mcp.json"), projectFile: filepath.Join(".vscode", "mcp.json")},
	"windsurf":       {title: "Windsurf", key: "mcpServers", urlKey: "serverUrl", userFile: inHome(".codeium", "windsurf", "mcp_config.json")},
}

// inConfigDir is a file under the OS's per-user configuration directory:
// ~/Library/Application Support (macOS), %APPDATA% (Windows),
// $XDG_CONFIG_HOME or ~/.config (Linux).
func inConfigDir(elem ...string) func() (string, error) {
	return func() (string, error) {
		dir, err := os.UserConfigDir()
		if err != nil {
			return "", err
		}
		return filepath.Join(append([]string{dir}, elem...)...), nil
	}
}

// inHome is a file under the user's home directory.
func inHome(elem ...string) func() (string, error) {
	return func() (string, error) {
		dir, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		return filepath.Join(append([]string{dir}, elem...)...), nil
	}
}

const clientUsage = `Usage: mcpvisor client install|uninstall [options] CLIENT

CLIENT is one of claude-desktop, claude-code, cursor, vscode, windsurf.
Run "mcpvisor help client" for the options and examples.
`

// clientCmd is `mcpvisor client install|uninstall`.
func clientCmd(args []string, stdio IO) int {
	if len(args) == 0 {
		fmt.Fprint(stdio.Stderr, clientUsage)
		return ExitUsage
	}
	sub, args := args[0], args[1:]
	if sub != "install" && sub != "uninstall" {
		if isHelpFlag(sub) {
			writeHelp(stdio.Stdout, "client", nil)
			return ExitOK
		}
		hint := ""
		if s := suggest(sub, []string{"install", "uninstall"}); s != "" {
			hint = fmt.Sprintf("; did you mean %q?", s)
		}
		fmt.Fprintf(stdio.Stderr, "mcpvisor client: unknown subcommand %q%s (it is install or uninstall)\n\n%s", termSafe(sub), hint, clientUsage)
		return ExitUsage
	}
	fs := newBareFlags("client "+sub, stdio)
	cfgPath := fs.String("config", defaultConfigPath(), "mcpvisor's configuration `file` the client runs (install; default ./config.hcl, else your user config)")
	name := fs.String("name", "mcpvisor", "the entry's `name` in the client's config")
	project := fs.String("project", "", "write the project `dir`'s file (claude-code: .mcp.json, cursor: .cursor/mcp.json, vscode: .vscode/mcp.json) instead of the user's")
	file := fs.String("file", "", "write this `file` instead of the client's usual one")
	printOnly := fs.Bool("print", false, "print the resulting file on stdout and write nothing (with -http, the token shown as "+tokenShown+")")
	overHTTP := fs.Bool("http", false, "write an HTTP entry pointing at the running host of -config (claude-code, cursor, vscode, windsurf), so every client shares one host")
	clientName, ok := parseOneArg(fs, args, stdio, "mcpvisor client "+sub+" CLIENT")
	if !ok {
		return ExitUsage
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stdio.Stderr, "mcpvisor client %s: "+format+"\n", append([]any{sub}, a...)...)
		return code
	}
	c, ok := mcpClients[clientName]
	if !ok {
		hint := ""
		if s := suggest(clientName, clientNames); s != "" {
			hint = fmt.Sprintf("; did you mean %q?", s)
		}
		return fail(ExitUsage, "unknown client %q%s (one of %s)", termSafe(clientName), hint, strings.Join(clientNames, ", "))
	}
	if *name == "" || strings.ContainsFunc(*name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fail(ExitUsage, "-name must be a non-empty name without control characters")
	}
	path, err := clientFile(c, clientName, *project, *file)
	if err != nil {
		return fail(ExitUsage, "%s", err)
	}

	data, existed, err := readClientFile(path)
	if err != nil {
		return fail(ExitRuntime, "%s", err)
	}
	doc, err := parseOrdered(data)
	if err != nil {
		return fail(ExitRuntime, "%s is not a JSON object (%s); it is left untouched: fix it, or add the entry by hand (\"mcpvisor client %s -print -file new.json %s\" prints it)", termSafe(path), err, sub, clientName)
	}

	var note, token string
	if *overHTTP && sub != "install" {
		return fail(ExitUsage, "-http is for install; uninstall removes the entry whatever it is")
	}
	if sub == "install" {
		var entry json.RawMessage
		if *overHTTP {
			if c.urlKey == "" {
				return fail(ExitUsage, "%s's config file starts stdio servers only (it adds remote servers in its own settings); drop -http to write a stdio entry", c.title)
			}
			entry, token, err = httpEntry(c, *cfgPath)
		} else {
			entry, err = mcpvisorEntry(c, *cfgPath)
		}
		if err != nil {
			return fail(ExitRuntime, "%s", err)
		}
		replaced, err := doc.setServer(c.key, *name, entry)
		if err != nil {
			return fail(ExitRuntime, "%s: %s", termSafe(path), err)
		}
		note = fmt.Sprintf("added %q to %s", *name, path)
		if replaced {
			note = fmt.Sprintf("replaced %q in %s", *name, path)
		}
	} else {
		removed, err := doc.removeServer(c.key, *name)
		if err != nil {
			return fail(ExitRuntime, "%s: %s", termSafe(path), err)
		}
		if !removed {
			fmt.Fprintf(stdio.Stderr, "mcpvisor client uninstall: %s has no entry %q; nothing to do\n", termSafe(path), termSafe(*name))
			if *printOnly {
				stdio.Stdout.Write(data)
			}
			return ExitOK
		}
		note = fmt.Sprintf("removed %q from %s", *name, path)
	}
	out := doc.encode()
	if !existed && !bytes.HasSuffix(out, []byte("\n")) {
		out = append(out, '\n')
	}
	if *printOnly {
		if token != "" {
			// Never print the token: the terminal's scrollback and a pasted
			// snippet outlive the client's file.
			out = bytes.ReplaceAll(out, []byte(token), []byte(tokenShown))
		}
		stdio.Stdout.Write(out)
		return ExitOK
	}
	backup, err := writeClientFile(path, out, data, existed)
	if err != nil {
		return fail(ExitRuntime, "%s", err)
	}
	fmt.Fprintf(stdio.Stderr, "mcpvisor client %s: %s", sub, termSafe(note))
	if backup != "" {
		fmt.Fprintf(stdio.Stderr, " (the previous file is in %s)", termSafe(backup))
	}
	fmt.Fprintf(stdio.Stderr, "\nRestart %s (or reload its MCP servers) to apply it.\n", c.title)
	if token != "" {
		fmt.Fprintf(stdio.Stderr, "The entry carries the host's bearer token in its Authorization header; keep %s private.\n", termSafe(path))
		if st, err := os.Stat(path); err == nil && permBitsArePrivate && st.Mode().Perm()&0o077 != 0 {
			fmt.Fprintf(stdio.Stderr, "warning: %s is readable by group or others (mode %04o): run chmod go-rwx %s\n", termSafe(path), st.Mode().Perm(), termSafe(path))
		}
	}
	return ExitOK
}

// tokenShown stands for the bearer token where install prints an entry.
const tokenShown = "<the host's bearer token, not shown>"

// httpEntry is the server entry that points c at the streamable HTTP
// endpoint of the running host of the config at cfgPath (docs/clients.md,
// "One host for every client"), with the host's bearer token as an
// Authorization header when its host block sets one. It returns the token
// too, so that it is never printed. It fails when no host runs the config
// or the host serves no HTTP: an entry pointing nowhere would fail in the
// client, far from the reason.
func httpEntry(c mcpClient, cfgPath string) (json.RawMessage, string, error) {
	cfg, err := filepath.Abs(cfgPath)
	if err != nil {
		return nil, "", err
	}
	if _, err := os.Stat(cfg); err != nil {
		return nil, "", fmt.Errorf("the configuration %s: %v; pass -config FILE, the file of the running host the client should use", termSafe(cfg), errors.Unwrap(err))
	}
	hb, err := config.LoadHost(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("invalid configuration:\n%s", strings.TrimRight(err.Error(), "\n"))
	}
	ts, err := runningHosts(cfg, "")
	if err != nil {
		return nil, "", err
	}
	if len(ts) == 0 {
		return nil, "", fmt.Errorf("no running host serves %s, so there is no HTTP endpoint to point the client at: start one (mcpvisor run -config %s) and run this again, or drop -http for an entry that starts its own host over stdio", termSafe(cfg), termSafe(cfg))
	}
	var endpoint, served string
	for _, t := range ts {
		doc, err := fetchStatus(t)
		if err != nil {
			return nil, "", err
		}
		served = t.name
		if doc.HTTP != "" {
			endpoint = doc.HTTP
			break
		}
	}
	if endpoint == "" {
		return nil, "", fmt.Errorf("the running host of %s (%s) serves no HTTP: it runs with --stdio, which serves its own client only; run it as `mcpvisor run -config %s` (HTTP at host.listen, default %s), or drop -http", termSafe(cfg), served, termSafe(cfg), config.DefaultListen)
	}
	e := struct {
		Type      string            `json:"type,omitempty"`
		URL       string            `json:"url,omitempty"`
		ServerURL string            `json:"serverUrl,omitempty"`
		Headers   map[string]string `json:"headers,omitempty"`
	}{}
	if c.typed {
		e.Type = "http"
	}
	if c.urlKey == "serverUrl" {
		e.ServerURL = endpoint
	} else {
		e.URL = endpoint
	}
	if hb.BearerToken != "" {
		e.Headers = map[string]string{"Authorization": "Bearer " + hb.BearerToken}
	}
	b, err := json.Marshal(e)
	return b, hb.BearerToken, err
}

// clientFile is the file to edit: -file, the project's or the user's.
func clientFile(c mcpClient, name, project, file string) (string, error) {
	switch {
	case file != "" && project != "":
		return "", errors.New("-file and -project exclude each other")
	case file != "":
		return filepath.Abs(file)
	case project != "":
		if c.projectFile == "" {
			return "", fmt.Errorf("%s has no project-level file; drop -project (or use -file)", name)
		}
		dir, err := filepath.Abs(project)
		if err != nil {
			return "", err
		}
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return "", fmt.Errorf("-project %s is not a directory", termSafe(project))
		}
		return filepath.Join(dir, c.projectFile), nil
	}
	p, err := c.userFile()
	if err != nil {
		return "", fmt.Errorf("cannot find %s's config file on %s (%v); pass -file", name, runtime.GOOS, err)
	}
	return p, nil
}

// mcpvisorEntry is the server entry that runs this executable on the
// configuration at cfgPath, both as absolute paths: a client starts its
// servers from a directory of its choosing, with a PATH of its own.
func mcpvisorEntry(c mcpClient, cfgPath string) (json.RawMessage, error) {
	cfg, err := filepath.Abs(cfgPath)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(cfg); err != nil {
		return nil, fmt.Errorf("the configuration %s: %v; pass -config FILE (write one with `mcpvisor import`, or start from config.hcl)", termSafe(cfg), errors.Unwrap(err))
	}
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot find mcpvisor's own executable: %v", err)
	}
	var e struct {
		Type    string   `json:"type,omitempty"`
		Command string   `json:"command"`
		Args    []string `json:"args"`
	}
	if c.typed {
		e.Type = "stdio"
	}
	e.Command = exe
	e.Args = []string{"run", "--stdio", "-config", cfg}
	return json.Marshal(e)
}

// readClientFile reads path; a missing file reads as an empty object.
func readClientFile(path string) ([]byte, bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return []byte("{}"), false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxClientConfigBytes+1))
	if err != nil {
		return nil, false, err
	}
	if len(data) > maxClientConfigBytes {
		return nil, false, fmt.Errorf("%s is larger than %d MiB; it is left untouched: add the entry by hand (-print -file new.json prints it)", termSafe(path), maxClientConfigBytes>>20)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		// An empty file (a client creates one) holds no entries yet.
		return []byte("{}"), true, nil
	}
	return data, true, nil
}

// writeClientFile replaces path with data atomically, first copying the
// old content to path.bak. It returns the backup's path ("" for a new
// file).
func writeClientFile(path string, data, old []byte, existed bool) (string, error) {
	mode := fs.FileMode(0o600)
	if existed {
		// Write where a symlink points, so the link survives.
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return "", err
		}
		path = real
		st, err := os.Stat(path)
		if err != nil {
			return "", err
		}
		mode = st.Mode().Perm()
	} else if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	backup := ""
	if existed {
		backup = path + ".bak"
		if err := writeAtomic(backup, old, mode); err != nil {
			return "", fmt.Errorf("cannot write the backup %s, so %s is left untouched: %v", termSafe(backup), termSafe(path), err)
		}
	}
	if err := writeAtomic(path, data, mode); err != nil {
		return "", err
	}
	return backup, nil
}

// writeAtomic writes data to a temporary file beside path and renames it
// over path.
func writeAtomic(path string, data []byte, mode fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(mode); err != nil && runtime.GOOS != "windows" {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	done = true
	return nil
}

// clientDoc is a client's file, edited in place: an edit replaces the
// bytes of one member of one object and leaves every other byte as it
// was.
type clientDoc struct {
	data []byte
	top  *jsonObject
}

// jsonObject is a JSON object's members with their offsets in the file.
type jsonObject struct {
	open, close int // offsets of '{' and '}'
	members     []jsonMember
}

type jsonMember struct {
	key                        string
	keyStart, valStart, valEnd int
}

func (o *jsonObject) find(key string) int {
	for i, m := range o.members {
		if m.key == key {
			return i
		}
	}
	return -1
}

// parseOrdered reads the file's top-level object.
func parseOrdered(data []byte) (*clientDoc, error) {
	if !json.Valid(data) {
		var v any
		return nil, errors.New(jsonErrorAt(data, json.Unmarshal(data, &v)))
	}
	top, err := parseObject(data, 0, len(data))
	if err != nil {
		return nil, err
	}
	return &clientDoc{data: data, top: top}, nil
}

// parseObject reads the object in data[from:to] (valid JSON), recording
// where each member's key and value are.
func parseObject(data []byte, from, to int) (*jsonObject, error) {
	dec := json.NewDecoder(bytes.NewReader(data[from:to]))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("the top level is not an object")
	}
	o := &jsonObject{open: from + int(dec.InputOffset()) - 1}
	pos := from + int(dec.InputOffset())
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		key := t.(string)
		if o.find(key) >= 0 {
			// Which duplicate a client honours is its own affair; an edit
			// would silently pick one.
			return nil, fmt.Errorf("the key %q appears twice", termSafe(key))
		}
		keyStart := pos
		for keyStart < to && data[keyStart] != '"' {
			keyStart++ // whitespace and the comma
		}
		end := from + int(dec.InputOffset())
		o.members = append(o.members, jsonMember{key: key, keyStart: keyStart, valStart: end - len(v), valEnd: end})
		pos = end
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	o.close = from + int(dec.InputOffset()) - 1
	return o, nil
}

// splice replaces data[start:end] with b.
func (d *clientDoc) splice(start, end int, b []byte) {
	d.data = append(append(append([]byte{}, d.data[:start]...), b...), d.data[end:]...)
}

// indentOf is the indentation of the line holding offset i.
func (d *clientDoc) indentOf(i int) string {
	line := bytes.LastIndexByte(d.data[:i], '\n') + 1
	j := line
	for j < i && (d.data[j] == ' ' || d.data[j] == '\t') {
		j++
	}
	return string(d.data[line:j])
}

// unit is the file's indentation step: its first member's indentation,
// or two spaces.
func (d *clientDoc) unit() string {
	if len(d.top.members) > 0 {
		if u := d.indentOf(d.top.members[0].keyStart); u != "" && bytes.ContainsRune(d.data[d.top.open:d.top.members[0].keyStart], '\n') {
			return u
		}
	}
	return "  "
}

// format is v as JSON, its lines after the first indented by prefix; on
// one line when the file is written on one line.
func (d *clientDoc) format(v any, prefix string) []byte {
	var b []byte
	var err error
	if d.compact() {
		b, err = json.Marshal(v)
	} else {
		b, err = json.MarshalIndent(v, prefix, d.unit())
	}
	if err != nil {
		// v is a map of raw JSON this file produced; this cannot happen.
		panic(err)
	}
	return b
}

// addMember appends "key": value to the object o, after its last member
// and separated as its members are.
func (d *clientDoc) addMember(o *jsonObject, key string, value func(prefix string) []byte) {
	k, _ := json.Marshal(key)
	if n := len(o.members); n > 0 {
		last := o.members[n-1]
		// The whitespace before the last key, without its comma.
		gap := bytes.ReplaceAll(d.data[o.members[n-1].keyStart-countSpace(d.data, last.keyStart):last.keyStart], []byte(","), nil)
		indent := d.indentOf(last.keyStart)
		var b bytes.Buffer
		b.WriteByte(',')
		b.Write(gap)
		b.Write(k)
		b.WriteString(d.colon())
		b.Write(value(indent))
		d.splice(last.valEnd, last.valEnd, b.Bytes())
		return
	}
	outer := d.indentOf(o.open)
	inner := outer + d.unit()
	open, close := "{\n"+inner, "\n"+outer+"}"
	if d.compact() {
		open, close = "{", "}"
	}
	var b bytes.Buffer
	b.WriteString(open)
	b.Write(k)
	b.WriteString(d.colon())
	b.Write(value(inner))
	b.WriteString(close)
	d.splice(o.open, o.close+1, b.Bytes())
}

// compact reports whether the file's top-level object is on one line.
// An empty one ({}: a new file) is not: a new file is indented.
func (d *clientDoc) compact() bool {
	return len(d.top.members) > 0 && !bytes.ContainsRune(d.data[d.top.open:d.top.close], '\n')
}

// colon separates a key from its value, as the file writes it.
func (d *clientDoc) colon() string {
	if d.compact() {
		return ":"
	}
	return ": "
}

// countSpace counts the whitespace bytes just before i.
func countSpace(data []byte, i int) int {
	n := 0
	for i-n > 0 && strings.IndexByte(" \t\r\n", data[i-n-1]) >= 0 {
		n++
	}
	return n
}

// removeMember deletes member i of o with its separator.
func (d *clientDoc) removeMember(o *jsonObject, i int) {
	switch {
	case len(o.members) == 1:
		d.splice(o.open+1, o.close, nil)
	case i > 0:
		d.splice(o.members[i-1].valEnd, o.members[i].valEnd, nil)
	default:
		d.splice(o.members[0].keyStart, o.members[1].keyStart, nil)
	}
}

func (d *clientDoc) encode() []byte { return d.data }

// servers is the object under key, nil when the file has none.
func (d *clientDoc) servers(key string) (*jsonObject, error) {
	i := d.top.find(key)
	if i < 0 {
		for _, m := range d.top.members {
			if strings.EqualFold(m.key, key) {
				return nil, fmt.Errorf("the key %q is not %q (clients match keys exactly); rename it first", termSafe(m.key), key)
			}
		}
		return nil, nil
	}
	m := d.top.members[i]
	if d.data[m.valStart] != '{' {
		return nil, fmt.Errorf("%q is not an object of servers; it is left untouched", key)
	}
	s, err := parseObject(d.data, m.valStart, m.valEnd)
	if err != nil {
		return nil, fmt.Errorf("%q: %v", key, err)
	}
	return s, nil
}

// setServer sets servers[name] = entry, refusing to replace an entry
// that does not run mcpvisor.
func (d *clientDoc) setServer(key, name string, entry json.RawMessage) (bool, error) {
	s, err := d.servers(key)
	if err != nil {
		return false, err
	}
	if s == nil {
		d.addMember(d.top, key, func(prefix string) []byte {
			return d.format(map[string]json.RawMessage{name: entry}, prefix)
		})
		return false, nil
	}
	if i := s.find(name); i >= 0 {
		m := s.members[i]
		if !runsMcpvisor(d.data[m.valStart:m.valEnd]) {
			return false, fmt.Errorf("the entry %q does not run mcpvisor; it is left as it is: pick another name with -name", termSafe(name))
		}
		d.splice(m.valStart, m.valEnd, d.format(entry, d.indentOf(m.keyStart)))
		return true, nil
	}
	d.addMember(s, name, func(prefix string) []byte { return d.format(entry, prefix) })
	return false, nil
}

// removeServer deletes servers[name] if it runs mcpvisor.
func (d *clientDoc) removeServer(key, name string) (bool, error) {
	s, err := d.servers(key)
	if err != nil || s == nil {
		return false, err
	}
	i := s.find(name)
	if i < 0 {
		return false, nil
	}
	m := s.members[i]
	if !runsMcpvisor(d.data[m.valStart:m.valEnd]) {
		return false, fmt.Errorf("the entry %q does not run mcpvisor; it is left as it is (remove it in the client)", termSafe(name))
	}
	d.removeMember(s, i)
	return true, nil
}

// runsMcpvisor reports whether a server entry is mcpvisor's: its command
// is an mcpvisor executable (this one, or one named mcpvisor), or it is an
// HTTP entry that install -http writes (mcpvisorURL).
func runsMcpvisor(raw json.RawMessage) bool {
	// Keys match exactly, as the clients read them.
	var e map[string]json.RawMessage
	var command string
	if json.Unmarshal(raw, &e) != nil {
		return false
	}
	if _, ok := e["command"]; !ok {
		for _, k := range []string{"url", "serverUrl"} {
			var u string
			if json.Unmarshal(e[k], &u) == nil && mcpvisorURL(u) {
				return true
			}
		}
		return false
	}
	if json.Unmarshal(e["command"], &command) != nil {
		return false
	}
	if exe, err := os.Executable(); err == nil && command == exe {
		return true
	}
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil && command == real {
			return true
		}
	}
	base := strings.ToLower(filepath.Base(strings.ReplaceAll(command, `\`, "/")))
	return base == "mcpvisor" || base == "mcpvisor.exe"
}

// mcpvisorURL reports whether u is an endpoint install -http writes: http
// on a loopback address, path /mcp. Another server of this machine at
// /mcp under the same entry name is taken for mcpvisor's; the name is the
// guard (-name).
func mcpvisorURL(u string) bool {
	p, err := url.Parse(u)
	if err != nil || p.Scheme != "http" || p.Path != "/mcp" {
		return false
	}
	ip := net.ParseIP(p.Hostname())
	return p.Hostname() == "localhost" || ip != nil && ip.IsLoopback()
}
