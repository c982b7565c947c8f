package cli

/*
Design note: `mcpvisor search` and `mcpvisor add NAME -registry SERVER[@VERSION]`
read the MCP registry (docs/registry.md).

A server.json says how to run a server (packages: npm, pypi, oci, each with
runtime and package arguments and environment variables) or where to reach
it (remotes: streamable HTTP or SSE, with headers). `add -registry` turns
one of them into the serverSpec the command line would have built and hands
it to addServer, the one path that writes, validates and reloads
(docs/design.md §20): the registry only decides what goes in the block.

Every input server.json leaves to the user (a secret, or a required value
without a default) is written as env("NAME"), never as a value; a secret
is asked for at a prompt when standard input is a terminal and kept in the
secret store, and otherwise the user is told the `mcpvisor secret set NAME`
to run. Whatever fails before the edit (the registry, its JSON, a package
mcpvisor cannot run) leaves the file as it was.
*/

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"unicode"

	"golang.org/x/term"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/mcpregistry"
)

// searchLimit is how many servers `search` shows by default.
const searchLimit = 30

// maxShownDescription bounds a description `search` or `add` prints:
// the registry's text is the publisher's, not ours.
const maxShownDescription = 200

// runnable are the choices of add's -use, in the order add prefers them.
var runnable = []string{mcpregistry.TypeNPM, mcpregistry.TypePyPI, mcpregistry.TypeOCI, "remote"}

func searchCmd(args []string, stdio IO) int {
	fs, pathFlag := newFlags("search", stdio)
	limit := fs.Int("limit", searchLimit, "show at most `N` servers (1 to 100)")
	versions := fs.Bool("versions", false, "list every version of the server named SERVER_NAME instead")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return ExitUsage
	}
	path := *pathFlag
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stdio.Stderr, "mcpvisor search: "+format+"\nRun \"mcpvisor help search\" for its arguments, options and examples.\n", a...)
		return ExitUsage
	}
	if len(pos) != 1 {
		return usageErr("want one QUERY (a part of the server names to find), got %d argument(s)", len(pos))
	}
	if *limit < 1 || *limit > 100 {
		return usageErr("-limit %d: the registry answers 1 to 100 servers a page", *limit)
	}
	client, err := registryClient(path)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor search: %s\n", termSafeErr(err))
		return ExitUsage
	}
	ctx := context.Background()
	var entries []mcpregistry.Entry
	more := false
	if *versions {
		entries, err = client.Versions(ctx, pos[0])
	} else {
		entries, more, err = client.Search(ctx, pos[0], *limit)
	}
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor search: %s\n", registryFailure(err, client, path, pos[0], ""))
		return ExitRuntime
	}
	if len(entries) == 0 {
		fmt.Fprintf(stdio.Stderr, "no server in the MCP registry at %s has %q in its name\n", client.URL(), termSafe(pos[0]))
		return ExitOK
	}
	tw := tabwriter.NewWriter(stdio.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVERSION\tOFFERS\tDESCRIPTION")
	for _, e := range entries {
		version := e.Server.Version
		if st := e.Status(); st != "" && st != "active" {
			version += " (" + st + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", termSafe(e.Server.Name), termSafe(version), termSafe(strings.Join(offers(e.Server), " ")), shown(e.Server.Description))
	}
	tw.Flush()
	if more {
		fmt.Fprintf(stdio.Stderr, "more servers match; narrow the query, or raise -limit (at most 100)\n")
	}
	fmt.Fprintf(stdio.Stderr, "add one with: mcpvisor add NAME -registry SERVER_NAME[@VERSION]\n")
	return ExitOK
}

// addFromRegistry is `mcpvisor add NAME -registry REF [-use TYPE]`.
func addFromRegistry(name, ref, use string, oauth bool, path string, stdio IO) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stdio.Stderr, "mcpvisor add: "+format+"\nNothing was written to %s.\n", append(a, path)...)
		return code
	}
	server, version, _ := strings.Cut(ref, "@")
	if !strings.Contains(server, "/") || strings.ContainsAny(server, " \t") {
		return fail(ExitUsage, "-registry %q: a registry server name has a namespace and a name, such as io.github.owner/server (`mcpvisor search WORD` finds them)", termSafe(ref))
	}
	if use != "" && !slices.Contains(runnable, use) {
		return fail(ExitUsage, "-use %q: it is one of %s", termSafe(use), strings.Join(runnable, ", "))
	}
	client, err := registryClient(path)
	if err != nil {
		return fail(ExitUsage, "%s", termSafeErr(err))
	}
	entry, err := client.Server(context.Background(), server, version)
	if err != nil {
		return fail(ExitRuntime, "%s", registryFailure(err, client, path, server, version))
	}
	sj := entry.Server
	spec, needs, from, err := specFromServerJSON(name, sj, use)
	if err != nil {
		return fail(ExitRuntime, "%s@%s from %s: %s", termSafe(sj.Name), termSafe(sj.Version), client.URL(), termSafeErr(err))
	}
	if oauth {
		if spec.url == nil {
			return fail(ExitUsage, "-oauth is for a remote; %s@%s is added as %s", termSafe(sj.Name), termSafe(sj.Version), from)
		}
		spec.oauth = true
	}
	fmt.Fprintf(stdio.Stderr, "%s@%s from %s: %s\n", termSafe(sj.Name), termSafe(sj.Version), client.URL(), from)
	if st := entry.Status(); st != "" && st != "active" {
		fmt.Fprintf(stdio.Stderr, "  the registry marks this version %s\n", termSafe(st))
	}
	var stored [][2]string
	for _, n := range needs {
		kind := "a value"
		if n.secret {
			kind = "a secret"
		}
		fmt.Fprintf(stdio.Stderr, "  it needs %s, %s: %s\n", n.name, kind, cmp.Or(shown(n.description), "(no description)"))
		if !n.secret || secretKnown(n.name) {
			continue
		}
		if f, ok := stdio.Stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			// Asked now, kept in the secret store by addServer, never
			// written to the file (docs/config.md, "Secrets").
			if v, err := readSecret(n.name, stdio); err == nil {
				stored = append(stored, [2]string{n.name, v})
			} else {
				fmt.Fprintf(stdio.Stderr, "  %s: %s; run `mcpvisor secret set %s` later\n", n.name, termSafeErr(err), n.name)
			}
		}
	}
	return addServer(spec, stored, path, stdio)
}

// secretKnown reports whether env("name") already finds a value here.
func secretKnown(name string) bool {
	if _, ok := os.LookupEnv(name); ok {
		return true
	}
	store, err := openSecrets()
	if err != nil {
		return false
	}
	_, ok, _ := store.Lookup(name)
	return ok
}

// registryClient is a client of the registry the config at path names in
// its host block, or of the official one (also without a file there).
func registryClient(path string) (*mcpregistry.Client, error) {
	if _, err := os.Stat(path); err != nil {
		return mcpregistry.New(""), nil
	}
	h, err := config.LoadHost(path)
	if err != nil {
		return nil, fmt.Errorf("reading the registry block of %s: %w", path, err)
	}
	return mcpregistry.New(h.Registry.URL), nil
}

// registryFailure says what went wrong asking the registry, and what to do.
func registryFailure(err error, c *mcpregistry.Client, path, server, version string) string {
	var re *mcpregistry.Error
	if !errors.As(err, &re) {
		return termSafeErr(err)
	}
	where := fmt.Sprintf("the MCP registry at %s", c.URL())
	setting := fmt.Sprintf("registry { url } in the host block of %s (default %s)", path, mcpregistry.DefaultURL)
	switch {
	case errors.Is(err, mcpregistry.ErrUnreachable):
		return fmt.Sprintf("cannot reach %s (%s); check the network, or %s", where, termSafeErr(re), setting)
	case errors.Is(err, mcpregistry.ErrBadAnswer):
		return fmt.Sprintf("%s did not answer as an MCP registry (%s); is %s the registry's base URL, without /v0?", where, termSafeErr(re), setting)
	case errors.Is(err, mcpregistry.ErrNotFound) && version != "" && version != "latest":
		return fmt.Sprintf("%s has no version %s of %s; `mcpvisor search -versions %s` lists its versions", where, termSafe(version), termSafe(server), termSafe(server))
	case errors.Is(err, mcpregistry.ErrNotFound):
		return fmt.Sprintf("%s has no server %s; `mcpvisor search WORD` finds servers by a part of their name", where, termSafe(server))
	default:
		return fmt.Sprintf("%s refused the request (%s)", where, termSafeErr(re))
	}
}

// need is an input server.json leaves to the user, written as env(name).
type need struct {
	name        string
	description string
	secret      bool
}

// specFromServerJSON is the server block for sj: its package of type use,
// its remote (use "remote"), or by default the first it offers that
// mcpvisor can run. It returns the inputs left to the user and what was
// chosen, in words.
func specFromServerJSON(name string, sj mcpregistry.ServerJSON, use string) (serverSpec, []need, string, error) {
	r := &resolver{}
	spec := serverSpec{name: name}
	for _, p := range sj.Packages {
		if (use != "" && use != p.RegistryType) || !slices.Contains(runnable[:3], p.RegistryType) {
			continue
		}
		if t := p.Transport.Type; t != "" && t != mcpregistry.TransportStdio {
			if use == "" {
				continue // a local HTTP server: the next offer, or a remote
			}
			return spec, nil, "", fmt.Errorf("its %s package %s serves %s on its own port, and mcpvisor add runs stdio packages; start it yourself, then: mcpvisor add %s URL", p.RegistryType, termSafe(p.Identifier), termSafe(t), name)
		}
		if err := r.pkg(&spec, p); err != nil {
			return spec, nil, "", fmt.Errorf("its %s package %s: %w", p.RegistryType, termSafe(p.Identifier), err)
		}
		return spec, r.needs, fmt.Sprintf("the %s package %s", p.RegistryType, termSafe(p.Identifier)), nil
	}
	if (use == "" || use == "remote") && len(sj.Remotes) > 0 {
		rm := sj.Remotes[0]
		for _, c := range sj.Remotes { // the first one mcpvisor can reach
			if c.Type == mcpregistry.TransportStreamableHTTP || c.Type == mcpregistry.TransportSSE {
				rm = c
				break
			}
		}
		if err := r.remote(&spec, rm); err != nil {
			return spec, nil, "", fmt.Errorf("its remote %s: %w", termSafe(rm.URL), err)
		}
		return spec, r.needs, fmt.Sprintf("the %s remote %s", termSafe(rm.Type), termSafe(rm.URL)), nil
	}
	offered := offers(sj)
	if use != "" {
		return spec, nil, "", fmt.Errorf("it offers no %s (it offers %s); pick one of those with -use", use, cmp.Or(strings.Join(offered, ", "), "nothing to run"))
	}
	return spec, nil, "", fmt.Errorf("it offers %s, and mcpvisor add runs npm, pypi and oci packages over stdio and reaches streamable-http and sse remotes; install it yourself, then: mcpvisor add %s -- COMMAND [ARGS…]", cmp.Or(strings.Join(offered, ", "), "no package and no remote"), name)
}

// offers lists what sj offers: package types, then remote types.
func offers(sj mcpregistry.ServerJSON) []string {
	var out []string
	for _, p := range sj.Packages {
		kind := p.RegistryType
		if t := p.Transport.Type; t != "" && t != mcpregistry.TransportStdio {
			kind += "(" + t + ")"
		}
		if !slices.Contains(out, kind) {
			out = append(out, kind)
		}
	}
	for _, r := range sj.Remotes {
		if k := "remote(" + r.Type + ")"; !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// resolver turns server.json inputs into values, collecting what is left
// to the user.
type resolver struct {
	needs []need
}

// pkg fills spec's command, arguments and environment from p.
func (r *resolver) pkg(spec *serverSpec, p mcpregistry.Package) error {
	if p.Identifier == "" {
		return errors.New("it has no identifier")
	}
	var env []envSpec
	for _, kv := range p.EnvironmentVariables {
		if !envVarName.MatchString(kv.Name) {
			return fmt.Errorf("environment variable %q: not a variable name", termSafe(kv.Name))
		}
		if v, ok := r.input(kv.Input, kv.Name, false); ok {
			env = append(env, envSpec{name: kv.Name, value: v})
		}
	}
	runtimeArgs, err := r.arguments(p.RuntimeArguments)
	if err != nil {
		return err
	}
	pkgArgs, err := r.arguments(p.PackageArguments)
	if err != nil {
		return err
	}
	var args []value
	switch p.RegistryType {
	case mcpregistry.TypeNPM:
		spec.command = "npx"
		args = append(args, literal("-y"))
		if base := strings.TrimRight(p.RegistryBaseURL, "/"); base != "" && base != mcpregistry.DefaultNPMRegistry {
			args = append(args, literal("--registry"), literal(base))
		}
		ident := p.Identifier
		if p.Version != "" {
			ident += "@" + p.Version
		}
		args = append(append(append(args, runtimeArgs...), literal(ident)), pkgArgs...)
	case mcpregistry.TypePyPI:
		spec.command = "uvx"
		if base := strings.TrimRight(p.RegistryBaseURL, "/"); base != "" && base != mcpregistry.DefaultPyPIRegistry {
			args = append(args, literal("--default-index"), literal(base+"/simple"))
		}
		ident := p.Identifier
		if p.Version != "" {
			ident += "==" + p.Version
		}
		args = append(append(append(args, runtimeArgs...), literal(ident)), pkgArgs...)
	case mcpregistry.TypeOCI:
		spec.command = "docker"
		args = append(append(args, literal("run"), literal("-i"), literal("--rm")), runtimeArgs...)
		for _, e := range env {
			// docker passes a variable on only when told to: -e NAME takes
			// its value from docker's own environment, the block's env.
			args = append(args, literal("-e"), literal(e.name))
		}
		image := p.Identifier
		if last := image[strings.LastIndex(image, "/")+1:]; p.Version != "" && !strings.ContainsAny(last, ":@") {
			image += ":" + p.Version
		}
		args = append(append(args, literal(image)), pkgArgs...)
	}
	spec.args, spec.env = args, env
	return nil
}

// remote fills spec's URL, transport and headers from t.
func (r *resolver) remote(spec *serverSpec, t mcpregistry.Transport) error {
	switch t.Type {
	case mcpregistry.TransportStreamableHTTP:
	case mcpregistry.TransportSSE:
		spec.transport = string(config.TransportSSE)
	default:
		return fmt.Errorf("transport %q: mcpvisor reaches streamable-http and sse remotes", termSafe(t.Type))
	}
	if !strings.HasPrefix(t.URL, "https://") && !strings.HasPrefix(t.URL, "http://") {
		return errors.New("its url is no http:// or https:// URL")
	}
	spec.url = r.template(t.URL, t.Variables, false)
	for _, h := range t.Headers {
		if h.Name == "" || strings.ContainsAny(h.Name, " \t\r\n:") {
			return fmt.Errorf("header %q: not a header name", termSafe(h.Name))
		}
		if v, ok := r.input(h.Input, inputVar(h.Name), false); ok {
			if strings.ContainsAny(v.String(), "\r\n") {
				return fmt.Errorf("header %s: its value holds a line break", termSafe(h.Name))
			}
			spec.headers = append(spec.headers, headerSpec{name: h.Name, value: v})
		}
	}
	return nil
}

// arguments are the values of args, in order: a positional argument's
// value, a named one's name and value. An optional argument with nothing
// to say is left out.
func (r *resolver) arguments(args []mcpregistry.Argument) ([]value, error) {
	var out []value
	for _, a := range args {
		switch a.Type {
		case "positional":
			if v, ok := r.input(a.Input, inputVar(cmp.Or(a.ValueHint, "ARGUMENT")), false); ok {
				out = append(out, v)
			}
		case "named":
			if a.Name == "" {
				return nil, errors.New("a named argument without a name")
			}
			if v, ok := r.input(a.Input, inputVar(a.Name), false); ok {
				out = append(out, literal(a.Name), v)
			}
		default:
			return nil, fmt.Errorf("argument type %q: server.json arguments are positional or named", termSafe(a.Type))
		}
	}
	return out, nil
}

// input is the value of in: env(name) for a secret or a required value
// without a default (recorded as a need), its value (with its {variables}
// filled in), or its default. An optional input without either is left
// out (false).
func (r *resolver) input(in mcpregistry.Input, name string, mustHave bool) (value, bool) {
	switch {
	case in.Value != "" && strings.Contains(in.Value, "{") && len(in.Variables) > 0:
		return r.template(in.Value, in.Variables, in.IsSecret), true
	case in.IsSecret:
		r.need(name, in.Description, true)
		return envValue(name), true
	case in.Value != "":
		return literal(in.Value), true
	case in.Default != "":
		return literal(in.Default), true
	case in.IsRequired || mustHave:
		r.need(name, in.Description, false)
		return envValue(name), true
	}
	return nil, false
}

// template is s with each {variable} of vars replaced by its value; text
// in braces that names no variable stays as it is.
func (r *resolver) template(s string, vars map[string]mcpregistry.Input, secret bool) value {
	var out value
	for s != "" {
		open := strings.IndexByte(s, '{')
		end := strings.IndexByte(s[max(open, 0):], '}')
		if open < 0 || end < 0 {
			out = append(out, valuePart{text: s})
			break
		}
		end += open
		v, known := vars[s[open+1:end]]
		if !known {
			out = append(out, valuePart{text: s[:end+1]})
			s = s[end+1:]
			continue
		}
		if open > 0 {
			out = append(out, valuePart{text: s[:open]})
		}
		v.IsSecret = v.IsSecret || secret
		v.Variables = nil
		// A variable of a value that is there must have one too.
		part, _ := r.input(v, inputVar(s[open+1:end]), true)
		out = append(out, part...)
		s = s[end+1:]
	}
	// Adjacent literal parts read better as one.
	merged := value{}
	for _, p := range out {
		if n := len(merged); n > 0 && p.env == "" && merged[n-1].env == "" {
			merged[n-1].text += p.text
			continue
		}
		merged = append(merged, p)
	}
	return merged
}

// need records that name is left to the user, once.
func (r *resolver) need(name, description string, secret bool) {
	for i, n := range r.needs {
		if n.name == name {
			r.needs[i].secret = n.secret || secret
			return
		}
	}
	r.needs = append(r.needs, need{name: name, description: description, secret: secret})
}

// inputVar is the environment variable an input named s is read from:
// "--api-key" → API_KEY, "X-Api-Key" → X_API_KEY, "tenant_id" → TENANT_ID.
func inputVar(s string) string {
	var b strings.Builder
	for _, r := range strings.TrimLeft(s, "-_") {
		switch {
		case r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)):
			b.WriteRune(unicode.ToUpper(r))
		default:
			b.WriteByte('_')
		}
	}
	n := strings.Trim(b.String(), "_")
	if n == "" {
		return "VALUE"
	}
	if n[0] >= '0' && n[0] <= '9' {
		n = "_" + n
	}
	return n
}

// shown is a registry text fit for a terminal line: escaped, on one line,
// bounded.
func shown(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > maxShownDescription {
		s = string(r[:maxShownDescription]) + "…"
	}
	return termSafe(s)
}

// flagGiven reports whether the flag name is among args before a "--".
func flagGiven(args []string, name string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if f := strings.TrimLeft(a, "-"); strings.HasPrefix(a, "-") && (f == name || strings.HasPrefix(f, name+"=")) {
			return true
		}
	}
	return false
}
