package main

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// promptArgValues are the values completion/complete suggests for the
// arguments of test_prompt_with_arguments.
var promptArgValues = map[string][]string{
	"arg1": {"paris", "park", "party"},
	"arg2": {"hello", "help", "world"},
}

func addPrompts(s *mcp.Server) {
	s.AddPrompt(&mcp.Prompt{
		Name:        "test_simple_prompt",
		Title:       "Simple test prompt",
		Description: "A prompt without arguments.",
	}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{
			Description: "A simple test prompt",
			Messages:    []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "This is a simple prompt for testing."}}},
		}, nil
	})
	s.AddPrompt(&mcp.Prompt{
		Name:        "test_prompt_with_arguments",
		Title:       "Prompt with arguments",
		Description: "A prompt whose text includes its two required arguments.",
		Arguments: []*mcp.PromptArgument{
			{Name: "arg1", Description: "First test argument", Required: true},
			{Name: "arg2", Description: "Second test argument", Required: true},
		},
	}, promptWithArguments)
	s.AddPrompt(&mcp.Prompt{
		Name:        "test_prompt_with_embedded_resource",
		Title:       "Prompt with an embedded resource",
		Description: "A prompt that embeds a text resource at resourceUri.",
		Arguments: []*mcp.PromptArgument{
			{Name: "resourceUri", Description: "URI of the resource to embed", Required: true},
		},
	}, promptWithEmbeddedResource)
	s.AddPrompt(&mcp.Prompt{
		Name:        "test_prompt_with_image",
		Title:       "Prompt with an image",
		Description: "A prompt that includes image content.",
	}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{
			Description: "A prompt with an image",
			Messages: []*mcp.PromptMessage{
				{Role: "user", Content: &mcp.ImageContent{Data: pngData, MIMEType: "image/png"}},
				{Role: "user", Content: &mcp.TextContent{Text: "Please analyze the image above."}},
			},
		}, nil
	})
}

// requiredArgs returns the named prompt arguments, or an invalid-params
// error naming the first one that is missing.
func requiredArgs(req *mcp.GetPromptRequest, names ...string) ([]string, error) {
	var vals []string
	for _, n := range names {
		v, ok := req.Params.Arguments[n]
		if !ok {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("prompt %s: missing required argument %q", req.Params.Name, n)}
		}
		vals = append(vals, v)
	}
	return vals, nil
}

func promptWithArguments(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	args, err := requiredArgs(req, "arg1", "arg2")
	if err != nil {
		return nil, err
	}
	return &mcp.GetPromptResult{
		Description: "A prompt with arguments",
		Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{
			Text: fmt.Sprintf("Prompt with arguments: arg1='%s', arg2='%s'", args[0], args[1]),
		}}},
	}, nil
}

func promptWithEmbeddedResource(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	args, err := requiredArgs(req, "resourceUri")
	if err != nil {
		return nil, err
	}
	return &mcp.GetPromptResult{
		Description: "A prompt with an embedded resource",
		Messages: []*mcp.PromptMessage{
			{Role: "user", Content: &mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
				URI: args[0], MIMEType: "text/plain", Text: "Embedded resource content for testing.",
			}}},
			{Role: "user", Content: &mcp.TextContent{Text: "Please process the embedded resource above."}},
		},
	}, nil
}
