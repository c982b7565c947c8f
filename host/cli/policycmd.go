package cli

// The policy command (policy check): explains, from the configuration
// file alone, what the host's policies decide for a caller (docs/auth.md).

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/mcpvisor/mcpvisor/host"
	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/identity"
	"github.com/mcpvisor/mcpvisor/host/internal/policy"
)

const policyUsage = `Usage: mcpvisor policy <command> [options]

Commands:
  check   explain what the configuration's policies decide for a caller and
          a tool, prompt or resource: allowed or denied, and by which rule
`

func policyCmd(args []string, stdio IO) int {
	if len(args) == 0 {
		fmt.Fprint(stdio.Stderr, policyUsage)
		return ExitUsage
	}
	switch args[0] {
	case "check":
		return policyCheckCmd(args[1:], stdio)
	case "help", "-h", "-help", "--help":
		writeHelp(stdio.Stdout, "policy", nil)
		return ExitOK
	}
	hint := ""
	if s := suggest(args[0], []string{"check"}); s != "" {
		hint = fmt.Sprintf("; did you mean %q?", s)
	}
	fmt.Fprintf(stdio.Stderr, "mcpvisor policy: unknown command %q%s\n\n%s", termSafe(args[0]), hint, policyUsage)
	return ExitUsage
}

func policyCheckCmd(args []string, stdio IO) int {
	fs, path := newFlags("policy check", stdio)
	prompt := fs.Bool("prompt", false, "NAME is a prompt, not a tool")
	resource := fs.Bool("resource", false, "NAME is a resource URI, not a tool")
	operator := fs.Bool("operator", false, "no NAME: whether the caller may use the operator endpoints (/control/*, the console /ui)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return ExitUsage
	}
	if *operator {
		if *prompt || *resource || len(pos) == 0 {
			fmt.Fprintf(stdio.Stderr, "mcpvisor policy check: -operator wants SUBJECT... and no NAME, such as: mcpvisor policy check -operator sub:alice group:oncall\n")
			return ExitUsage
		}
		return operatorCheck(*path, pos, stdio)
	}
	if len(pos) < 2 {
		fmt.Fprintf(stdio.Stderr, "mcpvisor policy check: want SUBJECT... NAME, such as: mcpvisor policy check group:analysts github__delete_repo\n")
		return ExitUsage
	}
	if *prompt && *resource {
		fmt.Fprintf(stdio.Stderr, "mcpvisor policy check: -prompt and -resource exclude each other\n")
		return ExitUsage
	}
	kind := policy.Tool
	switch {
	case *prompt:
		kind = policy.Prompt
	case *resource:
		kind = policy.Resource
	}
	name := pos[len(pos)-1]
	cfg, ok := loadConfig(*path, stdio)
	if !ok {
		return ExitUsage
	}
	who, err := callerOf(pos[:len(pos)-1], cfg.Host.StdioSubject)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor policy check: %s\n", err)
		return ExitUsage
	}
	e := policy.New(cfg.Policies, cfg.Host.StdioSubject, nil)
	if e == nil {
		fmt.Fprintf(stdio.Stdout, "allow: %s %q for %s\n  decided by: %s has no policy blocks, so every caller may use everything\n", kind, name, describeCaller(who), *path)
		fmt.Fprintf(stdio.Stdout, "  operator: %s\n", operatorLine(e.Operator(who)))
		return ExitOK
	}
	d := e.Decide(who, kind, name)
	verdict, code := "allow", ExitOK
	if !d.Allowed {
		verdict, code = "deny", ExitRuntime
	}
	fmt.Fprintf(stdio.Stdout, "%s: %s %q for %s\n  decided by: %s\n", verdict, kind, name, describeCaller(who), d.Rule)
	applying, limits := e.Explain(who, kind, name)
	if len(applying) > 0 {
		fmt.Fprintf(stdio.Stdout, "  policies that apply: %s\n", strings.Join(applying, ", "))
	}
	if d.Allowed {
		for _, l := range limits {
			fmt.Fprintf(stdio.Stdout, "  rate limit: %s\n", l)
		}
	}
	fmt.Fprintf(stdio.Stdout, "  operator: %s\n", operatorLine(e.Operator(who)))
	if kind == policy.Tool {
		renamedTools(*path, cfg, stdio)
	}
	return code
}

// maxToolsAnswer bounds the GET /tools answer renamedTools reads.
const maxToolsAnswer = 16 << 20

// renamedTools reports, when a running host serves the file, every tool
// it now exposes under another name than when it loaded its policies (a
// clash suffix came or went): a policy glob written for the old name may
// no longer mean the tool (docs/auth.md, "Names a policy matches"). With
// no running host there is nothing to report.
func renamedTools(path string, cfg *config.Config, stdio IO) {
	ts, err := runningHosts(path, cmp.Or(os.Getenv("MCPVISOR_TOKEN"), cfg.Host.BearerToken))
	if err != nil || len(ts) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	resp, err := ts[0].do(ctx, http.MethodGet, "/tools")
	if err != nil {
		return
	}
	defer resp.Body.Close()
	var list []host.ExposedTool
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, maxToolsAnswer)).Decode(&list) != nil {
		return
	}
	for _, t := range list {
		if t.RenamedFrom != "" {
			fmt.Fprintf(stdio.Stdout, "  renamed: the running host (%s) exposes tool %q of server %q as %s, not %s as when it loaded its policies; check that they still mean it\n",
				termSafe(ts[0].name), termSafe(t.Original), termSafe(t.Server), termSafe(t.Name), termSafe(t.RenamedFrom))
		}
	}
}

// operatorCheck is `policy check -operator SUBJECT...`: whether the caller
// may use the operator endpoints, exit 0 yes, 1 no.
func operatorCheck(path string, claims []string, stdio IO) int {
	cfg, ok := loadConfig(path, stdio)
	if !ok {
		return ExitUsage
	}
	who, err := callerOf(claims, cfg.Host.StdioSubject)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcpvisor policy check: %s\n", err)
		return ExitUsage
	}
	e := policy.New(cfg.Policies, cfg.Host.StdioSubject, nil)
	d := e.Operator(who)
	verdict, code := "allow", ExitOK
	if !d.Allowed {
		verdict, code = "deny", ExitRuntime
	}
	fmt.Fprintf(stdio.Stdout, "%s: the operator endpoints (/control/*, the console /ui) for %s\n  decided by: %s\n", verdict, describeCaller(who), d.Rule)
	if applying, _ := e.Explain(who, policy.Tool, ""); len(applying) > 0 {
		fmt.Fprintf(stdio.Stdout, "  policies that apply: %s\n", strings.Join(applying, ", "))
	}
	if !d.Allowed {
		fmt.Fprintf(stdio.Stdout, "  to allow: add operator = true to a policy whose subjects include the caller (docs/auth.md)\n")
	}
	return code
}

// operatorLine says whether a caller is an operator, and why.
func operatorLine(d policy.Decision) string {
	if d.Allowed {
		return "yes, it may use /control/* and the console (" + d.Rule + ")"
	}
	return "no, /control/* and the console refuse it (" + d.Rule + ")"
}

// callerOf builds the caller that claims describe: sub:ID, email:ADDRESS,
// group:NAME (any number), client:ID for an OIDC subject; token, local
// or anonymous alone.
func callerOf(claims []string, stdioSubject string) (*identity.Subject, error) {
	if len(claims) == 1 {
		switch claims[0] {
		case config.SubjectToken:
			return &identity.Subject{Via: identity.ViaToken}, nil
		case config.SubjectLocal:
			return policy.LocalSubject(stdioSubject), nil
		case config.SubjectAnonymous:
			return nil, nil
		}
	}
	s := &identity.Subject{Via: identity.ViaOIDC}
	for _, c := range claims {
		kind, value, err := config.ParseSubject(c)
		if err != nil {
			return nil, err
		}
		switch kind {
		case config.SubjectID:
			s.ID = value
		case config.SubjectEmail:
			// A claim the check describes is one the provider verified
			// (email_verified); an unverified email matches no email:
			// selector on the host (docs/auth.md).
			verified := true
			s.Email, s.EmailVerified = value, &verified
		case config.SubjectGroup:
			s.Groups = append(s.Groups, value)
		case config.SubjectClient:
			s.Client = value
		default:
			return nil, fmt.Errorf("%q describes a whole caller; give it alone, or describe a token's claims with the kinds sub, email, group and client", c)
		}
	}
	return s, nil
}

// describeCaller names a caller with its claims.
func describeCaller(s *identity.Subject) string {
	if s == nil || s.Via != identity.ViaOIDC {
		return policy.Describe(s)
	}
	var parts []string
	if s.ID != "" {
		parts = append(parts, "sub:"+s.ID)
	}
	if s.Email != "" {
		parts = append(parts, "email:"+s.Email)
	}
	for _, g := range s.Groups {
		parts = append(parts, "group:"+g)
	}
	if s.Client != "" {
		parts = append(parts, "client:"+s.Client)
	}
	return "a token with " + strings.Join(parts, " ")
}
