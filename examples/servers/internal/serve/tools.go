package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ExtraToolPrefix is the name prefix of the tool that -tools-suffix adds.
const ExtraToolPrefix = "extra"

// ExtraInput is the input of the tool that -tools-suffix adds.
type ExtraInput struct {
	Value string `json:"value,omitempty" jsonschema:"any text; it is echoed after the tool's name"`
}

// AddExtraTool adds the tool "extra"+f.ToolsSuffix when -tools-suffix was
// given. Restarting a server with a different suffix changes its tool set,
// which is how tests check that a host re-lists and diffs tools on respawn.
func AddExtraTool(server *mcp.Server, f *Flags) {
	if f.ToolsSuffix == "" {
		return
	}
	name := ExtraToolPrefix + f.ToolsSuffix
	mcp.AddTool(server, &mcp.Tool{
		Name:        name,
		Description: "Present only when the server was started with -tools-suffix " + f.ToolsSuffix + "; returns its own name followed by value.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in ExtraInput) (*mcp.CallToolResult, any, error) {
		text := name
		if in.Value != "" {
			text += " " + in.Value
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
	})
}

// AddPIDTool adds the read-only tool "pid", which returns the process id as
// text so a test can tell that a host respawned the server.
func AddPIDTool(server *mcp.Server) {
	server.AddTool(&mcp.Tool{
		Name:        "pid",
		Description: "Returns the server's process id as text.",
		InputSchema: map[string]any{"type": "object"},
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strconv.Itoa(os.Getpid())}}}, nil
	})
}

// maxSleep keeps a mistyped argument of the sleep tool from tying the
// server up.
const maxSleep = 10 * time.Minute

// SleepInput is the input of the sleep tool.
type SleepInput struct {
	Ms int `json:"ms" jsonschema:"how long to sleep, in milliseconds"`
}

// AddSleepTool adds the tool "sleep", which waits ms milliseconds, or until
// the call is cancelled, writing "sleep canceled: <why>" to stderr then: a
// line a host's test can wait for.
func AddSleepTool(server *mcp.Server) {
	mcp.AddTool(server, &mcp.Tool{
		Name:        "sleep",
		Description: "Sleeps for ms milliseconds, or until the call is canceled.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: false},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in SleepInput) (*mcp.CallToolResult, any, error) {
		d := time.Duration(in.Ms) * time.Millisecond
		if in.Ms < 0 || d > maxSleep {
			return nil, nil, fmt.Errorf("ms must be between 0 and %d", maxSleep.Milliseconds())
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("slept %dms", in.Ms)}}}, nil, nil
		case <-ctx.Done():
			fmt.Fprintf(os.Stderr, "sleep canceled: %v\n", ctx.Err())
			return nil, nil, ctx.Err()
		}
	})
}

// AddRootsTool adds a tool named name that asks the client for its roots
// (roots/list) during the call and returns their URIs, one per line. On
// 2026-07-28, where a server may not send a request during a call, it
// asks with an input_required result instead and answers the retry.
func AddRootsTool(server *mcp.Server, name string) {
	mcp.AddTool(server, &mcp.Tool{
		Name:        name,
		Description: "Asks the client for its roots (roots/list) and returns their URIs, one per line.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		var res *mcp.ListRootsResult
		if ip := req.Session.InitializeParams(); ip != nil && ip.ProtocolVersion >= "2026-07-28" {
			answer, ok := req.Params.InputResponses["roots"].(*mcp.ListRootsResult)
			if !ok {
				return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"roots": &mcp.ListRootsParams{}}, RequestState: "roots"}, nil, nil
			}
			res = answer
		} else {
			var err error
			if res, err = req.Session.ListRoots(ctx, nil); err != nil {
				return nil, nil, err
			}
		}
		var uris []string
		for _, r := range res.Roots {
			uris = append(uris, r.URI)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Join(uris, "\n")}}}, nil, nil
	})
}

// ExpiredCode is the JSON-RPC error code of the "Session expired" answer
// of -expire-after-calls (a server-defined code, as MCP servers that
// track sessions themselves use).
const ExpiredCode = -32001

// ExpireSessions is the middleware of -expire-after-calls: each session
// answers k tools/call requests, then every request on it gets the
// JSON-RPC error "Session expired". The request is not run.
func ExpireSessions(k int) mcp.Middleware {
	var mu sync.Mutex
	calls := map[*mcp.ServerSession]int{}
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if ss, ok := req.GetSession().(*mcp.ServerSession); ok && method != "initialize" && method != "notifications/initialized" {
				mu.Lock()
				n := calls[ss]
				if method == "tools/call" {
					calls[ss] = n + 1
				}
				mu.Unlock()
				if n >= k {
					return nil, &jsonrpc.Error{Code: ExpiredCode, Message: "Session expired"}
				}
			}
			return next(ctx, method, req)
		}
	}
}

// AddHangTool adds the tool "hang": once called, the server answers
// nothing more, ever (not that call, no later request, no ping), while
// its process stays alive: a deadlocked server, as a host's liveness
// checks must find. Only killing the process ends it.
func AddHangTool(server *mcp.Server) {
	var hung atomic.Bool
	never := make(chan struct{})
	server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if hung.Load() {
				<-never
			}
			return next(ctx, method, req)
		}
	})
	server.AddTool(&mcp.Tool{
		Name:        "hang",
		Description: "Makes the server stop answering anything, for good, while its process stays alive (a deadlock).",
		InputSchema: map[string]any{"type": "object"},
	}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		hung.Store(true)
		<-never
		return nil, nil
	})
}

// BigInput is the input of the tool big.
type BigInput struct {
	Size int    `json:"size" jsonschema:"how many characters the text has"`
	Char string `json:"char,omitempty" jsonschema:"the character repeated; < by default"`
}

// maxBig bounds what big makes, so a mistyped size cannot exhaust memory.
const maxBig = 256 << 20

// AddBig adds the tool "big", whose result is one text of size copies of
// char ("<" by default), and the resources big://text/{size}, whose
// contents are a text of size '<'. The go-sdk's content types encode themselves with json.Marshal,
// which writes '<' as \u003c; these results are written as bytes instead,
// so a proxy's own escaping (or re-encoding) shows.
func AddBig(server *mcp.Server) {
	mcp.AddTool(server, &mcp.Tool{
		Name:        "big",
		Description: "Returns a text of size copies of char (\"<\" by default), written without HTML escaping.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, func(context.Context, *mcp.CallToolRequest, BigInput) (*mcp.CallToolResult, any, error) {
		return nil, nil, errors.New("big is answered by its middleware")
	})
	server.AddResourceTemplate(&mcp.ResourceTemplate{Name: "big", URITemplate: "big://text/{size}", MIMEType: "text/plain"},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return nil, errors.New("big://text is answered by its middleware")
		})
	server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch r := req.(type) {
			case *mcp.CallToolRequest:
				if r.Params == nil || r.Params.Name != "big" {
					break
				}
				var in BigInput
				if err := json.Unmarshal(r.Params.Arguments, &in); err != nil {
					return nil, err
				}
				return bigResult(`{"content":[{"type":"text","text":"`, in, `"}]}`)
			case *mcp.ReadResourceRequest:
				if r.Params == nil || !strings.HasPrefix(r.Params.URI, "big://text/") {
					break
				}
				in := BigInput{}
				in.Size, _ = strconv.Atoi(strings.TrimPrefix(r.Params.URI, "big://text/"))
				return bigResult(`{"contents":[{"uri":`+strconv.Quote(r.Params.URI)+`,"mimeType":"text/plain","text":"`, in, `"}]}`)
			}
			return next(ctx, method, req)
		}
	})
}

// rawResult is a result written as its bytes.
type rawResult struct {
	mcp.ResultBase
	raw []byte
}

func (r *rawResult) MarshalJSON() ([]byte, error) { return r.raw, nil }

func bigResult(head string, in BigInput, tail string) (mcp.Result, error) {
	if in.Char == "" {
		in.Char = "<"
	}
	if len(in.Char) != 1 || in.Char[0] < 0x20 || in.Char[0] == '"' || in.Char[0] == '\\' || in.Char[0] >= 0x80 {
		return nil, fmt.Errorf("char %q: one printable ASCII character other than a quote or backslash", in.Char)
	}
	if in.Size < 0 || in.Size > maxBig {
		return nil, fmt.Errorf("size %d: between 0 and %d", in.Size, maxBig)
	}
	b := make([]byte, 0, len(head)+in.Size+len(tail))
	b = append(b, head...)
	b = append(b, bytes.Repeat([]byte(in.Char), in.Size)...)
	b = append(b, tail...)
	return &rawResult{raw: b}, nil
}
