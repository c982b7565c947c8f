package cli

/*
Design note: importing other clients' configurations.

The JSON file is written by someone else's tool and may have been edited by
anyone; the HCL it becomes is run by mcpvisor. Two rules keep the import
from running something the source client would not run:

  - Keys match exactly, as Claude Desktop (JavaScript property access) and
    the .mcp.json readers match them. encoding/json matches struct fields
    case-insensitively, so the file is read into maps and every key is
    compared byte for byte; a case variant of a known key ("Command") is
    an error naming it and the server, never a second spelling that wins.
  - Nothing from the source reaches the HCL except as a value hclwrite
    quotes (it escapes quotes, control characters, "${" and "%{"), a label
    reduced to [A-Za-z0-9_-], an env() name reduced to [A-Za-z0-9_], or a
    comment made of Go-quoted text (no newline can end it early).

See docs/security.md, "Importing other clients' configs".
*/

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
)

// importedServer is one entry of "mcpServers" in Claude Desktop's
// claude_desktop_config.json, Claude Code's .mcp.json and Cursor's
// mcp.json: they share the shape.
type importedServer struct {
	// Name is the entry's key in the source.
	Name     string
	Type     string // "stdio", "http", "streamable-http", "sse"
	Command  string
	Args     []string
	Env      map[string]string
	URL      string
	Headers  map[string]string
	Disabled bool
}

// serverKeys are the keys of a server entry import understands, as the
// source clients spell them; decode stores the value of each.
var serverKeys = map[string]func(s *importedServer, raw json.RawMessage) error{
	"type":     func(s *importedServer, raw json.RawMessage) error { return json.Unmarshal(raw, &s.Type) },
	"command":  func(s *importedServer, raw json.RawMessage) error { return json.Unmarshal(raw, &s.Command) },
	"args":     func(s *importedServer, raw json.RawMessage) error { return json.Unmarshal(raw, &s.Args) },
	"env":      func(s *importedServer, raw json.RawMessage) error { return json.Unmarshal(raw, &s.Env) },
	"url":      func(s *importedServer, raw json.RawMessage) error { return json.Unmarshal(raw, &s.URL) },
	"headers":  func(s *importedServer, raw json.RawMessage) error { return json.Unmarshal(raw, &s.Headers) },
	"disabled": func(s *importedServer, raw json.RawMessage) error { return json.Unmarshal(raw, &s.Disabled) },
}

var (
	// secretName matches names of values that hold secrets.
	secretName = regexp.MustCompile(`(?i)(token|secret|key|password|passwd|credential|auth|cookie|session)`)
	// secretValue matches values that look like credentials whatever
	// their name: long runs of token characters, known key prefixes.
	secretValue = regexp.MustCompile(`^(?:(?:Bearer|Basic|Token)\s+)?(?:sk-|ghp_|gho_|github_pat_|xox[abp]-|AKIA|AIza|glpat-)?[A-Za-z0-9_\-\.=+/]{20,}$`)
	// envNameChars are the runs of characters an environment variable
	// name made from a server and a header name cannot hold.
	envNameChars = regexp.MustCompile(`[^A-Z0-9]+`)
	// envName is a name a shell can export: the source's own variable
	// names are kept when they are one.
	envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// labelChars are the runs of characters a server label does not keep.
	labelChars = regexp.MustCompile(`[^A-Za-z0-9_-]+`)
)

// importCmd prints the config.hcl equivalent of a Claude Desktop, Claude
// Code or Cursor MCP configuration file.
func importCmd(args []string, stdio IO) int {
	fs := newBareFlags("import", stdio)
	file, ok := parseOneArg(fs, args, stdio, commands["import"].synopsis)
	if !ok {
		return ExitUsage
	}
	data, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor import: %s\n", termSafeErr(err))
		return ExitRuntime
	}
	servers, warnings, err := parseClientConfig(data)
	for _, w := range warnings {
		fmt.Fprintf(stdio.Stderr, "mcpvisor import: %s\n", w)
	}
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor import: %s: %s\n", termSafe(file), err)
		return ExitUsage
	}
	imp, err := renderHCL(file, servers)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor import: %s: %s\n", termSafe(file), err)
		return ExitUsage
	}
	stdio.Stdout.Write(imp.hcl)
	for _, r := range imp.renamed {
		fmt.Fprintf(stdio.Stderr, "mcpvisor import: server %q is named %q in the HCL (a label holds letters, digits, _ and -); its tools are prefixed %q\n", r[0], r[1], r[1]+"__")
	}
	for _, name := range imp.disabled {
		fmt.Fprintf(stdio.Stderr, "mcpvisor import: server %q is disabled in the source; imported with enabled = false\n", name)
	}
	if len(imp.vars) > 0 {
		fmt.Fprintf(stdio.Stderr, "mcpvisor import: set %s before running mcpvisor (their values stay in %s, not in the HCL)\n", strings.Join(imp.vars, ", "), termSafe(file))
	}
	return ExitOK
}

// parseClientConfig reads the "mcpServers" of a client configuration,
// matching keys exactly. Warnings name keys that are not imported.
func parseClientConfig(data []byte) ([]importedServer, []string, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, nil, fmt.Errorf("not a JSON MCP client configuration: %s", jsonErrorAt(data, err))
	}
	raw, ok := top["mcpServers"]
	if !ok {
		for k := range top {
			if strings.EqualFold(k, "mcpServers") {
				return nil, nil, fmt.Errorf("the key %q is not \"mcpServers\" (clients match keys exactly and would ignore it); rename it", k)
			}
		}
		return nil, nil, fmt.Errorf("no \"mcpServers\" object to import")
	}
	var entries map[string]map[string]json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, nil, fmt.Errorf("\"mcpServers\" must map server names to objects: %v", err)
	}
	if len(entries) == 0 {
		return nil, nil, fmt.Errorf("\"mcpServers\" has no entries to import")
	}
	names := make([]string, 0, len(entries))
	for name := range entries {
		names = append(names, name)
	}
	sort.Strings(names)
	var servers []importedServer
	var warnings []string
	for _, name := range names {
		// mcpvisor's own entry (`mcpvisor client install` wrote it) would
		// make the host run itself as one of its servers.
		if raw, err := json.Marshal(entries[name]); err == nil && runsMcpvisor(raw) {
			warnings = append(warnings, fmt.Sprintf("server %q runs mcpvisor itself (the entry `mcpvisor client install` writes); skipped", name))
			continue
		}
		s := importedServer{Name: name}
		keys := make([]string, 0, len(entries[name]))
		for k := range entries[name] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			set, known := serverKeys[k]
			if !known {
				for want := range serverKeys {
					if strings.EqualFold(k, want) {
						return nil, warnings, fmt.Errorf("server %q: key %q is not %q: Claude Desktop and .mcp.json readers match keys exactly and would ignore it, so mcpvisor will not guess; rename or remove it", name, k, want)
					}
				}
				warnings = append(warnings, fmt.Sprintf("server %q: key %q is not imported (mcpvisor knows %s)", name, k, knownKeys()))
				continue
			}
			if err := set(&s, entries[name][k]); err != nil {
				return nil, warnings, fmt.Errorf("server %q: %q has the wrong type: %v", name, k, err)
			}
		}
		servers = append(servers, s)
	}
	if len(servers) == 0 {
		return nil, warnings, fmt.Errorf("\"mcpServers\" has only mcpvisor's own entry: nothing to import (the servers it runs are in its own config.hcl)")
	}
	return servers, warnings, nil
}

func knownKeys() string {
	keys := make([]string, 0, len(serverKeys))
	for k := range serverKeys {
		keys = append(keys, strconv.Quote(k))
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

// imported is what renderHCL made of a client configuration.
type imported struct {
	hcl []byte
	// vars are the environment variables the HCL's env() calls read.
	vars []string
	// renamed pairs a source name with the label it became.
	renamed [][2]string
	// disabled names the servers imported with enabled = false.
	disabled []string
}

// secretRef is a value import moves out of the HCL into a variable.
type secretRef struct {
	server, attr, key string
	// value is what the variable must hold (a header's credential without
	// its scheme); scheme is "Bearer", "Basic", "Token" or "".
	value, scheme string
	// name is the variable; prefixed the name with the server in front,
	// used when two servers need one name with different values.
	name, prefixed string
}

// renderHCL writes servers as HCL server blocks, turning values that look
// secret into env() references.
func renderHCL(source string, servers []importedServer) (*imported, error) {
	imp := &imported{}
	labels := map[string]string{} // label → source name
	label := make([]string, len(servers))
	for i, s := range servers {
		l := strings.Trim(labelChars.ReplaceAllString(s.Name, "-"), "-")
		if l == "" {
			return nil, fmt.Errorf("server %q: its name has no letter or digit to make a label of; rename it", s.Name)
		}
		if other, dup := labels[l]; dup {
			return nil, fmt.Errorf("servers %q and %q would both be named %q; rename one", other, s.Name, l)
		}
		labels[l], label[i] = s.Name, l
		if l != s.Name {
			imp.renamed = append(imp.renamed, [2]string{s.Name, l})
		}
	}

	// Pass 1: which values become variables, and under which names: the
	// source's own name when it is one a shell can export, prefixed with
	// the server only where two servers need one name with different
	// values.
	var refs []*secretRef
	find := map[[3]string]*secretRef{}
	for i, s := range servers {
		add := func(attr string, m map[string]string) {
			for k, v := range m {
				if !secretName.MatchString(k) && !secretValue.MatchString(v) {
					continue
				}
				r := &secretRef{server: label[i], attr: attr, key: k, value: v}
				if scheme, rest, ok := strings.Cut(v, " "); ok && attr == "headers" {
					for _, known := range []string{"Bearer", "Basic", "Token"} {
						if strings.EqualFold(scheme, known) {
							r.scheme, r.value = known, strings.TrimSpace(rest)
						}
					}
				}
				r.prefixed = strings.Trim(envNameChars.ReplaceAllString(strings.ToUpper(label[i]+"_"+k), "_"), "_")
				r.name = r.prefixed
				if attr == "env" && envName.MatchString(k) {
					r.name = k
				}
				refs = append(refs, r)
				find[[3]string{label[i], attr, k}] = r
			}
		}
		add("env", s.Env)
		add("headers", s.Headers)
	}
	values := map[string]map[string]bool{}
	for _, r := range refs {
		if values[r.name] == nil {
			values[r.name] = map[string]bool{}
		}
		values[r.name][r.value] = true
	}
	seen := map[string]bool{}
	for _, r := range refs {
		if len(values[r.name]) > 1 {
			r.name = r.prefixed
		}
		if !seen[r.name] {
			seen[r.name] = true
			imp.vars = append(imp.vars, r.name)
		}
	}
	sort.Strings(imp.vars)

	f := hclwrite.NewEmptyFile()
	body := f.Body()
	for i, s := range servers {
		body.AppendNewline()
		blk := body.AppendNewBlock("server", []string{label[i]}).Body()
		switch {
		case s.Command != "" && s.URL != "":
			return nil, fmt.Errorf("server %q has both \"command\" and \"url\"; keep the one the client uses", s.Name)
		case s.Command != "":
			blk.SetAttributeValue("command", cty.StringVal(s.Command))
			if len(s.Args) > 0 {
				args := make([]cty.Value, len(s.Args))
				for i, a := range s.Args {
					args[i] = cty.StringVal(a)
				}
				blk.SetAttributeValue("args", cty.ListVal(args))
			}
			setMap(blk, "env", label[i], s.Env, find)
		case s.URL != "":
			blk.SetAttributeValue("url", cty.StringVal(s.URL))
			if strings.EqualFold(s.Type, "sse") {
				blk.SetAttributeValue("transport", cty.StringVal("sse"))
			}
			setMap(blk, "headers", label[i], s.Headers, find)
		default:
			return nil, fmt.Errorf("server %q has neither \"command\" nor \"url\"", s.Name)
		}
		if s.Disabled {
			blk.SetAttributeValue("enabled", cty.False)
			imp.disabled = append(imp.disabled, s.Name)
		}
	}

	var b bytes.Buffer
	// %q: a newline or any other control character in the path stays
	// inside the comment.
	fmt.Fprintf(&b, "# Imported from %q by `mcpvisor import`.\n", source)
	b.Write(f.Bytes())
	if len(imp.vars) > 0 {
		fmt.Fprintf(&b, "\n# Set these environment variables for mcpvisor (the values were in %q):\n", source)
		for _, v := range imp.vars {
			fmt.Fprintf(&b, "#   %s\n", v) // v matches envName or is made of [A-Z0-9_]
		}
	}
	imp.hcl = b.Bytes()
	return imp, nil
}

// setMap sets attr to m, values found in refs as env() references.
func setMap(blk *hclwrite.Body, attr, server string, m map[string]string, refs map[[3]string]*secretRef) {
	if len(m) == 0 {
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	items := make([]hclwrite.ObjectAttrTokens, 0, len(keys))
	for _, k := range keys {
		value := hclwrite.TokensForValue(cty.StringVal(m[k]))
		if r := refs[[3]string{server, attr, k}]; r != nil {
			value = envRef(r)
		}
		items = append(items, hclwrite.ObjectAttrTokens{Name: hclwrite.TokensForValue(cty.StringVal(k)), Value: value})
	}
	blk.SetAttributeRaw(attr, hclwrite.TokensForObject(items))
}

// envRef is env("NAME"), or "Scheme ${env("NAME")}" for a header whose
// credential follows a scheme: the variable holds only the secret part.
func envRef(r *secretRef) hclwrite.Tokens {
	call := hclwrite.TokensForFunctionCall("env", hclwrite.TokensForValue(cty.StringVal(r.name)))
	if r.scheme == "" {
		return call
	}
	toks := hclwrite.Tokens{
		{Type: hclsyntax.TokenOQuote, Bytes: []byte(`"`)},
		{Type: hclsyntax.TokenQuotedLit, Bytes: []byte(r.scheme + " ")},
		{Type: hclsyntax.TokenTemplateInterp, Bytes: []byte(`${`)},
	}
	toks = append(toks, call...)
	return append(toks,
		&hclwrite.Token{Type: hclsyntax.TokenTemplateSeqEnd, Bytes: []byte(`}`)},
		&hclwrite.Token{Type: hclsyntax.TokenCQuote, Bytes: []byte(`"`)})
}

// jsonErrorAt is err with the line and column it happened at, when the
// decoder says where.
func jsonErrorAt(data []byte, err error) string {
	var syn *json.SyntaxError
	if !errors.As(err, &syn) || syn.Offset <= 0 || syn.Offset > int64(len(data)) {
		return termSafeErr(err)
	}
	before := data[:syn.Offset-1]
	line := bytes.Count(before, []byte("\n")) + 1
	col := len(before) - bytes.LastIndexByte(before, '\n')
	return fmt.Sprintf("line %d, column %d: %s", line, col, termSafeErr(err))
}
