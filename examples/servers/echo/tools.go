package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/examples/servers/internal/serve"
)

// The JSON-RPC error the jsonrpc_error tool returns. The code is outside the
// ranges JSON-RPC and MCP reserve, so a proxy that rewrites it is caught.
const (
	customErrorCode    = -32042
	customErrorMessage = "custom failure"
	customErrorData    = `{"detail":"requested by jsonrpc_error"}`
)

// crashExitCode is the exit status of the crash tool, distinct from the
// status of a failed start (1) or bad usage (2).
const crashExitCode = 3

// Limits that keep a mistyped argument from tying the server up.
const (
	maxProgressSteps = 10000
	maxStepInterval  = time.Minute
)

// Media returned by the image tool: a 1x1 PNG and 8 samples of 8 kHz silence.
var (
	pngData = mustBase64("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")
	wavData = mustBase64("UklGRiwAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQgAAACAgICAgICAgA==")
)

func mustBase64(s string) []byte {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func newServer(f *serve.Flags) *mcp.Server {
	server := mcp.NewServer(&mcp.Implementation{Name: "echo", Version: "0.1.0"}, nil)

	mcp.AddTool(server, &mcp.Tool{
		Name:        "echo",
		Description: "Returns text unchanged.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, echo)
	mcp.AddTool(server, &mcp.Tool{
		Name:        "add",
		Description: "Adds a and b; the sum is returned as structured content.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, add)
	mcp.AddTool(server, &mcp.Tool{
		Name:        "fail",
		Description: "Returns a tool error (isError: true) carrying message.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, fail)
	mcp.AddTool(server, &mcp.Tool{
		Name:        "jsonrpc_error",
		Description: fmt.Sprintf("Fails with JSON-RPC error %d %q and data %s.", customErrorCode, customErrorMessage, customErrorData),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, jsonrpcError)
	mcp.AddTool(server, &mcp.Tool{
		Name:        "image",
		Description: "Returns image, audio, resource_link and embedded resource content, with _meta.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, image)
	serve.AddSleepTool(server)
	serve.AddPIDTool(server)
	serve.AddHangTool(server)
	mcp.AddTool(server, &mcp.Tool{
		Name:        "crash",
		Description: fmt.Sprintf("Exits the server process with code %d while the call is in flight.", crashExitCode),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: false},
	}, crash)
	mcp.AddTool(server, &mcp.Tool{
		Name:        "progress",
		Description: "Sends steps progress notifications using the request's progress token, then returns.",
	}, progress)
	serve.AddRootsTool(server, "roots")
	mcp.AddTool(server, &mcp.Tool{
		Name:        "meta",
		Description: "Returns, as JSON, the request's _meta and the traceparent HTTP header it arrived with (empty over stdio).",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, meta)
	serve.AddExtraTool(server, f)
	if f.Big {
		serve.AddBig(server)
	}
	return server
}

// metaOutput is what the meta tool returns: what a proxy passed along.
type metaOutput struct {
	Meta              map[string]any `json:"meta"`
	TraceparentHeader string         `json:"traceparent_header"`
}

func meta(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
	out := metaOutput{Meta: req.Params.Meta}
	if req.Extra != nil && req.Extra.Header != nil {
		out.TraceparentHeader = req.Extra.Header.Get("traceparent")
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, nil, err
	}
	return &mcp.CallToolResult{Content: text(string(b))}, nil, nil
}

func text(s string) []mcp.Content { return []mcp.Content{&mcp.TextContent{Text: s}} }

type echoInput struct {
	Text string `json:"text" jsonschema:"the text to return"`
}

func echo(_ context.Context, _ *mcp.CallToolRequest, in echoInput) (*mcp.CallToolResult, any, error) {
	return &mcp.CallToolResult{Content: text(in.Text)}, nil, nil
}

type addInput struct {
	A float64 `json:"a" jsonschema:"first addend"`
	B float64 `json:"b" jsonschema:"second addend"`
}

type addOutput struct {
	Sum float64 `json:"sum" jsonschema:"a + b"`
}

// add leaves Content empty so the SDK fills it with the structured output
// serialized as JSON text, the fallback the spec recommends.
func add(_ context.Context, _ *mcp.CallToolRequest, in addInput) (*mcp.CallToolResult, addOutput, error) {
	return nil, addOutput{Sum: in.A + in.B}, nil
}

type failInput struct {
	Message string `json:"message" jsonschema:"the error text to return"`
}

func fail(_ context.Context, _ *mcp.CallToolRequest, in failInput) (*mcp.CallToolResult, any, error) {
	return &mcp.CallToolResult{IsError: true, Content: text(in.Message)}, nil, nil
}

func jsonrpcError(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
	// A *jsonrpc.Error is sent as a JSON-RPC error response; any other error
	// would become an isError result.
	return nil, nil, &jsonrpc.Error{
		Code:    customErrorCode,
		Message: customErrorMessage,
		Data:    json.RawMessage(customErrorData),
	}
}

func image(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
	return &mcp.CallToolResult{
		Meta: mcp.Meta{"example.mcpvisor/result": "image"},
		Content: []mcp.Content{
			&mcp.ImageContent{
				Data:        pngData,
				MIMEType:    "image/png",
				Meta:        mcp.Meta{"example.mcpvisor/content": "image"},
				Annotations: &mcp.Annotations{Audience: []mcp.Role{"user"}, Priority: 0.5},
			},
			&mcp.AudioContent{
				Data:     wavData,
				MIMEType: "audio/wav",
				Meta:     mcp.Meta{"example.mcpvisor/content": "audio"},
			},
			&mcp.ResourceLink{
				URI:         "echo://resources/readme",
				Name:        "readme",
				Title:       "Read me",
				Description: "A link to a resource.",
				MIMEType:    "text/plain",
				Meta:        mcp.Meta{"example.mcpvisor/content": "resource_link"},
			},
			&mcp.EmbeddedResource{
				Resource: &mcp.ResourceContents{
					URI:      "echo://resources/embedded",
					MIMEType: "text/plain",
					Text:     "embedded resource text",
				},
				Meta: mcp.Meta{"example.mcpvisor/content": "resource"},
			},
		},
	}, nil, nil
}

func crash(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
	fmt.Fprintf(os.Stderr, "crash requested; exiting with code %d\n", crashExitCode)
	os.Exit(crashExitCode)
	return nil, nil, errors.New("unreachable")
}

type progressInput struct {
	Steps      int `json:"steps" jsonschema:"how many progress notifications to send"`
	IntervalMs int `json:"interval_ms,omitempty" jsonschema:"pause between notifications, in milliseconds (default 0)"`
}

// progress reports progress only when the caller asked for it with a progress
// token; the final result is the same either way.
func progress(ctx context.Context, req *mcp.CallToolRequest, in progressInput) (*mcp.CallToolResult, any, error) {
	interval := time.Duration(in.IntervalMs) * time.Millisecond
	if in.Steps < 0 || in.Steps > maxProgressSteps {
		return nil, nil, fmt.Errorf("steps must be between 0 and %d", maxProgressSteps)
	}
	if in.IntervalMs < 0 || interval > maxStepInterval {
		return nil, nil, fmt.Errorf("interval_ms must be between 0 and %d", maxStepInterval.Milliseconds())
	}
	token := req.Params.GetProgressToken()
	for i := 1; i <= in.Steps; i++ {
		if i > 1 && interval > 0 {
			select {
			case <-time.After(interval):
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		}
		if token == nil {
			continue
		}
		err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
			ProgressToken: token,
			Progress:      float64(i),
			Total:         float64(in.Steps),
			Message:       fmt.Sprintf("step %d of %d", i, in.Steps),
		})
		if err != nil {
			return nil, nil, fmt.Errorf("sending progress: %w", err)
		}
	}
	return &mcp.CallToolResult{Content: text(fmt.Sprintf("done %d steps", in.Steps))}, nil, nil
}
