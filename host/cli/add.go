package cli

/*
Design note: `mcpvisor add` and `mcpvisor remove` edit the file a person owns.

The file is theirs: comments, alignment and order stay byte for byte. `add`
appends one server block, built with hclwrite and formatted on its own, to
the bytes as they are; `remove` deletes one block (with the comment lines
just above it, which hclwrite counts as the block's) through hclwrite, which
leaves every other token untouched. The result is written to a temporary
file beside the original, with its mode, and loaded as `run` would load it;
only a valid result replaces the file, by rename, so a reader (a running
host on SIGHUP, an editor) never sees half a file, and a refused edit
leaves the file byte-identical.

Secrets never go into the file: `-env NAME` writes NAME = env("NAME"), and a
value given on the command line (-env NAME=VALUE) goes to the user's secret
store (host/internal/secrets), where env("NAME") finds it. A header
value may name variables ($NAME or ${NAME}), written as env("NAME"); a header
whose name says it carries a credential (Authorization, Cookie, *token*,
*key*, *secret*, …) is refused when its value is a literal.

Then every running host serving the file is asked to reload it through its
control socket (POST /control/reload, behind the socket's checks and the
bearer token), and `add` waits, bounded, for the new server to come up and
says what it is waiting for.
*/

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"

	"github.com/mcpvisor/mcpvisor/host"
	"github.com/mcpvisor/mcpvisor/host/config"
)

// addReadyWait bounds how long `add` waits for the new server to be ready
// in a running host; a server slower than that keeps starting there, and
// `mcpvisor status` shows when it is.
const addReadyWait = 60 * time.Second

// addPollEvery is how often `add` asks a running host for the new server's
// state while it waits.
const addPollEvery = 200 * time.Millisecond

// envVarName is what an environment variable reference may be called.
var envVarName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// headerVarRef finds the variable references of a header value: ${NAME} or $NAME.
var headerVarRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

// serverName is a name `add` gives a server block.
var serverName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// credentialHeader matches header names whose value is a credential.
var credentialHeader = regexp.MustCompile(`(?i)^(authorization|proxy-authorization|cookie)$|token|key|secret|auth|passw|session|credential`)

// serverSpec is the server block `add` writes.
type serverSpec struct {
	name      string
	command   string  // stdio
	args      []value // stdio
	env       []envSpec
	url       value  // HTTP
	transport string // HTTP: "" or "sse"
	headers   []headerSpec
	oauth     bool
}

// envSpec is one entry of a stdio server's env: its value is env("NAME")
// for -env NAME, and what server.json says for `add -registry`.
type envSpec struct {
	name  string
	value value
}

// headerSpec is one header: its literal text and variable references, in
// order.
type headerSpec struct {
	name  string
	value value
}

// value is an attribute's value as `add` writes it: literal text and
// env("NAME") references, in order — never a secret's value.
type value []valuePart

// valuePart is literal text, or (env set) a reference to the variable env.
type valuePart struct {
	text string
	env  string
}

// literal is the value s, as it is.
func literal(s string) value { return value{{text: s}} }

// envValue is the value env("name").
func envValue(name string) value { return value{{env: name}} }

// refs are the variables v reads, in order.
func (v value) refs() []string {
	var names []string
	for _, p := range v {
		if p.env != "" {
			names = append(names, p.env)
		}
	}
	return names
}

// isLiteral reports whether v reads no variable.
func (v value) isLiteral() bool { return len(v.refs()) == 0 }

// String is v as literal text, for messages: references as ${NAME}.
func (v value) String() string {
	var b strings.Builder
	for _, p := range v {
		if p.env != "" {
			b.WriteString("${" + p.env + "}")
		} else {
			b.WriteString(p.text)
		}
	}
	return b.String()
}

// headerTemplate is a -header value: its literal text, and a reference
// for each $NAME or ${NAME} in it.
func headerTemplate(v string) value {
	var out value
	last := 0
	for _, loc := range headerVarRef.FindAllStringSubmatchIndex(v, -1) {
		if loc[0] > last {
			out = append(out, valuePart{text: v[last:loc[0]]})
		}
		if loc[2] >= 0 {
			out = append(out, valuePart{env: v[loc[2]:loc[3]]}) // ${NAME}
		} else {
			out = append(out, valuePart{env: v[loc[4]:loc[5]]}) // $NAME
		}
		last = loc[1]
	}
	if last < len(v) || len(out) == 0 {
		out = append(out, valuePart{text: v[last:]})
	}
	return out
}

// vars are the variables the block reads, each once, in order.
func (s serverSpec) vars() []string {
	var all []string
	add := func(v value) {
		for _, n := range v.refs() {
			if !slices.Contains(all, n) {
				all = append(all, n)
			}
		}
	}
	for _, e := range s.env {
		add(e.value)
	}
	for _, a := range s.args {
		add(a)
	}
	add(s.url)
	for _, h := range s.headers {
		add(h.value)
	}
	return all
}

// repeated is a flag given any number of times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ", ") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

func addCmd(args []string, stdio IO) int {
	fs, pathFlag := newFlags("add", stdio)
	var envs, headers repeated
	fs.Var(&envs, "env", "pass the environment variable `NAME` to the server (repeatable); written as env(\"NAME\"), never its value")
	fs.Var(&headers, "header", "send the HTTP header `'Name: value'` (repeatable); $VAR or ${VAR} in the value is read from the environment")
	oauth := fs.Bool("oauth", false, "log in with OAuth (adds an oauth {} block; then run: mcpvisor login NAME)")
	transport := fs.String("transport", "", "with a URL: `sse` for a server that only speaks the legacy HTTP+SSE transport")
	fromRegistry := fs.String("registry", "", "add the server the MCP registry lists as `SERVER_NAME[@VERSION]` (docs/registry.md)")
	use := fs.String("use", "", "with -registry: run its `npm`, `pypi` or `oci` package, or reach its `remote` (default: the first of these server.json offers)")

	var command []string
	hasCommand := false
	for i, a := range args {
		if a == "--" {
			args, command, hasCommand = args[:i], args[i+1:], true
			break
		}
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stdio.Stderr, "mcpvisor add: "+format+"\nRun \"mcpvisor help add\" for its arguments, options and examples.\n", a...)
		return ExitUsage
	}
	if !hasCommand && !flagGiven(args, "registry") {
		if name, cmd, ok := commandWithoutDashes(fs, args); ok {
			return usageErr("%q looks like a command and its arguments: put -- before the command, so that its flags are not read as mcpvisor's:\n  mcpvisor add %s -- %s", termSafe(cmd[0]), termSafe(name), termSafe(strings.Join(cmd, " ")))
		}
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return ExitUsage
	}
	path := *pathFlag
	spec := serverSpec{oauth: *oauth, transport: *transport}
	switch {
	case len(pos) > 0 && !serverName.MatchString(pos[0]):
		return usageErr("server name %q: use letters, digits, - and _ (it prefixes the server's tools)", termSafe(pos[0]))
	case len(pos) == 0 && *fromRegistry != "":
		return usageErr("missing the server's NAME: mcpvisor add NAME -registry %s", termSafe(*fromRegistry))
	case *fromRegistry != "":
		if hasCommand || len(pos) > 1 || len(envs) > 0 || len(headers) > 0 || spec.transport != "" {
			return usageErr("-registry takes the command, URL, environment and headers from the registry's server.json: give only NAME (edit the block afterwards to change them)")
		}
		return addFromRegistry(pos[0], *fromRegistry, *use, spec.oauth, path, stdio)
	case *use != "":
		return usageErr("-use picks a package of a -registry server; give -registry SERVER_NAME too")
	case len(pos) == 0:
		return usageErr("missing the server's NAME: mcpvisor add NAME -- COMMAND [ARGS…] or mcpvisor add NAME URL")
	case hasCommand && len(pos) > 1:
		return usageErr("unexpected argument %q before \"--\": the command and its arguments go after it", termSafe(pos[1]))
	case hasCommand && len(command) == 0:
		return usageErr("missing the command after \"--\"")
	case hasCommand:
		spec.name, spec.command = pos[0], command[0]
		for _, a := range command[1:] {
			spec.args = append(spec.args, literal(a))
		}
	case len(pos) == 1:
		return usageErr("missing what to run: add \"-- COMMAND [ARGS…]\" for a local server or a URL for a remote one")
	case len(pos) > 2:
		return usageErr("unexpected argument %q; to run a command, put \"--\" before it", termSafe(pos[2]))
	default:
		spec.name, spec.url = pos[0], literal(pos[1])
		if !strings.HasPrefix(pos[1], "http://") && !strings.HasPrefix(pos[1], "https://") {
			return usageErr("%q is no http:// or https:// URL; to run a command, put \"--\" before it", termSafe(pos[1]))
		}
	}
	if spec.url == nil && (len(headers) > 0 || spec.oauth || spec.transport != "") {
		return usageErr("-header, -oauth and -transport are for a server at a URL, not for a command")
	}
	if spec.url != nil && len(envs) > 0 {
		return usageErr("-env is for a command's environment; a server at a URL takes -header 'Name: ${VAR}'")
	}
	if spec.transport != "" && spec.transport != string(config.TransportSSE) {
		return usageErr("-transport %q: the only choice is \"sse\" (without it the URL speaks streamable HTTP)", termSafe(spec.transport))
	}
	var stored [][2]string // -env NAME=VALUE: the values for the secret store
	for _, e := range envs {
		name, value, hasValue := strings.Cut(e, "=")
		if !envVarName.MatchString(name) {
			return usageErr("-env %q: an environment variable name is letters, digits and _, not starting with a digit", termSafe(name))
		}
		if hasValue {
			// Kept in the secret store, never in the file (docs/config.md,
			// "Secrets").
			stored = append(stored, [2]string{name, value})
		}
		spec.env = append(spec.env, envSpec{name: name, value: envValue(name)})
	}
	for _, h := range headers {
		name, value, ok := strings.Cut(h, ":")
		if !ok {
			name, value, ok = strings.Cut(h, "=")
		}
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || name == "" || strings.ContainsAny(name, " \t\r\n") {
			return usageErr("-header %q: write it as 'Name: value'", termSafe(name))
		}
		if strings.ContainsAny(value, "\r\n") {
			return usageErr("-header %s: the value holds a line break", termSafe(name))
		}
		if credentialHeader.MatchString(name) && !headerVarRef.MatchString(value) {
			return usageErr("-header %s: its value looks like a credential, and mcpvisor add never writes one into %s, where it would sit in clear;\n"+
				"name an environment variable instead, in single quotes so the shell leaves it: -header '%s: Bearer ${TOKEN}' (written as env(\"TOKEN\")), and export TOKEN in the environment mcpvisor runs in", termSafe(name), path, termSafe(name))
		}
		spec.headers = append(spec.headers, headerSpec{name: name, value: headerTemplate(value)})
	}
	return addServer(spec, stored, path, stdio)
}

// addServer appends spec's block to the config at path, after storing the
// secrets in stored, says which variables the server reads and where it
// finds them, and reloads the running hosts: the one path of `add`,
// whether the block came from the command line or from the registry.
func addServer(spec serverSpec, stored [][2]string, path string, stdio IO) int {
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stdio.Stderr, "mcpvisor add: "+format+"\nRun \"mcpvisor help add\" for its arguments, options and examples.\n", a...)
		return ExitUsage
	}
	block, err := spec.block()
	if err != nil {
		return usageErr("%s", termSafeErr(err))
	}
	if len(stored) > 0 {
		// Stored before the edit, so that the validation (and a running
		// host's reload) already finds them.
		store, err := openSecrets()
		if err == nil {
			for _, kv := range stored {
				if err = store.Set(kv[0], kv[1]); err != nil {
					break
				}
				fmt.Fprintf(stdio.Stderr, "stored the value of %s in %s (not in %s)\n", kv[0], store.Backend(), path)
			}
		}
		if err != nil {
			fmt.Fprintf(stdio.Stderr, "mcpvisor add: %s\nNothing was changed in %s.\n", termSafeErr(err), path)
			return ExitRuntime
		}
	}
	if err := makeUserConfigDir(path, stdio); err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor add: %s\n", err)
		return ExitRuntime
	}
	fmt.Fprintf(stdio.Stderr, "validating %s with server %q added…\n", path, termSafe(spec.name))
	code := editConfig(path, true, stdio, func(src []byte, f *hclwrite.File) ([]byte, error) {
		if findServer(f, spec.name) != nil {
			return nil, fmt.Errorf("a server %q is already in %s; pick another name, or run `mcpvisor remove %s` first", spec.name, path, spec.name)
		}
		out := bytes.Clone(src)
		if len(out) > 0 && !bytes.HasSuffix(out, []byte("\n")) {
			out = append(out, '\n')
		}
		if len(out) > 0 && !bytes.HasSuffix(out, []byte("\n\n")) {
			out = append(out, '\n')
		}
		return append(out, block...), nil
	})
	if code != ExitOK {
		return code
	}
	fmt.Fprintf(stdio.Stdout, "added server %q to %s\n", spec.name, path)
	for _, v := range spec.vars() {
		if slices.ContainsFunc(stored, func(kv [2]string) bool { return kv[0] == v }) {
			continue
		}
		if _, set := os.LookupEnv(v); !set {
			if store, err := openSecrets(); err == nil {
				if _, ok, _ := store.Lookup(v); ok {
					fmt.Fprintf(stdio.Stdout, "  it reads %s from the secret store\n", v)
					continue
				}
			}
			fmt.Fprintf(stdio.Stdout, "  it reads %s, which is neither in the environment here nor in the secret store: run `mcpvisor secret set %s` (a running host picks it up at once), or export %s=… in the environment mcpvisor runs in\n", v, v, v)
		} else {
			fmt.Fprintf(stdio.Stdout, "  it reads %s from the environment of the mcpvisor that runs it (set here; a running host needs it in its own environment)\n", v)
		}
	}
	if spec.oauth {
		fmt.Fprintf(stdio.Stdout, "  it logs in with OAuth: run `mcpvisor login %s`\n", spec.name)
	}
	return reloadHosts(path, spec.name, false, stdio)
}

func removeCmd(args []string, stdio IO) int {
	fs, pathFlag := newFlags("remove", stdio)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return ExitUsage
	}
	path := *pathFlag
	if len(pos) != 1 {
		fmt.Fprintf(stdio.Stderr, "mcpvisor remove: want one server NAME, got %d argument(s)\nRun \"mcpvisor help remove\" for its arguments, options and examples.\n", len(pos))
		return ExitUsage
	}
	name := pos[0]
	fmt.Fprintf(stdio.Stderr, "validating %s without server %q…\n", path, termSafe(name))
	code := editConfig(path, false, stdio, func(src []byte, f *hclwrite.File) ([]byte, error) {
		if findServer(f, name) == nil {
			if s := suggest(name, serverNames(f)); s != "" {
				return nil, fmt.Errorf("no server %q in %s; did you mean %q? (mcpvisor remove %s)", termSafe(name), path, s, s)
			}
			return nil, fmt.Errorf("no server %q in %s; `mcpvisor status` lists the servers", termSafe(name), path)
		}
		return cutServer(src, name)
	})
	if code != ExitOK {
		return code
	}
	fmt.Fprintf(stdio.Stdout, "removed server %q from %s\n", name, path)
	return reloadHosts(path, name, true, stdio)
}

// block is the server block, formatted.
func (s serverSpec) block() ([]byte, error) {
	f := hclwrite.NewEmptyFile()
	b := f.Body().AppendNewBlock("server", []string{s.name}).Body()
	if s.command != "" {
		b.SetAttributeValue("command", cty.StringVal(s.command))
		if len(s.args) > 0 {
			elems := make([]hclwrite.Tokens, len(s.args))
			for i, a := range s.args {
				t, err := a.tokens()
				if err != nil {
					return nil, fmt.Errorf("argument %q: %w", a, err)
				}
				elems[i] = t
			}
			b.SetAttributeRaw("args", hclwrite.TokensForTuple(elems))
		}
		if len(s.env) > 0 {
			var attrs []hclwrite.ObjectAttrTokens
			for _, e := range s.env {
				t, err := e.value.tokens()
				if err != nil {
					return nil, fmt.Errorf("env %s: %w", e.name, err)
				}
				attrs = append(attrs, hclwrite.ObjectAttrTokens{Name: hclwrite.TokensForIdentifier(e.name), Value: t})
			}
			b.SetAttributeRaw("env", hclwrite.TokensForObject(attrs))
		}
	}
	if s.url != nil {
		t, err := s.url.tokens()
		if err != nil {
			return nil, fmt.Errorf("url: %w", err)
		}
		b.SetAttributeRaw("url", t)
		if s.transport != "" {
			b.SetAttributeValue("transport", cty.StringVal(s.transport))
		}
		if len(s.headers) > 0 {
			var attrs []hclwrite.ObjectAttrTokens
			for _, h := range s.headers {
				v, err := h.value.tokens()
				if err != nil {
					return nil, fmt.Errorf("-header %s: %w", h.name, err)
				}
				attrs = append(attrs, hclwrite.ObjectAttrTokens{Name: hclwrite.TokensForValue(cty.StringVal(h.name)), Value: v})
			}
			b.SetAttributeRaw("headers", hclwrite.TokensForObject(attrs))
		}
		if s.oauth {
			b.AppendNewline()
			b.AppendNewBlock("oauth", nil)
		}
	}
	return hclwrite.Format(f.Bytes()), nil
}

// tokens is the expression of v: a string, env("NAME"), or a template of
// literal text and ${env("NAME")}.
func (v value) tokens() (hclwrite.Tokens, error) {
	if v.isLiteral() {
		return hclwrite.TokensForValue(cty.StringVal(v.String())), nil
	}
	if len(v) == 1 {
		return hclwrite.TokensForFunctionCall("env", hclwrite.TokensForValue(cty.StringVal(v[0].env))), nil
	}
	var src strings.Builder
	src.WriteString(`v = "`)
	for i, p := range v {
		if p.env != "" {
			fmt.Fprintf(&src, `${env(%q)}`, p.env)
			continue
		}
		lit := templateLiteral(p.text)
		if strings.HasSuffix(lit, "$") && i+1 < len(v) {
			// "$" then "${" would read as the escape "$${".
			lit = strings.TrimSuffix(lit, "$") + `${"$"}`
		}
		src.WriteString(lit)
	}
	src.WriteString("\"\n")
	f, diags := hclwrite.ParseConfig([]byte(src.String()), "value", hcl.InitialPos)
	if diags.HasErrors() {
		return nil, errors.New("its value cannot be written as an HCL string")
	}
	return f.Body().GetAttribute("v").Expr().BuildTokens(nil), nil
}

// templateLiteral escapes s for the inside of an HCL quoted template.
func templateLiteral(s string) string {
	b, _ := json.Marshal(s)
	q := string(b[1 : len(b)-1])
	q = strings.ReplaceAll(q, "${", "$${")
	return strings.ReplaceAll(q, "%{", "%%{")
}

// cutServer returns src without the top-level `server "name"` block: its
// lines, the comment lines just above it and one blank line after it (or
// before it, at the end of the file). Every other byte stays as it was —
// hclwrite's own RemoveBlock would respace the line comments elsewhere.
func cutServer(src []byte, name string) ([]byte, error) {
	file, diags := hclsyntax.ParseConfig(src, "config", hcl.InitialPos)
	if diags.HasErrors() {
		return nil, errors.New(diags.Error())
	}
	var blk *hclsyntax.Block
	for _, b := range file.Body.(*hclsyntax.Body).Blocks {
		if b.Type == "server" && len(b.Labels) == 1 && b.Labels[0] == name {
			blk = b
			break
		}
	}
	if blk == nil {
		return nil, fmt.Errorf("no server %q", name)
	}
	lineStart := func(off int) int { return bytes.LastIndexByte(src[:off], '\n') + 1 }
	lineEnd := func(off int) int { // just past the line's newline
		if i := bytes.IndexByte(src[off:], '\n'); i >= 0 {
			return off + i + 1
		}
		return len(src)
	}
	start := lineStart(blk.TypeRange.Start.Byte)
	if strings.TrimSpace(string(src[start:blk.TypeRange.Start.Byte])) != "" {
		return nil, fmt.Errorf("server %q shares its first line with something else; remove it by hand", name)
	}
	end := lineEnd(blk.CloseBraceRange.End.Byte)
	if strings.TrimSpace(string(src[blk.CloseBraceRange.End.Byte:end])) != "" {
		return nil, fmt.Errorf("server %q shares its last line with something else; remove it by hand", name)
	}
	// The comment lines just above describe the block.
	for start > 0 {
		prev := lineStart(start - 1)
		line := strings.TrimSpace(string(src[prev:start]))
		if !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "//") {
			break
		}
		start = prev
	}
	blank := func(from, to int) bool { return strings.TrimSpace(string(src[from:to])) == "" }
	switch {
	case end < len(src) && blank(end, lineEnd(end)):
		end = lineEnd(end)
	case end == len(src) && start > 0 && blank(lineStart(start-1), start):
		start = lineStart(start - 1)
	}
	return append(bytes.Clone(src[:start]), src[end:]...), nil
}

// findServer returns the top-level `server "name"` block of f, or nil.
// commandWithoutDashes recognizes `add NAME COMMAND ARGS…` without the
// "--" (`add fs npx -y @scope/server`): after the name, a word that is no
// URL, followed by something that is not one of add's flags. It returns
// the name and the command with its arguments.
func commandWithoutDashes(fs *flag.FlagSet, args []string) (name string, command []string, ok bool) {
	var pos []int
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") && len(pos) < 2 {
			f := fs.Lookup(strings.TrimLeft(strings.SplitN(a, "=", 2)[0], "-"))
			if f == nil {
				return "", nil, false // an unknown flag before the command: flag parsing says so
			}
			if bf, isBool := f.Value.(interface{ IsBoolFlag() bool }); !strings.Contains(a, "=") && (!isBool || !bf.IsBoolFlag()) {
				i++ // its value
			}
			continue
		}
		pos = append(pos, i)
		if len(pos) == 2 {
			if strings.HasPrefix(a, "http://") || strings.HasPrefix(a, "https://") {
				return "", nil, false
			}
			// A command alone is caught later ("put -- before it"); with
			// more after it, flag parsing would take its flags as add's.
			if i+1 < len(args) {
				return args[pos[0]], args[i:], true
			}
			return "", nil, false
		}
	}
	return "", nil, false
}

// serverNames are the labels of f's server blocks, in order.
func serverNames(f *hclwrite.File) []string {
	var names []string
	for _, b := range f.Body().Blocks() {
		if b.Type() == "server" && len(b.Labels()) == 1 {
			names = append(names, b.Labels()[0])
		}
	}
	return names
}

func findServer(f *hclwrite.File, name string) *hclwrite.Block {
	for _, b := range f.Body().Blocks() {
		if b.Type() == "server" && len(b.Labels()) == 1 && b.Labels()[0] == name {
			return b
		}
	}
	return nil
}

// editConfig replaces the configuration file at path with what edit makes
// of it, when that is a valid configuration: written beside it with its
// mode, loaded as `run` loads it, then renamed over it. Anything refused
// leaves the file as it was. A missing file is created (0600) when create
// is set.
func editConfig(path string, create bool, stdio IO, edit func(src []byte, f *hclwrite.File) ([]byte, error)) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stdio.Stderr, "mcpvisor: "+format+"\n", a...)
		return code
	}
	// Edit the file a symlink points to: the link stays a link.
	real := path
	if r, err := filepath.EvalSymlinks(path); err == nil {
		real = r
	}
	mode := fs.FileMode(0o600)
	src, err := os.ReadFile(real)
	switch {
	case err == nil:
		if fi, err := os.Stat(real); err == nil {
			mode = fi.Mode().Perm()
		}
	case errors.Is(err, fs.ErrNotExist) && create:
		src = nil
	default:
		return fail(ExitRuntime, "cannot read %s: %v", path, plainErr(err))
	}
	f, diags := hclwrite.ParseConfig(src, path, hcl.InitialPos)
	if diags.HasErrors() {
		return fail(ExitUsage, "%s is not valid HCL, so it was left as it is; fix it first (`mcpvisor validate -config %s` shows where):\n%s", path, path, diags.Error())
	}
	out, err := edit(src, f)
	if err != nil {
		return fail(ExitUsage, "%s; %s was left as it is", err, path)
	}
	tmp, err := os.CreateTemp(filepath.Dir(real), "."+filepath.Base(real)+".tmp-*")
	if err != nil {
		return fail(ExitRuntime, "cannot write beside %s: %v", path, plainErr(err))
	}
	defer os.Remove(tmp.Name()) // after the rename, there is nothing there
	_, werr := tmp.Write(out)
	if werr == nil {
		werr = tmp.Chmod(mode)
	}
	if werr == nil {
		werr = tmp.Sync()
	}
	if err := tmp.Close(); werr == nil {
		werr = err
	}
	if werr != nil {
		return fail(ExitRuntime, "cannot write beside %s: %v; it was left as it is", path, plainErr(werr))
	}
	if _, err := config.LoadForRun(tmp.Name()); err != nil {
		msg := strings.ReplaceAll(strings.TrimRight(err.Error(), "\n"), tmp.Name(), path)
		return fail(ExitUsage, "the result would be an invalid configuration, so %s was left as it is:\n%s", path, msg)
	}
	if err := os.Rename(tmp.Name(), real); err != nil {
		return fail(ExitRuntime, "cannot replace %s: %v; it was left as it is", path, plainErr(err))
	}
	return ExitOK
}

// plainErr is err's message without the *PathError's repetition of the
// temporary file's name.
func plainErr(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// reloadHosts asks every running host serving the config at path to read
// it again, and, after an add, waits for the server to come up in each.
func reloadHosts(path, server string, removed bool, stdio IO) int {
	token := os.Getenv("MCPVISOR_TOKEN")
	if hb, err := config.LoadHost(path); err == nil {
		token = cmp.Or(token, hb.BearerToken)
	}
	ts, err := runningHosts(path, token)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor: cannot reach the running hosts of %s: %s\nThe file is changed; reload a running mcpvisor with SIGHUP.\n", path, termSafeErr(err))
		return ExitRuntime
	}
	if len(ts) == 0 {
		run := "mcpvisor run"
		if path != defaultConfigFile && !isUserConfig(path) {
			run += " -config " + path
		}
		fmt.Fprintf(stdio.Stdout, "no running mcpvisor serves %s; start one with: %s\n", path, run)
		return ExitOK
	}
	code := ExitOK
	for _, t := range ts {
		fmt.Fprintf(stdio.Stderr, "reloading host %s…\n", t.name)
		rep, err := askReload(t)
		if err != nil {
			fmt.Fprintf(stdio.Stderr, "mcpvisor: host %s did not reload %s: %s\n", t.name, path, termSafeErr(err))
			code = ExitRuntime
			continue
		}
		if removed {
			fmt.Fprintf(stdio.Stdout, "host %s: stopped server %q (%d server(s) left)\n", t.name, server, len(rep.Added)+len(rep.Restarted)+len(rep.Unchanged))
			continue
		}
		if server == "" {
			// A secret changed: the servers whose env() read it are replaced.
			if len(rep.Restarted) == 0 {
				fmt.Fprintf(stdio.Stdout, "host %s: reloaded; no server reads a changed value\n", t.name)
			} else {
				fmt.Fprintf(stdio.Stdout, "host %s: reloaded; restarted %s\n", t.name, strings.Join(rep.Restarted, ", "))
			}
			continue
		}
		if code2 := waitServer(t, server, stdio); code2 != ExitOK {
			code = code2
		}
	}
	if code != ExitOK && !removed && server != "" {
		// The edit stands whatever the host made of it: say so, and how to
		// take it back.
		fmt.Fprintf(stdio.Stdout, "the server %q stays in %s: fix what it says (then `mcpvisor restart %s`), or undo the add with `mcpvisor remove %s`\n", server, path, server, server)
	}
	return code
}

// askReload sends POST /control/reload to t.
func askReload(t target) (host.ReloadReport, error) {
	var rep host.ReloadReport
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
	defer cancel()
	resp, err := t.do(ctx, http.MethodPost, "/control/reload")
	if err != nil {
		return rep, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
		return rep, errors.New("it is an older mcpvisor without POST /control/reload; reload it with SIGHUP")
	case resp.StatusCode == http.StatusForbidden:
		// Not an operator (a JWT in MCPVISOR_TOKEN over TCP): the body says
		// what is missing.
		var ref host.OperatorRefusal
		if json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 1<<20)).Decode(&ref) == nil && ref.Error != "" {
			return rep, errors.New(ref.Error)
		}
		return rep, errors.New("it refused the token; set MCPVISOR_TOKEN to its bearer token")
	case resp.StatusCode == http.StatusUnauthorized:
		return rep, errors.New("it refused the token; set MCPVISOR_TOKEN to its bearer token")
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 1<<20)).Decode(&rep); err != nil {
		return rep, fmt.Errorf("unreadable answer (HTTP %d): %w", resp.StatusCode, err)
	}
	if rep.Error != "" {
		return rep, errors.New(rep.Error)
	}
	return rep, nil
}

// waitServer waits, bounded by addReadyWait, until server leaves
// "starting" in t, saying what it waits for and how it ended.
func waitServer(t target, server string, stdio IO) int {
	fmt.Fprintf(stdio.Stderr, "waiting for server %q to be ready in host %s…\n", server, t.name)
	ctx, cancel := context.WithTimeout(context.Background(), addReadyWait)
	defer cancel()
	var last host.ServerStatus
	for {
		st, err := serverState(ctx, t, server)
		if err == nil {
			last = st
			switch st.State {
			case host.StateReady, host.StateIdle:
				fmt.Fprintf(stdio.Stdout, "host %s: server %q is ready with %d tool(s); `mcpvisor tools` lists them\n", t.name, server, st.ExposedTools)
				return ExitOK
			case "starting":
			case "reconnecting":
				fmt.Fprintf(stdio.Stdout, "host %s: server %q failed to start and is retrying: %s\n", t.name, server, termSafe(cmp.Or(st.LastError, "see `mcpvisor status`")))
				return ExitRuntime
			default:
				fmt.Fprintf(stdio.Stdout, "host %s: server %q is %s: %s\n", t.name, server, termSafe(st.State), termSafe(cmp.Or(st.Action, st.LastError, "see `mcpvisor status`")))
				return ExitRuntime
			}
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(stdio.Stdout, "host %s: server %q is still %s after %s (%s); `mcpvisor status` shows when it is ready\n",
				t.name, server, termSafe(cmp.Or(last.State, "starting")), addReadyWait, termSafe(cmp.Or(last.LastError, "no error yet")))
			return ExitRuntime
		case <-time.After(addPollEvery):
		}
	}
}

// serverState is server's status in t.
func serverState(ctx context.Context, t target, server string) (host.ServerStatus, error) {
	resp, err := t.do(ctx, http.MethodGet, "/status")
	if err != nil {
		return host.ServerStatus{}, err
	}
	defer resp.Body.Close()
	var rep host.StatusReport
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 8<<20)).Decode(&rep); err != nil {
		return host.ServerStatus{}, err
	}
	for _, s := range rep.Servers {
		if s.Name == server {
			return s, nil
		}
	}
	return host.ServerStatus{}, fmt.Errorf("server %q not in the host's status", server)
}
