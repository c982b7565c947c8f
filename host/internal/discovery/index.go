// Package discovery is tool search for agents (docs/discovery.md): an
// in-memory full-text index of the exposed tools that follows the registry,
// and the settings that say which tools tools/list still shows when a
// server's tools are found by search instead.
//
// Design note (docs/design.md §21). The index is bleve's scorch index held
// in memory, scored with BM25. A tool is one document with four text
// fields of different weight — its name (the exposed name and the
// upstream's, split into words), its title, its description, and its input
// schema's property names and descriptions — and a keyword field, its
// server block, for a search narrowed to one server. The text fields use
// bleve's English analyzer (possessives, lower case, stop words, the
// Snowball stemmer), so "files" finds "file" and "writing" finds "write".
// A query is the disjunction of a match query per field, each boosted by
// the field's weight (Ranking), plus the same query over a small table of
// synonyms (synonyms.go) with a lower weight: a user says "save" where a tool says
// "write". The gateway feeds the index from registry changes (Apply), so a
// tool that is withdrawn (its server parked, a reload dropped it) is gone
// from search as it is from tools/list, and comes back with its server.
package discovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"unicode"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/keyword"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/standard"
	"github.com/blevesearch/bleve/v2/analysis/lang/en"
	"github.com/blevesearch/bleve/v2/index/scorch"
	"github.com/blevesearch/bleve/v2/search/query"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Ranking is how a search weighs what it finds.
type Ranking struct {
	// Name, Title, Description and Params weigh a match in each field; zero
	// leaves the field out of the query.
	Name, Title, Description, Params float64
	// Synonyms scales the query made of the synonyms of the user's words
	// (synonyms.go); zero adds none.
	Synonyms float64
	// Stemming analyzes text with bleve's English analyzer (Snowball
	// stemmer); without it text is only split, lower-cased and stripped of
	// English stop words (bleve's standard analyzer).
	Stemming bool
}

// DefaultRanking is the ranking of search mode. A word in a tool's name
// says more about what it does than one in its description, and a word
// only an argument's description uses says least; a synonym is a guess,
// never as good as the user's own word. The weights were chosen on the
// tuning half of the benchmark's queries only
// (host/bench/testdata/discovery-queries.json, docs/discovery.md).
var DefaultRanking = Ranking{Name: 1.5, Title: 1, Description: 1, Params: 0.25, Synonyms: 0.4, Stemming: true}

// Document field names.
const (
	fieldName        = "name"
	fieldTitle       = "title"
	fieldDescription = "description"
	fieldParams      = "params"
	fieldServer      = "server"
)

// DefaultLimit is how many tools a search returns when the caller asks for
// no number; MaxLimit is the most it returns.
const (
	DefaultLimit = 5
	MaxLimit     = 50
)

// maxSchemaText bounds the text taken from one tool's input schema: an
// upstream's schema is untrusted and may be large (docs/design.md §17); its
// first properties say what the tool takes.
const maxSchemaText = 8 << 10

// Index is the searchable set of exposed tools. Its methods are safe for
// concurrent use.
type Index struct {
	idx     bleve.Index
	ranking Ranking

	mu    sync.RWMutex     // guards tools
	tools map[string]entry // by exposed name
}

type entry struct {
	tool   *mcp.Tool
	server string
}

// Hit is one tool a search found.
type Hit struct {
	// Tool is the exposed tool, as tools/list would show it.
	Tool *mcp.Tool
	// Server is the server block that offers it.
	Server string
	// Score is its BM25 score; higher is better.
	Score float64
}

// ErrEmptyQuery is returned for a query with no word to search for.
var ErrEmptyQuery = errors.New("the query has no word to search for")

// NewIndex returns an empty index with DefaultRanking. Close releases it.
func NewIndex() (*Index, error) { return NewIndexWith(DefaultRanking) }

// NewIndexWith returns an empty index that ranks with r. Close releases it.
func NewIndexWith(r Ranking) (*Index, error) {
	analyzer := standard.Name
	if r.Stemming {
		analyzer = en.AnalyzerName
	}
	m := bleve.NewIndexMapping()
	m.ScoringModel = "bm25"
	m.DefaultAnalyzer = analyzer
	doc := bleve.NewDocumentStaticMapping()
	for _, f := range []string{fieldName, fieldTitle, fieldDescription, fieldParams} {
		fm := bleve.NewTextFieldMapping()
		fm.Analyzer = analyzer
		fm.Store = false
		fm.IncludeInAll = false
		fm.IncludeTermVectors = false
		doc.AddFieldMappingsAt(f, fm)
	}
	sm := bleve.NewKeywordFieldMapping()
	sm.Analyzer = keyword.Name
	sm.Store = false
	sm.IncludeInAll = false
	doc.AddFieldMappingsAt(fieldServer, sm)
	m.DefaultMapping = doc
	// An empty path keeps scorch's segments in memory only.
	idx, err := bleve.NewUsing("", m, scorch.Name, scorch.Name, nil)
	if err != nil {
		return nil, fmt.Errorf("discovery: creating the tool index: %w", err)
	}
	return &Index{idx: idx, ranking: r, tools: map[string]entry{}}, nil
}

// Close releases the index.
func (x *Index) Close() error { return x.idx.Close() }

// Len is the number of tools indexed.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.tools)
}

// Update removes the tools named in remove and adds (or replaces) add, in
// one batch.
func (x *Index) Update(remove []string, add []Tool) error {
	if len(remove) == 0 && len(add) == 0 {
		return nil
	}
	b := x.idx.NewBatch()
	for _, name := range remove {
		b.Delete(name)
	}
	for _, t := range add {
		if err := b.Index(t.Tool.Name, document(t)); err != nil {
			return fmt.Errorf("discovery: indexing tool %q: %w", t.Tool.Name, err)
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := x.idx.Batch(b); err != nil {
		return fmt.Errorf("discovery: updating the tool index: %w", err)
	}
	for _, name := range remove {
		delete(x.tools, name)
	}
	for _, t := range add {
		x.tools[t.Tool.Name] = entry{tool: t.Tool, server: t.Server}
	}
	return nil
}

// Tool is a tool to index: the exposed tool and what names it upstream.
type Tool struct {
	// Tool is the exposed tool (its Name is the exposed name).
	Tool *mcp.Tool
	// Server is the server block that offers it; Original its name there.
	Server, Original string
}

// document is what the index holds of t.
func document(t Tool) map[string]any {
	title := t.Tool.Title
	if title == "" && t.Tool.Annotations != nil {
		title = t.Tool.Annotations.Title
	}
	return map[string]any{
		fieldName:        Words(t.Tool.Name) + " " + Words(t.Original),
		fieldTitle:       title,
		fieldDescription: t.Tool.Description,
		fieldParams:      schemaText(t.Tool.InputSchema),
		fieldServer:      t.Server,
	}
}

// Words splits an identifier into the words it is made of: "list_issues",
// "listIssues", "list-issues" and "github__list_issues" all give "list
// issues" (with "github" in front for the last), so a user's "list issues"
// matches a tool's name.
func Words(s string) string {
	var b strings.Builder
	prev := rune(0)
	for _, r := range s {
		switch {
		case r == '_' || r == '-' || r == '.' || r == '/' || r == ':':
			r = ' '
		case unicode.IsUpper(r) && (unicode.IsLower(prev) || unicode.IsDigit(prev)):
			b.WriteByte(' ')
		}
		b.WriteRune(unicode.ToLower(r))
		prev = r
	}
	return b.String()
}

// schemaText is the words of an input schema's property names and
// descriptions, top level and one level down, at most maxSchemaText bytes.
func schemaText(schema any) string {
	raw, ok := schema.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(schema); err != nil {
			return ""
		}
	}
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	var b strings.Builder
	names := make([]string, 0, len(s.Properties))
	for name := range s.Properties {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if b.Len() >= maxSchemaText {
			break
		}
		var p struct {
			Description string                     `json:"description"`
			Properties  map[string]json.RawMessage `json:"properties"`
			Items       struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"items"`
		}
		_ = json.Unmarshal(s.Properties[name], &p)
		b.WriteString(Words(name))
		b.WriteString(". ")
		b.WriteString(p.Description)
		b.WriteString(". ")
		for sub := range p.Properties {
			b.WriteString(Words(sub))
			b.WriteString(" ")
		}
		for sub := range p.Items.Properties {
			b.WriteString(Words(sub))
			b.WriteString(" ")
		}
	}
	out := b.String()
	if len(out) > maxSchemaText {
		out = out[:maxSchemaText]
	}
	return out
}

// Query is one search.
type Query struct {
	// Text is what the caller looks for, in its own words.
	Text string
	// Server, when set, narrows the search to one server block's tools.
	Server string
	// Limit is the most tools returned; zero means DefaultLimit.
	Limit int
}

// Search returns the tools that best match q, best first, leaving out the
// ones visible says the caller may not see (a nil visible shows all).
func (x *Index) Search(ctx context.Context, q Query, visible func(name string) bool) ([]Hit, error) {
	text := Words(q.Text)
	if strings.TrimSpace(text) == "" {
		return nil, ErrEmptyQuery
	}
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	limit = min(limit, MaxLimit)

	fields := []struct {
		name   string
		weight float64
	}{{fieldName, x.ranking.Name}, {fieldTitle, x.ranking.Title}, {fieldDescription, x.ranking.Description}, {fieldParams, x.ranking.Params}}
	syn := ""
	if x.ranking.Synonyms > 0 {
		syn = expand(text)
	}
	var any []query.Query
	for _, f := range fields {
		if f.weight <= 0 {
			continue
		}
		mq := bleve.NewMatchQuery(text)
		mq.SetField(f.name)
		mq.SetBoost(f.weight)
		any = append(any, mq)
		if syn != "" {
			sq := bleve.NewMatchQuery(syn)
			sq.SetField(f.name)
			sq.SetBoost(f.weight * x.ranking.Synonyms)
			any = append(any, sq)
		}
	}
	var top query.Query = bleve.NewDisjunctionQuery(any...)
	if q.Server != "" {
		tq := bleve.NewTermQuery(q.Server)
		tq.SetField(fieldServer)
		top = bleve.NewConjunctionQuery(top, tq)
	}

	x.mu.RLock()
	defer x.mu.RUnlock()
	// The caller's policies filter after ranking: ask for every tool that
	// matches (the index is small, one host's tools), then keep the best
	// limit of those the caller may see.
	req := bleve.NewSearchRequestOptions(top, len(x.tools)+1, 0, false)
	// Equal scores are ordered by name, so one query always gets one answer.
	req.SortBy([]string{"-_score", "_id"})
	res, err := x.idx.SearchInContext(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("discovery: searching the tool index: %w", err)
	}
	var hits []Hit
	for _, h := range res.Hits {
		e, ok := x.tools[h.ID]
		if !ok || (visible != nil && !visible(h.ID)) {
			continue
		}
		hits = append(hits, Hit{Tool: e.tool, Server: e.server, Score: h.Score})
		if len(hits) == limit {
			break
		}
	}
	return hits, nil
}
