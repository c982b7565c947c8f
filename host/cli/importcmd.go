package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
)

// mcpServersFile is the part of Claude Desktop's claude_desktop_config.json,
// Claude Code's .mcp.json and Cursor's mcp.json that names MCP servers:
// they share the shape.
type mcpServersFile struct {
	MCPServers map[string]importedServer `json:"mcpServers"`
}

type importedServer struct {
	Type    string            `json:"type"` // "stdio", "http", "streamable-http", "sse"
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

var (
	// secretName matches names of values that hold secrets.
	secretName = regexp.MustCompile(`(?i)(token|secret|key|password|passwd|credential|auth|cookie|session)`)
	// secretValue matches values that look like credentials whatever
	// their name: long runs of token characters, known key prefixes.
	secretValue = regexp.MustCompile(`^(?:(?:Bearer|Basic|Token)\s+)?(?:sk-|ghp_|gho_|github_pat_|xox[abp]-|AKIA|AIza|glpat-)?[A-Za-z0-9_\-\.=+/]{20,}$`)
	// envName turns a server and key into an environment variable name.
	envNameChars = regexp.MustCompile(`[^A-Z0-9]+`)
	// bareName is a server label HCL accepts unquoted in a reference.
	labelChars = regexp.MustCompile(`[^A-Za-z0-9_-]+`)
)

// importCmd prints the config.hcl equivalent of a Claude Desktop, Claude
// Code or Cursor MCP configuration file.
func importCmd(args []string, stdio IO) int {
	fs, _ := newFlags("import", stdio)
	file, ok := parseOneArg(fs, args, stdio, "mcpvisor import FILE   (claude_desktop_config.json, .mcp.json or Cursor's mcp.json); prints config.hcl")
	if !ok {
		return ExitUsage
	}
	data, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor import: %v\n", err)
		return ExitRuntime
	}
	var f mcpServersFile
	if err := json.Unmarshal(data, &f); err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor import: %s is not a JSON MCP client configuration: %v\n", file, err)
		return ExitUsage
	}
	if len(f.MCPServers) == 0 {
		fmt.Fprintf(stdio.Stderr, "mcpvisor import: %s has no \"mcpServers\" entries to import\n", file)
		return ExitUsage
	}
	out, vars, err := renderHCL(file, f)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor import: %v\n", err)
		return ExitUsage
	}
	fmt.Fprint(stdio.Stdout, out)
	if len(vars) > 0 {
		fmt.Fprintf(stdio.Stderr, "mcpvisor import: set %s before running mcpvisor (their values stay in %s, not in the HCL)\n", strings.Join(vars, ", "), file)
	}
	return ExitOK
}

// renderHCL writes the servers of f as HCL server blocks, turning values
// that look secret into env() references. It returns the environment
// variables those need.
func renderHCL(source string, f mcpServersFile) (string, []string, error) {
	names := make([]string, 0, len(f.MCPServers))
	for name := range f.MCPServers {
		names = append(names, name)
	}
	sort.Strings(names)

	var b strings.Builder
	var vars []string
	secret := func(server, key, value string) string {
		if !secretName.MatchString(key) && !secretValue.MatchString(value) {
			return hclQuote(value)
		}
		v := envNameChars.ReplaceAllString(strings.ToUpper(server+"_"+key), "_")
		v = strings.Trim(v, "_")
		vars = append(vars, v)
		// Keep a scheme in front of a header's credential: the variable
		// holds only the secret part.
		if scheme, _, ok := strings.Cut(value, " "); ok && (strings.EqualFold(scheme, "Bearer") || strings.EqualFold(scheme, "Basic") || strings.EqualFold(scheme, "Token")) {
			return fmt.Sprintf(`"%s ${env(%q)}"`, scheme, v)
		}
		return fmt.Sprintf("env(%q)", v)
	}

	fmt.Fprintf(&b, "# Imported from %s by `mcpvisor import`.\n", source)
	for _, name := range names {
		s := f.MCPServers[name]
		label := labelChars.ReplaceAllString(name, "-")
		fmt.Fprintf(&b, "\nserver %q {\n", label)
		switch {
		case s.Command != "":
			fmt.Fprintf(&b, "  command = %s\n", hclQuote(s.Command))
			if len(s.Args) > 0 {
				quoted := make([]string, len(s.Args))
				for i, a := range s.Args {
					quoted[i] = hclQuote(a)
				}
				fmt.Fprintf(&b, "  args    = [%s]\n", strings.Join(quoted, ", "))
			}
			writeMap(&b, "env", label, s.Env, secret)
		case s.URL != "":
			fmt.Fprintf(&b, "  url     = %s\n", hclQuote(s.URL))
			if strings.EqualFold(s.Type, "sse") {
				b.WriteString("  transport = \"sse\"\n")
			}
			writeMap(&b, "headers", label, s.Headers, secret)
		default:
			return "", nil, fmt.Errorf("server %q has neither command nor url", name)
		}
		b.WriteString("}\n")
	}
	if len(vars) > 0 {
		sort.Strings(vars)
		fmt.Fprintf(&b, "\n# Set these environment variables for mcpvisor (the values were in %s):\n", source)
		for _, v := range vars {
			fmt.Fprintf(&b, "#   %s\n", v)
		}
	}
	return b.String(), vars, nil
}

func writeMap(b *strings.Builder, attr, server string, m map[string]string, value func(server, key, value string) string) {
	if len(m) == 0 {
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(b, "  %s = {\n", attr)
	for _, k := range keys {
		fmt.Fprintf(b, "    %s = %s\n", hclQuote(k), value(server, k, m[k]))
	}
	b.WriteString("  }\n")
}

// hclQuote quotes s as an HCL string literal; "${" and "%{" would start a
// template sequence, so they are escaped.
func hclQuote(s string) string {
	q, _ := json.Marshal(s)
	out := strings.ReplaceAll(string(q), "${", "$${")
	return strings.ReplaceAll(out, "%{", "%%{")
}
