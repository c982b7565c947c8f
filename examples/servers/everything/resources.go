package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/examples/servers/internal/serve"
)

// Resource URIs the suite reads and subscribes to.
const (
	staticTextURI   = "test://static-text"
	staticBinaryURI = "test://static-binary"
	templateURI     = "test://template/{id}/data"
	watchedURI      = "test://watched-resource"
)

const staticText = "This is the content of the static text resource."

// templatePrefix and templateSuffix surround {id} in templateURI.
const (
	templatePrefix = "test://template/"
	templateSuffix = "/data"
)

// templateIDs are the ids completion/complete suggests for {id}.
var templateIDs = []string{"123", "456", "789"}

// everything holds the server's only mutable state: the version of the
// watched resource and who subscribed to it.
type everything struct {
	server *mcp.Server

	mu      sync.Mutex
	version int // of test://watched-resource, bumped by update_watched_resource
}

func newServer(f *serve.Flags) *mcp.Server {
	e := &everything{}
	e.server = mcp.NewServer(&mcp.Implementation{Name: "everything", Title: "mcpvisor conformance example", Version: "0.1.0"}, &mcp.ServerOptions{
		CompletionHandler: complete,
		SubscribeHandler: func(_ context.Context, req *mcp.SubscribeRequest) error {
			return checkSubscribable(req.Params.URI)
		},
		UnsubscribeHandler: func(_ context.Context, req *mcp.UnsubscribeRequest) error {
			return checkSubscribable(req.Params.URI)
		},
	})
	e.addTools(f)
	e.addResources()
	addPrompts(e.server)
	return e.server
}

func (e *everything) addResources() {
	s := e.server
	s.AddResource(&mcp.Resource{
		URI:         staticTextURI,
		Name:        "static-text",
		Description: "A static text resource.",
		MIMEType:    "text/plain",
	}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return contents(&mcp.ResourceContents{URI: staticTextURI, MIMEType: "text/plain", Text: staticText}), nil
	})
	s.AddResource(&mcp.Resource{
		URI:         staticBinaryURI,
		Name:        "static-binary",
		Description: "A static binary resource (a 1x1 PNG).",
		MIMEType:    "image/png",
	}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return contents(&mcp.ResourceContents{URI: staticBinaryURI, MIMEType: "image/png", Blob: pngData}), nil
	})
	s.AddResourceTemplate(&mcp.ResourceTemplate{
		URITemplate: templateURI,
		Name:        "template",
		Description: "JSON data for the id in the URI.",
		MIMEType:    "application/json",
	}, readTemplate)
	s.AddResource(&mcp.Resource{
		URI:         watchedURI,
		Name:        "watched-resource",
		Description: "A resource that changes when update_watched_resource is called; subscribe to hear about it.",
		MIMEType:    "text/plain",
	}, e.readWatched)
}

func contents(c *mcp.ResourceContents) *mcp.ReadResourceResult {
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{c}}
}

func readTemplate(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	id, ok := strings.CutPrefix(uri, templatePrefix)
	if ok {
		id, ok = strings.CutSuffix(id, templateSuffix)
	}
	if !ok || id == "" || strings.Contains(id, "/") {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	if u, err := url.PathUnescape(id); err == nil {
		id = u
	}
	data, err := json.Marshal(struct {
		ID           string `json:"id"`
		TemplateTest bool   `json:"templateTest"`
		Data         string `json:"data"`
	}{id, true, "Data for ID: " + id})
	if err != nil {
		return nil, err
	}
	return contents(&mcp.ResourceContents{URI: uri, MIMEType: "application/json", Text: string(data)}), nil
}

func (e *everything) readWatched(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	e.mu.Lock()
	v := e.version
	e.mu.Unlock()
	return contents(&mcp.ResourceContents{URI: watchedURI, MIMEType: "text/plain", Text: watchedText(v)}), nil
}

func watchedText(version int) string {
	return fmt.Sprintf("Watched resource content, version %d", version)
}

// updateWatched is the update_watched_resource tool. The SDK tracks
// subscriptions per session and sends notifications/resources/updated only
// to the sessions subscribed to the URI.
func (e *everything) updateWatched(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	e.mu.Lock()
	e.version++
	v := e.version
	e.mu.Unlock()
	if err := e.server.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: watchedURI}); err != nil {
		return nil, err
	}
	return textResult(watchedText(v)), nil
}

// checkSubscribable accepts resources/subscribe and resources/unsubscribe
// for every URI the server serves; the SDK keeps the subscription table.
func checkSubscribable(uri string) error {
	switch {
	case uri == staticTextURI, uri == staticBinaryURI, uri == watchedURI:
		return nil
	case strings.HasPrefix(uri, templatePrefix) && strings.HasSuffix(uri, templateSuffix):
		return nil
	}
	return mcp.ResourceNotFoundError(uri)
}

// complete answers completion/complete: the arguments of
// test_prompt_with_arguments and {id} of the template get the candidates
// that start with what was typed; anything else gets no values (the result
// always carries a values array, as the suite requires).
func complete(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	var candidates []string
	ref, arg := req.Params.Ref, req.Params.Argument
	if ref == nil {
		ref = &mcp.CompleteReference{}
	}
	switch {
	case ref.Type == "ref/prompt" && ref.Name == "test_prompt_with_arguments":
		candidates = promptArgValues[arg.Name]
	case ref.Type == "ref/resource" && ref.URI == templateURI && arg.Name == "id":
		candidates = templateIDs
	}
	values := []string{}
	for _, c := range candidates {
		if strings.HasPrefix(c, arg.Value) {
			values = append(values, c)
		}
	}
	slices.Sort(values)
	return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: values, Total: len(values)}}, nil
}
