package discovery_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/discovery"
)

func tool(name, description, schema string) *mcp.Tool {
	return &mcp.Tool{Name: name, Description: description, InputSchema: json.RawMessage(schema)}
}

func names(hits []discovery.Hit) []string {
	var out []string
	for _, h := range hits {
		out = append(out, h.Tool.Name)
	}
	return out
}

func TestWords(t *testing.T) {
	for in, want := range map[string]string{
		"github__list_issues": "github  list issues",
		"listIssues":          "list issues",
		"get-tiny-image":      "get tiny image",
		"readFile2Text":       "read file2 text",
		"sequentialthinking":  "sequentialthinking",
		"HTTPServer":          "httpserver",
	} {
		if got := discovery.Words(in); got != want {
			t.Errorf("Words(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestIndex: ranking uses names, descriptions, schema text, stemming and
// synonyms; updates replace and remove; the server filter and the
// visibility filter hold; an empty query is an error.
func TestIndex(t *testing.T) {
	idx, err := discovery.NewIndex()
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	ctx := context.Background()
	add := []discovery.Tool{
		{Tool: tool("fs__write_file", "Create a new file or overwrite an existing one.", `{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string","description":"text to write"}}}`), Server: "fs", Original: "write_file"},
		{Tool: tool("fs__read_text_file", "Read the complete contents of a file as text.", `{"type":"object","properties":{"path":{"type":"string"},"head":{"type":"number","description":"only the first N lines"}}}`), Server: "fs", Original: "read_text_file"},
		{Tool: tool("gh__list_issues", "List issues in a GitHub repository.", `{"type":"object","properties":{"owner":{"type":"string"},"repo":{"type":"string"},"state":{"type":"string","enum":["open","closed"]}}}`), Server: "gh", Original: "list_issues"},
		{Tool: tool("gh__get_file_contents", "Get the contents of a file from a GitHub repository.", `{"type":"object"}`), Server: "gh", Original: "get_file_contents"},
	}
	if err := idx.Update(nil, add); err != nil {
		t.Fatal(err)
	}
	search := func(q discovery.Query, visible func(string) bool) []string {
		t.Helper()
		hits, err := idx.Search(ctx, q, visible)
		if err != nil {
			t.Fatalf("Search(%+v): %v", q, err)
		}
		return names(hits)
	}
	for query, want := range map[string]string{
		"list the open issues of a repo": "gh__list_issues",    // stemming (issues), synonym (repo)
		"save it to a file":              "fs__write_file",     // synonym (save → write)
		"first lines of a file":          "fs__read_text_file", // schema text (head's description)
		"readTextFile":                   "fs__read_text_file", // identifiers split
	} {
		if got := search(discovery.Query{Text: query}, nil); len(got) == 0 || got[0] != want {
			t.Errorf("search %q: %v; want %s first", query, got, want)
		}
	}
	if got := search(discovery.Query{Text: "file contents", Server: "fs"}, nil); slices.Contains(got, "gh__get_file_contents") || len(got) == 0 {
		t.Errorf("search narrowed to fs: %v", got)
	}
	if got := search(discovery.Query{Text: "file", Limit: 1}, nil); len(got) != 1 {
		t.Errorf("limit 1: %v", got)
	}
	hidden := func(name string) bool { return name != "fs__write_file" }
	if got := search(discovery.Query{Text: "write a file", Limit: 50}, hidden); slices.Contains(got, "fs__write_file") {
		t.Errorf("a tool the caller may not see was found: %v", got)
	}
	if _, err := idx.Search(ctx, discovery.Query{Text: "  __ "}, nil); err != discovery.ErrEmptyQuery {
		t.Errorf("empty query: %v, want ErrEmptyQuery", err)
	}

	// A removed tool is gone; a replaced one is found by its new words.
	replaced := tool("gh__list_issues", "Enumerate tickets.", `{"type":"object"}`)
	if err := idx.Update([]string{"fs__write_file"}, []discovery.Tool{{Tool: replaced, Server: "gh", Original: "list_issues"}}); err != nil {
		t.Fatal(err)
	}
	if got := search(discovery.Query{Text: "write a file", Limit: 50}, nil); slices.Contains(got, "fs__write_file") {
		t.Errorf("a removed tool was found: %v", got)
	}
	if got := search(discovery.Query{Text: "tickets"}, nil); len(got) == 0 || got[0] != "gh__list_issues" {
		t.Errorf("replaced tool by its new description: %v", got)
	}
	if idx.Len() != 3 {
		t.Errorf("Len = %d, want 3", idx.Len())
	}
}

// TestSettings: the host's mode with a server's override, pins over
// exposed names (host) and upstream names (server).
func TestSettings(t *testing.T) {
	if s := discovery.New(&config.Config{Servers: []*config.Server{{Name: "a"}}}); s != nil {
		t.Errorf("no discovery block: %v, want nil (every tool listed)", s)
	}
	cfg := &config.Config{
		Host: config.Host{Discovery: config.Discovery{Mode: config.DiscoverySearch, Pin: []string{"gh__get_*"}}},
		Servers: []*config.Server{
			{Name: "gh"},
			{Name: "fs", Discovery: config.Discovery{Mode: config.DiscoveryList}},
			{Name: "mem", Discovery: config.Discovery{Pin: []string{"read_*"}}},
		},
	}
	s := discovery.New(cfg)
	for _, c := range []struct {
		server, exposed, original string
		want                      bool
	}{
		{"gh", "gh__list_issues", "list_issues", false},
		{"gh", "gh__get_issue", "get_issue", true},
		{"fs", "fs__write_file", "write_file", true},
		{"mem", "mem__read_graph", "read_graph", true},
		{"mem", "mem__create_entities", "create_entities", false},
		{"gone", "gone__x", "x", true},
	} {
		if got := s.Listed(c.server, c.exposed, c.original); got != c.want {
			t.Errorf("Listed(%s, %s) = %v, want %v", c.server, c.exposed, got, c.want)
		}
	}
	if !s.Same(discovery.New(cfg)) || s.Same(nil) {
		t.Error("Same: a compile of the same config differs, or nil is the same")
	}
}
