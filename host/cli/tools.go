package cli

// The tools command.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"text/tabwriter"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host"
)

func toolsCmd(args []string, stdio IO) int {
	fs, path := newFlags("tools", stdio)
	asJSON := fs.Bool("json", false, "print JSON")
	if !parseNoArgs(fs, args, stdio) {
		return ExitUsage
	}
	paths, code := runningConfigs("tools", *path, fs, false, stdio)
	if paths == nil {
		return code
	}
	*path = paths[0]
	var tools []host.Tool
	if t, ok := runningHost(*path, stdio); ok {
		ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		defer cancel()
		if tools, err := fetchTools(ctx, t); err == nil {
			return printTools(stdio, tools, *asJSON)
		} else if !errors.Is(err, errNoToolsEndpoint) {
			fmt.Fprintf(stdio.Stderr, "mcpvisor tools: %s\n", termSafeErr(err))
			return ExitRuntime
		}
		// An older host: tools/list, which names no server.
		cs, err := t.connect(ctx)
		if err != nil {
			fmt.Fprintf(stdio.Stderr, "mcpvisor tools: %s\n", termSafeErr(err))
			return ExitRuntime
		}
		defer cs.Close()
		for tool, err := range cs.Tools(ctx, nil) {
			if err != nil {
				fmt.Fprintf(stdio.Stderr, "mcpvisor tools: listing the tools of %s: %s\n", t.name, termSafeErr(err))
				return ExitRuntime
			}
			tools = append(tools, host.Tool{Tool: tool})
		}
	} else {
		h, code := startOneShot(*path, stdio)
		if h == nil {
			return code
		}
		defer closeHost(h)
		tools = h.Tools()
	}
	return printTools(stdio, tools, *asJSON)
}

// errNoToolsEndpoint is fetchTools' error for a host without GET /tools.
var errNoToolsEndpoint = errors.New("no /tools endpoint")

// fetchTools reads the exposed tools, with their servers, from t.
func fetchTools(ctx context.Context, t target) ([]host.Tool, error) {
	resp, err := t.do(ctx, http.MethodGet, "/tools")
	if err != nil {
		return nil, fmt.Errorf("no host answering at %s: %v", t.name, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
		return nil, errNoToolsEndpoint
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%s answered %s%s", t.name, termSafe(resp.Status), authHint(resp.StatusCode))
	}
	var list []host.ExposedTool
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, fmt.Errorf("unreadable answer from %s: %v", t.name, err)
	}
	tools := make([]host.Tool, 0, len(list))
	for _, e := range list {
		tools = append(tools, host.Tool{Tool: &mcp.Tool{Name: e.Name, Description: e.Description}, Server: e.Server, Original: e.Original})
	}
	return tools, nil
}

// printTools prints the tools as a table or JSON.
func printTools(stdio IO, tools []host.Tool, asJSON bool) int {
	if asJSON {
		type row struct {
			Name        string `json:"name"`
			Server      string `json:"server,omitempty"`
			Original    string `json:"original,omitempty"`
			Description string `json:"description,omitempty"`
		}
		rows := []row{}
		for _, t := range tools {
			rows = append(rows, row{t.Tool.Name, t.Server, t.Original, t.Tool.Description})
		}
		writeJSON(stdio.Stdout, rows)
		return ExitOK
	}
	tw := tabwriter.NewWriter(stdio.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tSERVER\tDESCRIPTION")
	for _, t := range tools {
		desc, _, _ := strings.Cut(t.Tool.Description, "\n")
		fmt.Fprintf(tw, "%s\t%s\t%s\n", termSafe(t.Tool.Name), termSafe(t.Server), termSafe(desc))
	}
	tw.Flush()
	return ExitOK
}
