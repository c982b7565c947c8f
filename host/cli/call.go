package cli

// The call command.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host"
)

func callCmd(args []string, stdio IO) int {
	fs, path := newFlags("call", stdio)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return ExitUsage
	}
	if len(pos) < 1 || len(pos) > 2 {
		fmt.Fprintf(stdio.Stderr, "usage: %s\n", commands["call"].synopsis)
		if len(pos) > 2 {
			fmt.Fprintf(stdio.Stderr, "mcpvisor call: argument 3 (%q) is one too many: put all arguments in one JSON object, quoted for the shell\n", termSafe(pos[2]))
		}
		return ExitUsage
	}
	tool := pos[0]
	var raw json.RawMessage
	if len(pos) == 2 {
		raw = json.RawMessage(pos[1])
		if msg := checkJSONObject(pos[1]); msg != "" {
			fmt.Fprintf(stdio.Stderr, "mcpvisor call: argument 2 (JSON arguments) must be a JSON object: %s\n", msg)
			return ExitUsage
		}
	}
	paths, code := runningConfigs("call", *path, fs, false, stdio)
	if paths == nil {
		return code
	}
	*path = paths[0]
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var res *mcp.CallToolResult
	if t, ok := runningHost(*path, stdio); ok {
		cs, err := t.connect(ctx)
		if err != nil {
			fmt.Fprintf(stdio.Stderr, "mcpvisor call: %s\n", termSafeErr(err))
			return ExitRuntime
		}
		defer cs.Close()
		var args any
		if raw != nil {
			args = raw
		}
		if res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args}); err != nil {
			fmt.Fprintf(stdio.Stderr, "mcpvisor call: %s\n", termSafeErr(err))
			if strings.Contains(strings.ToLower(err.Error()), "unknown tool") {
				var names []string
				for t, err := range cs.Tools(ctx, nil) {
					if err != nil {
						break
					}
					names = append(names, t.Name)
				}
				fmt.Fprintln(stdio.Stderr, unknownToolHint(tool, names))
			}
			return ExitRuntime
		}
	} else {
		h, code := startOneShot(*path, stdio)
		if h == nil {
			return code
		}
		defer closeHost(h)
		if res, err = h.CallTool(ctx, tool, raw); err != nil {
			fmt.Fprintf(stdio.Stderr, "mcpvisor call: %s\n", termSafeErr(err))
			if errors.Is(err, host.ErrUnknownTool) {
				var names []string
				for _, t := range h.Tools() {
					names = append(names, t.Tool.Name)
				}
				fmt.Fprintln(stdio.Stderr, unknownToolHint(tool, names))
			}
			return ExitRuntime
		}
	}
	writeJSON(stdio.Stdout, res)
	if res.IsError {
		return ExitRuntime
	}
	return ExitOK
}

// checkJSONObject says what is wrong with arg as a JSON object, with where
// ("at byte 2") and the text around it; "" when it is one.
func checkJSONObject(arg string) string {
	var obj map[string]any
	err := json.Unmarshal([]byte(arg), &obj)
	if err == nil {
		if obj == nil {
			return "null is not an object; write {} for no arguments"
		}
		return ""
	}
	var offset int64 = -1
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		offset = syn.Offset
	case errors.As(err, &typ):
		return fmt.Sprintf("it is a JSON %s; write an object such as '{\"name\": \"value\"}'", typ.Value)
	}
	msg := err.Error()
	if offset < 0 || offset > int64(len(arg)) {
		return termSafe(msg)
	}
	// offset is just past the byte the decoder choked on.
	at := max(offset-1, 0)
	from := max(at-20, 0)
	to := min(at+20, int64(len(arg)))
	excerpt := termSafe(arg[from:to])
	caret := len(termSafe(arg[from:at]))
	return fmt.Sprintf("%s at byte %d\n  %s\n  %s^", termSafe(msg), at+1, excerpt, strings.Repeat(" ", caret))
}

// unknownToolHint says which tool a call to an unknown one probably meant.
func unknownToolHint(tool string, known []string) string {
	if s := suggest(tool, known); s != "" {
		return fmt.Sprintf("mcpvisor call: did you mean %q?", s)
	}
	return "mcpvisor call: run `mcpvisor tools` for the tool names"
}
