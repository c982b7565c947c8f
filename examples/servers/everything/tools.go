package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/examples/servers/internal/serve"
)

// Texts the suite's scenarios describe; a proxy that alters them is caught by
// the unit tests, which compare whole results.
const (
	simpleText    = "This is a simple text response for testing."
	errorText     = "This tool intentionally returns an error for testing"
	embeddedText  = "This is an embedded resource content."
	mixedText     = "Multiple content types test:"
	mixedResource = `{"test":"data","value":123}`
)

// stepDelay separates the log messages and progress notifications of one
// call, so a client sees them arrive while the call is still running.
const stepDelay = 50 * time.Millisecond

// reconnectWait is how long test_reconnection takes, long enough for a
// client to notice a closed stream and reconnect if the server closed it.
const reconnectWait = 100 * time.Millisecond

// Media in results: a 1x1 red PNG and a WAV file with one sample of silence.
var (
	pngData = mustBase64("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")
	wavData = mustBase64("UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=")
)

func mustBase64(s string) []byte {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// jsonSchema202012 is the input schema of json_schema_2020_12_tool. The
// suite checks that $schema, $defs and additionalProperties survive
// tools/list verbatim; the other 2020-12 keywords are there so that a proxy
// that re-encodes schemas through a narrower type is caught too.
const jsonSchema202012 = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "$defs": {
    "address": {
      "$anchor": "addressDef",
      "type": "object",
      "properties": {
        "street": {"type": "string"},
        "city": {"type": "string"}
      }
    }
  },
  "properties": {
    "name": {"type": "string"},
    "address": {"$ref": "#/$defs/address"},
    "contactMethod": {"type": "string", "enum": ["phone", "email"]},
    "phone": {"type": "string"},
    "email": {"type": "string"}
  },
  "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
  "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
  "then": {"required": ["phone"]},
  "else": {"required": ["email"]},
  "additionalProperties": false
}`

// Elicitation schemas. They are raw JSON so that keywords the SDK's schema
// type keeps only in its Extra map (enumNames) reach the client unchanged.
const (
	userInfoSchema = `{
  "type": "object",
  "properties": {
    "username": {"type": "string", "description": "User's response"},
    "email": {"type": "string", "description": "User's email address"}
  },
  "required": ["username", "email"]
}`
	defaultsSchema = `{
  "type": "object",
  "properties": {
    "name": {"type": "string", "default": "John Doe"},
    "age": {"type": "integer", "default": 30},
    "score": {"type": "number", "default": 95.5},
    "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
    "verified": {"type": "boolean", "default": true}
  }
}`
	enumsSchema = `{
  "type": "object",
  "properties": {
    "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
    "titledSingle": {"type": "string", "oneOf": [
      {"const": "value1", "title": "First Option"},
      {"const": "value2", "title": "Second Option"},
      {"const": "value3", "title": "Third Option"}
    ]},
    "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
      "enumNames": ["Option One", "Option Two", "Option Three"]},
    "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
    "titledMulti": {"type": "array", "items": {"anyOf": [
      {"const": "value1", "title": "First Choice"},
      {"const": "value2", "title": "Second Choice"},
      {"const": "value3", "title": "Third Choice"}
    ]}}
  }
}`
)

// noArgs is the input schema of the tools that take no arguments.
var noArgs = json.RawMessage(`{"type":"object"}`)

type samplingInput struct {
	Prompt string `json:"prompt" jsonschema:"the prompt to send to the client's LLM"`
}

type elicitationInput struct {
	Message string `json:"message" jsonschema:"the message to show the user"`
}

func (e *everything) addTools(f *serve.Flags) {
	s := e.server
	for _, t := range []struct {
		name, description string
		handler           mcp.ToolHandler
	}{
		{"test_simple_text", "Returns simple text content.", contentTool(&mcp.TextContent{Text: simpleText})},
		{"test_image_content", "Returns image content (a 1x1 PNG).", contentTool(&mcp.ImageContent{Data: pngData, MIMEType: "image/png"})},
		{"test_audio_content", "Returns audio content (a short WAV).", contentTool(&mcp.AudioContent{Data: wavData, MIMEType: "audio/wav"})},
		{"test_embedded_resource", "Returns an embedded text resource.", contentTool(&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
			URI: "test://embedded-resource", MIMEType: "text/plain", Text: embeddedText,
		}})},
		{"test_multiple_content_types", "Returns text, image and embedded resource content in one result.", contentTool(
			&mcp.TextContent{Text: mixedText},
			&mcp.ImageContent{Data: pngData, MIMEType: "image/png"},
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
				URI: "test://mixed-content-resource", MIMEType: "application/json", Text: mixedResource,
			}},
		)},
		{"test_tool_with_logging", "Sends three info log messages, 50ms apart, while it runs.", toolWithLogging},
		{"test_tool_with_progress", "Sends progress 0, 50 and 100 of 100, 50ms apart, with the request's progress token.", toolWithProgress},
		{"test_error_handling", "Always fails with a tool error (isError: true).", errorHandling},
		{"test_elicitation_sep1034_defaults", "Asks the client to elicit a form whose fields all have defaults (SEP-1034).", elicitTool(defaultsSchema, "Please review your profile")},
		{"test_elicitation_sep1330_enums", "Asks the client to elicit a form with all five enum schema shapes (SEP-1330).", elicitTool(enumsSchema, "Please choose options")},
		{"test_reconnection", "Stands in for the SEP-1699 reconnection test: waits 100ms and answers on the open stream (this server keeps no event store to resume from).", reconnection},
		{"update_watched_resource", "Changes test://watched-resource and notifies its subscribers.", e.updateWatched},
	} {
		s.AddTool(&mcp.Tool{Name: t.name, Description: t.description, InputSchema: noArgs}, t.handler)
	}
	s.AddTool(&mcp.Tool{
		Name:        "json_schema_2020_12_tool",
		Description: "Has an input schema using JSON Schema 2020-12 features (SEP-1613); returns the arguments it got.",
		InputSchema: json.RawMessage(jsonSchema202012),
	}, echoArguments)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_sampling",
		Description: "Asks the client for an LLM completion of prompt (sampling/createMessage) and returns it.",
	}, sampling)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "test_elicitation",
		Description: "Asks the client to elicit a username and email from the user, showing message, and returns the answer.",
	}, elicitation)
	serve.AddPIDTool(s)
	serve.AddSleepTool(s)
	serve.AddRootsTool(s, "list_roots")
	serve.AddExtraTool(s, f)
}

func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// contentTool returns a handler whose result is content.
func contentTool(content ...mcp.Content) mcp.ToolHandler {
	return func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: content}, nil
	}
}

func toolWithLogging(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	for i, msg := range []string{"Tool execution started", "Tool processing data", "Tool execution completed"} {
		if i > 0 {
			if err := sleep(ctx, stepDelay); err != nil {
				return nil, err
			}
		}
		//lint:ignore SA1019 logging is deprecated from 2026-07-28 but is what the suite tests
		if err := req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "everything", Data: msg}); err != nil {
			return nil, err
		}
	}
	return textResult("Tool with logging executed successfully"), nil
}

func toolWithProgress(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	token := req.Params.GetProgressToken()
	const total = 100
	for i, progress := range []float64{0, 50, 100} {
		if i > 0 {
			if err := sleep(ctx, stepDelay); err != nil {
				return nil, err
			}
		}
		// Without a token the client asked for no progress; the delays stay,
		// so the call takes as long either way.
		if token == nil {
			continue
		}
		if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
			ProgressToken: token,
			Progress:      progress,
			Total:         total,
			Message:       fmt.Sprintf("completed %g of %d", progress, total),
		}); err != nil {
			return nil, err
		}
	}
	return textResult(fmt.Sprintf("Tool with progress executed successfully (progress token %v)", token)), nil
}

func errorHandling(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	res := textResult(errorText)
	res.IsError = true
	return res, nil
}

func sampling(ctx context.Context, req *mcp.CallToolRequest, in samplingInput) (*mcp.CallToolResult, any, error) {
	//lint:ignore SA1019 sampling is deprecated from 2026-07-28 but is what the suite tests
	res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{
		Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: in.Prompt}}},
		MaxTokens: 100,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("sampling failed: %w", err)
	}
	text := fmt.Sprintf("(%T content)", res.Content)
	if tc, ok := res.Content.(*mcp.TextContent); ok {
		text = tc.Text
	}
	return textResult("LLM response: " + text), nil, nil
}

func elicitation(ctx context.Context, req *mcp.CallToolRequest, in elicitationInput) (*mcp.CallToolResult, any, error) {
	res, err := elicit(ctx, req, in.Message, userInfoSchema)
	if err != nil {
		return nil, nil, err
	}
	return textResult("User response: " + res), nil, nil
}

// elicitTool returns a handler that elicits a form with schema and returns
// the answer. A failed elicitation is a tool error (isError), as it is for
// the typed handlers of test_sampling and test_elicitation, not a protocol
// error.
func elicitTool(schema, message string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := elicit(ctx, req, message, schema)
		if err != nil {
			out := textResult(err.Error())
			out.IsError = true
			return out, nil
		}
		return textResult("Elicitation completed: " + res), nil
	}
}

// elicit asks the client for the form schema and describes the answer as
// "action=<action>, content=<json>".
func elicit(ctx context.Context, req *mcp.CallToolRequest, message, schema string) (string, error) {
	res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: message, RequestedSchema: json.RawMessage(schema)})
	if err != nil {
		return "", fmt.Errorf("elicitation failed: %w", err)
	}
	content, err := json.Marshal(res.Content)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("action=%s, content=%s", res.Action, content), nil
}

func echoArguments(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	args := string(req.Params.Arguments)
	if args == "" {
		args = "{}"
	}
	return textResult("arguments: " + args), nil
}

// reconnection is test_reconnection. SEP-1699 lets a server close a call's
// SSE stream and deliver the result on the stream the client resumes with
// Last-Event-ID; that needs an event store, and serve.Run configures none,
// so closing the stream (req.Extra.CloseSSEStream) would lose the result
// and hang the caller. The tool therefore answers on the open stream: the
// suite's server-sse-polling scenario then reports that the server did not
// disconnect, as INFO, not as a failure.
func reconnection(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if err := sleep(ctx, reconnectWait); err != nil {
		return nil, err
	}
	return textResult("Reconnection test completed successfully. If you received this, the client properly reconnected after stream closure."), nil
}

// sleep waits for d or until ctx is done, so a canceled call ends early.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
