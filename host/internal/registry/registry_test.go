package registry_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/internal/registry"
)

func mkTools(names ...string) []*mcp.Tool {
	out := make([]*mcp.Tool, 0, len(names))
	for _, n := range names {
		out = append(out, &mcp.Tool{Name: n, InputSchema: map[string]any{"type": "object"}})
	}
	return out
}

func mkPrompts(names ...string) []*mcp.Prompt {
	out := make([]*mcp.Prompt, 0, len(names))
	for _, n := range names {
		out = append(out, &mcp.Prompt{Name: n})
	}
	return out
}

// recordingSink keeps every Changes it receives, summarised as names.
type recordingSink struct {
	mu    sync.Mutex
	calls []summary
}

type summary struct {
	AddTools, RemoveTools         []string
	AddPrompts, RemovePrompts     []string
	AddResources, RemoveResources []string
	AddTemplates, RemoveTemplates []string
}

func (s *recordingSink) Apply(ch registry.Changes) {
	var sum summary
	for _, e := range ch.AddTools {
		sum.AddTools = append(sum.AddTools, e.Tool.Name+"="+e.Server+"/"+e.Original)
	}
	for _, e := range ch.AddPrompts {
		sum.AddPrompts = append(sum.AddPrompts, e.Prompt.Name+"="+e.Server+"/"+e.Original)
	}
	for _, e := range ch.AddResources {
		sum.AddResources = append(sum.AddResources, e.Resource.URI+"="+e.Server)
	}
	for _, e := range ch.AddTemplates {
		sum.AddTemplates = append(sum.AddTemplates, e.Template.URITemplate+"="+e.Server)
	}
	sum.RemoveTools, sum.RemovePrompts = ch.RemoveTools, ch.RemovePrompts
	sum.RemoveResources, sum.RemoveTemplates = ch.RemoveResources, ch.RemoveTemplates
	s.mu.Lock()
	s.calls = append(s.calls, sum)
	s.mu.Unlock()
}

func (s *recordingSink) take() []summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.calls
	s.calls = nil
	return c
}

func TestToolEntryNaming(t *testing.T) {
	r := registry.New(nil, "__", []registry.ServerSpec{
		{Name: "echo", Prefix: "echo"},
		{Name: "solo", Prefix: ""},
	}, nil)
	orig := &mcp.Tool{Name: "say hi", Description: "d", InputSchema: map[string]any{"type": "object"}}
	r.Update("echo", &registry.Catalog{Tools: []*mcp.Tool{orig}})
	r.Update("solo", &registry.Catalog{Tools: mkTools("read")})

	e, ok := r.LookupTool("echo__say_hi")
	if !ok {
		t.Fatalf("echo__say_hi not exposed; have %v", names(r.Tools()))
	}
	if e.Server != "echo" || e.Original != "say hi" || e.Tool.Name != "echo__say_hi" || e.Tool.Description != "d" {
		t.Errorf("entry = %+v", e)
	}
	if orig.Name != "say hi" {
		t.Errorf("upstream tool was modified: %q", orig.Name)
	}
	if _, ok := r.LookupTool("read"); !ok {
		t.Errorf("empty prefix should expose %q unchanged", "read")
	}
	if _, ok := r.LookupTool("say hi"); ok {
		t.Errorf("original name must not be exposed")
	}
	if got := names(r.Tools()); !cmp.Equal(got, []string{"echo__say_hi", "read"}) {
		t.Errorf("Tools() = %v", got)
	}
}

func names(es []registry.ToolEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Tool.Name)
	}
	return out
}

func TestCollisionsAcrossServersAndTakeover(t *testing.T) {
	sink := &recordingSink{}
	specs := []registry.ServerSpec{{Name: "b", Prefix: ""}, {Name: "a", Prefix: ""}, {Name: "c", Prefix: ""}}
	r := registry.New(hclog.NewNullLogger(), "__", specs, sink)

	// b arrives first, then a: a sorts first and takes the name over,
	// whatever the arrival order.
	r.Update("b", &registry.Catalog{Tools: mkTools("search"), Prompts: mkPrompts("p"),
		Resources: []*mcp.Resource{{URI: "file:///x", Name: "x"}}})
	r.Update("a", &registry.Catalog{Tools: mkTools("search"), Prompts: mkPrompts("p"),
		Resources: []*mcp.Resource{{URI: "file:///x", Name: "x"}}})
	r.Update("c", &registry.Catalog{Tools: mkTools("search")})

	e, _ := r.LookupTool("search")
	if e.Server != "a" {
		t.Errorf("winner = %q, want a", e.Server)
	}
	if srv, _ := r.LookupResource("file:///x"); srv != "a" {
		t.Errorf("resource winner = %q, want a", srv)
	}
	want := []registry.Collision{
		{Kind: registry.KindPrompt, Name: "p", Winner: "a", WinnerOriginal: "p", Losers: []string{"b"}, LoserOriginals: []string{"p"}},
		{Kind: registry.KindResource, Name: "file:///x", Winner: "a", Losers: []string{"b"}},
		{Kind: registry.KindTool, Name: "search", Winner: "a", WinnerOriginal: "search", Losers: []string{"b", "c"}, LoserOriginals: []string{"search", "search"}},
	}
	if d := cmp.Diff(want, r.Collisions()); d != "" {
		t.Errorf("Collisions() (-want +got):\n%s", d)
	}

	// The winner leaves: the next server by name takes over.
	sink.take()
	r.Update("a", nil)
	e, _ = r.LookupTool("search")
	if e.Server != "b" {
		t.Errorf("after a left, winner = %q, want b", e.Server)
	}
	got := sink.take()
	wantCh := []summary{{
		AddTools:     []string{"search=b/search"},
		AddPrompts:   []string{"p=b/p"},
		AddResources: []string{"file:///x=b"},
	}}
	if d := cmp.Diff(wantCh, got); d != "" {
		t.Errorf("changes after takeover (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]registry.Collision{{Kind: registry.KindTool, Name: "search", Winner: "b", WinnerOriginal: "search",
		Losers: []string{"c"}, LoserOriginals: []string{"search"}}}, r.Collisions()); d != "" {
		t.Errorf("Collisions() after takeover (-want +got):\n%s", d)
	}

	// The winner comes back: it wins again.
	r.Update("a", &registry.Catalog{Tools: mkTools("search")})
	if e, _ := r.LookupTool("search"); e.Server != "a" {
		t.Errorf("after a returned, winner = %q, want a", e.Server)
	}
}

// TestSanitisedClashesStayReachable checks that names of one server that
// sanitise alike each get their own exposed name: the one that sanitises
// to itself keeps it, the others get a hash suffix of their original, and
// none is hidden.
func TestSanitisedClashesStayReachable(t *testing.T) {
	r := registry.New(nil, "__", []registry.ServerSpec{{Name: "s", Prefix: "s"}}, nil)
	r.Update("s", &registry.Catalog{Tools: mkTools("a b", "a/b", "a_b", "工具", "数据"), Prompts: mkPrompts("p q", "p_q")})
	got := map[string]string{} // original → exposed
	for _, e := range r.Tools() {
		if prev, dup := got[e.Original]; dup {
			t.Fatalf("%q exposed twice: %q and %q", e.Original, prev, e.Tool.Name)
		}
		got[e.Original] = e.Tool.Name
		if back, ok := r.LookupTool(e.Tool.Name); !ok || back.Original != e.Original {
			t.Errorf("LookupTool(%q) = %+v, want original %q", e.Tool.Name, back, e.Original)
		}
	}
	if len(got) != 5 {
		t.Fatalf("exposed %v, want all five tools", got)
	}
	if got["a_b"] != "s__a_b" {
		t.Errorf("a_b sanitises to itself and must keep s__a_b, got %q", got["a_b"])
	}
	suffixed := regexp.MustCompile(`^s__a_b_[0-9a-f]{8}$`)
	for _, o := range []string{"a b", "a/b"} {
		if !suffixed.MatchString(got[o]) {
			t.Errorf("%q exposed as %q, want s__a_b_<hash>", o, got[o])
		}
	}
	for _, o := range []string{"工具", "数据"} {
		if !regexp.MustCompile(`^s_____[0-9a-f]{8}$`).MatchString(got[o]) {
			t.Errorf("%q exposed as %q, want s____ and a hash suffix", o, got[o])
		}
	}
	if c := r.Collisions(); len(c) != 0 {
		t.Errorf("sanitising clashes reported as collisions (something hidden): %+v", c)
	}
	if p := r.Prompts(); len(p) != 2 || p[0].Prompt.Name != "s__p_q" || p[0].Original != "p_q" {
		t.Errorf("prompts = %+v, want p_q as s__p_q and p q suffixed", p)
	}
	if rn := r.Renames(); len(rn) != 5 {
		t.Errorf("Renames() = %+v, want 4 tools and 1 prompt", rn)
	}
	// The same tool listed twice by an upstream is not a collision.
	r.Update("s", &registry.Catalog{Tools: mkTools("x", "x")})
	if c := r.Collisions(); len(c) != 0 {
		t.Errorf("duplicate listing reported as collision: %+v", c)
	}
	if rn := r.Renames(); len(rn) != 0 {
		t.Errorf("Renames() after the clash went = %+v", rn)
	}
}

// TestSanitisedNamesDeterministic checks that the exposed names do not
// depend on the order the upstream lists its tools in, nor on re-lists or
// a new Registry (a restart).
func TestSanitisedNamesDeterministic(t *testing.T) {
	orders := [][]string{
		{"a b", "a/b", "a_b", "工具", "数据", "c"},
		{"数据", "c", "a_b", "工具", "a/b", "a b"},
		{"a/b", "数据", "a b", "c", "工具", "a_b"},
	}
	var want map[string]string
	for i, order := range orders {
		r := registry.New(nil, "__", []registry.ServerSpec{{Name: "s", Prefix: "s"}}, nil)
		for range 2 { // a re-list of the same catalog changes nothing
			r.Update("s", &registry.Catalog{Tools: mkTools(order...)})
		}
		got := map[string]string{}
		for _, e := range r.Tools() {
			got[e.Original] = e.Tool.Name
		}
		if i == 0 {
			want = got
			continue
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("order %v gives other names (-first +this):\n%s", order, d)
		}
	}
}

// TestSanitisedClashWarnsOnce checks the warning names both originals and
// is not repeated while the clash persists.
func TestSanitisedClashWarnsOnce(t *testing.T) {
	var buf bytes.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: &buf, JSONFormat: true})
	r := registry.New(logger, "__", []registry.ServerSpec{{Name: "s", Prefix: "s"}}, nil)
	r.Update("s", &registry.Catalog{Tools: mkTools("a/b", "a_b")})
	r.Update("s", &registry.Catalog{Tools: mkTools("a_b", "a/b")})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one warning, got %d:\n%s", len(lines), buf.String())
	}
	var entry map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &entry); err != nil {
		t.Fatal(err)
	}
	clashes, _ := entry["clashes_with"].([]any)
	if entry["original"] != "a/b" || len(clashes) != 1 || clashes[0] != "a_b" || entry["server"] != "s" {
		t.Errorf("log entry = %v", entry)
	}
}

// FuzzDistinctNamesStayDistinct checks that distinct upstream names of
// one server always get distinct, valid exposed names that route back to
// them, whatever they sanitise to and in whatever order they are listed.
func reversed(s []string) []string {
	r := slices.Clone(s)
	slices.Reverse(r)
	return r
}

func FuzzDistinctNamesStayDistinct(f *testing.F) {
	f.Add("a b", "a/b", "a_b", "s")
	f.Add("工具", "数据", "____", "")
	f.Add(strings.Repeat("x", 70)+"é", strings.Repeat("x", 70)+"ü", strings.Repeat("x", 71), "p")
	// "a_b_f8cc0201" is what "a/b" would get: the real name keeps it.
	f.Add("a_b_f8cc0201", "a/b", "a_b", "s")
	f.Fuzz(func(t *testing.T, a, b, c, prefix string) {
		var originals []string
		for _, n := range []string{a, b, c} {
			if n != "" && !slices.Contains(originals, n) {
				originals = append(originals, n)
			}
		}
		exposed := func(order []string) map[string]string {
			r := registry.New(nil, "__", []registry.ServerSpec{{Name: "s", Prefix: prefix}}, nil)
			r.Update("s", &registry.Catalog{Tools: mkTools(order...)})
			got := map[string]string{}
			for _, e := range r.Tools() {
				if !validExposed.MatchString(e.Tool.Name) {
					t.Fatalf("%q exposed as %q: not ^[A-Za-z0-9_.-]{1,64}$", e.Original, e.Tool.Name)
				}
				if back, ok := r.LookupTool(e.Tool.Name); !ok || back.Original != e.Original {
					t.Fatalf("%q does not route back to %q", e.Tool.Name, e.Original)
				}
				got[e.Original] = e.Tool.Name
			}
			if len(got) != len(originals) {
				t.Fatalf("tools %q exposed as %v: some are unreachable", order, got)
			}
			return got
		}
		first := exposed(originals)
		if d := cmp.Diff(first, exposed(reversed(originals))); d != "" {
			t.Fatalf("list order changes the names (-forward +backward):\n%s", d)
		}
	})
}

func TestDiffsOnlyNetChanges(t *testing.T) {
	sink := &recordingSink{}
	r := registry.New(nil, "__", []registry.ServerSpec{{Name: "s", Prefix: "s"}, {Name: "t", Prefix: "t"}}, sink)

	r.Update("s", &registry.Catalog{
		Tools:     mkTools("a", "b"),
		Prompts:   mkPrompts("p"),
		Resources: []*mcp.Resource{{URI: "mem://r", Name: "r"}},
		Templates: []*mcp.ResourceTemplate{{URITemplate: "mem://items/{id}", Name: "item"}},
	})
	if d := cmp.Diff([]summary{{
		AddTools:     []string{"s__a=s/a", "s__b=s/b"},
		AddPrompts:   []string{"s__p=s/p"},
		AddResources: []string{"mem://r=s"},
		AddTemplates: []string{"mem://items/{id}=s"},
	}}, sink.take()); d != "" {
		t.Errorf("first update (-want +got):\n%s", d)
	}

	// Same catalog again (new pointers, same content): nothing is sent.
	r.Update("s", &registry.Catalog{
		Tools:     mkTools("b", "a"),
		Prompts:   mkPrompts("p"),
		Resources: []*mcp.Resource{{URI: "mem://r", Name: "r"}},
		Templates: []*mcp.ResourceTemplate{{URITemplate: "mem://items/{id}", Name: "item"}},
	})
	if got := sink.take(); len(got) != 0 {
		t.Errorf("unchanged catalog sent %+v", got)
	}

	// A changed definition is re-sent, a gone tool removed, a new one added.
	changed := mkTools("a", "c")
	changed[0].Description = "now documented"
	r.Update("s", &registry.Catalog{
		Tools: changed, Prompts: mkPrompts("p"),
		Resources: []*mcp.Resource{{URI: "mem://r", Name: "r"}},
		Templates: []*mcp.ResourceTemplate{{URITemplate: "mem://items/{id}", Name: "item"}},
	})
	if d := cmp.Diff([]summary{{
		AddTools:    []string{"s__a=s/a", "s__c=s/c"},
		RemoveTools: []string{"s__b"},
	}}, sink.take()); d != "" {
		t.Errorf("changed update (-want +got):\n%s", d)
	}
	if e, _ := r.LookupTool("s__a"); e.Tool.Description != "now documented" {
		t.Errorf("lookup sees stale definition %q", e.Tool.Description)
	}

	// Another server's update does not touch s's entries.
	r.Update("t", &registry.Catalog{Tools: mkTools("a")})
	if d := cmp.Diff([]summary{{AddTools: []string{"t__a=t/a"}}}, sink.take()); d != "" {
		t.Errorf("other server (-want +got):\n%s", d)
	}

	// nil catalog withdraws everything of s.
	r.Update("s", nil)
	if d := cmp.Diff([]summary{{
		RemoveTools:     []string{"s__a", "s__c"},
		RemovePrompts:   []string{"s__p"},
		RemoveResources: []string{"mem://r"},
		RemoveTemplates: []string{"mem://items/{id}"},
	}}, sink.take()); d != "" {
		t.Errorf("withdraw (-want +got):\n%s", d)
	}
	if got := names(r.Tools()); !cmp.Equal(got, []string{"t__a"}) {
		t.Errorf("Tools() = %v", got)
	}
}

func TestSetSpecsRecomputes(t *testing.T) {
	sink := &recordingSink{}
	r := registry.New(nil, "__", []registry.ServerSpec{{Name: "s", Prefix: "s"}}, sink)
	r.Update("s", &registry.Catalog{Tools: mkTools("a", "trigger")})
	r.Update("late", &registry.Catalog{Tools: mkTools("z")}) // no spec yet: not exposed
	sink.take()

	r.SetSpecs([]registry.ServerSpec{
		{Name: "s", Prefix: "x", Exclude: []string{"trig*"}},
		{Name: "late", Prefix: "late"},
	})
	if d := cmp.Diff([]summary{{
		AddTools:    []string{"late__z=late/z", "x__a=s/a"},
		RemoveTools: []string{"s__a", "s__trigger"},
	}}, sink.take()); d != "" {
		t.Errorf("reload (-want +got):\n%s", d)
	}

	r.SetSpecs(nil)
	if got := r.Tools(); len(got) != 0 {
		t.Errorf("no specs should expose nothing, got %v", names(got))
	}
}

func TestLookupResource(t *testing.T) {
	r := registry.New(nil, "__", []registry.ServerSpec{{Name: "a"}, {Name: "b"}}, nil)
	r.Update("a", &registry.Catalog{
		Resources: []*mcp.Resource{{URI: "file:///etc/hosts", Name: "hosts"}},
		Templates: []*mcp.ResourceTemplate{
			{URITemplate: "notes://{id}", Name: "note"},
			{URITemplate: "repo://{owner}/{name}/tree{/path}", Name: "tree"},
		},
	})
	r.Update("b", &registry.Catalog{
		Templates: []*mcp.ResourceTemplate{
			{URITemplate: "file:///{+path}", Name: "file"},
			{URITemplate: "search://q{?term,limit}", Name: "search"},
		},
	})
	tests := []struct {
		uri, want string
	}{
		{"file:///etc/hosts", "a"},   // exact resource beats b's template
		{"file:///var/log/x", "b"},   // reserved expansion spans '/'
		{"notes://42", "a"},          // simple expansion
		{"notes://{id}", "a"},        // the template text itself (completion refs)
		{"notes://4/2", ""},          // simple expansion stops at '/'
		{"notes://", ""},             // and needs at least one character
		{"repo://x/y/tree", "a"},     // optional path expansion absent
		{"repo://x/y/tree/src", "a"}, // and present
		{"search://q?term=go&limit=3", "b"},
		{"search://q", "b"},
		{"other://x", ""},
	}
	for _, tt := range tests {
		got, ok := r.LookupResource(tt.uri)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("LookupResource(%q) = %q, %v; want %q", tt.uri, got, ok, tt.want)
		}
	}
}

func TestPromptLookupAndTemplateCollision(t *testing.T) {
	r := registry.New(nil, "__", []registry.ServerSpec{{Name: "a", Prefix: "a"}, {Name: "b", Prefix: "b"}}, nil)
	r.Update("b", &registry.Catalog{Prompts: mkPrompts("greet"),
		Templates: []*mcp.ResourceTemplate{{URITemplate: "x://{id}", Name: "x"}}})
	r.Update("a", &registry.Catalog{Templates: []*mcp.ResourceTemplate{{URITemplate: "x://{id}", Name: "x"}}})
	p, ok := r.LookupPrompt("b__greet")
	if !ok || p.Original != "greet" || p.Server != "b" || p.Prompt.Name != "b__greet" {
		t.Errorf("LookupPrompt = %+v, %v", p, ok)
	}
	if srv, _ := r.LookupResource("x://1"); srv != "a" {
		t.Errorf("template winner = %q, want a", srv)
	}
	if c := r.Collisions(); len(c) != 1 || c[0].Kind != registry.KindTemplate || c[0].Winner != "a" {
		t.Errorf("Collisions() = %+v", c)
	}
}

// TestConcurrentUpdateAndLookup runs lookups while updates replace the
// exposure; under -race it proves lookups need no lock.
func TestConcurrentUpdateAndLookup(t *testing.T) {
	sink := &recordingSink{}
	r := registry.New(nil, "__", []registry.ServerSpec{{Name: "s", Prefix: "s"}, {Name: "t", Prefix: "t"}}, sink)
	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if e, ok := r.LookupTool("s__stable"); ok && (e.Server != "s" || e.Original != "stable") {
					t.Errorf("torn entry %+v", e)
					return
				}
				r.LookupResource(fmt.Sprintf("mem://%d", w))
				r.LookupPrompt("t__p")
				_ = r.Tools()
				_ = r.Collisions()
			}
		}()
	}
	for i := range 200 {
		server := "s"
		if i%2 == 1 {
			server = "t"
		}
		r.Update(server, &registry.Catalog{
			Tools:     mkTools("stable", fmt.Sprintf("t%d", i)),
			Prompts:   mkPrompts("p"),
			Resources: []*mcp.Resource{{URI: fmt.Sprintf("mem://%d", i%4), Name: "r"}},
		})
		if i%50 == 0 {
			r.SetSpecs([]registry.ServerSpec{{Name: "s", Prefix: "s"}, {Name: "t", Prefix: "t"}})
		}
	}
	close(done)
	wg.Wait()
	if _, ok := r.LookupTool("s__stable"); !ok {
		t.Errorf("s__stable missing after updates")
	}
}

// TestCollisionLoggedOnce checks that a collision is warned about with its
// names as key/values when it appears, and not again while it persists.
func TestCollisionLoggedOnce(t *testing.T) {
	var buf bytes.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: &buf, JSONFormat: true})
	r := registry.New(logger, "__", []registry.ServerSpec{{Name: "a"}, {Name: "b"}}, nil)
	r.Update("a", &registry.Catalog{Tools: mkTools("x")})
	r.Update("b", &registry.Catalog{Tools: mkTools("x")})
	r.Update("b", &registry.Catalog{Tools: mkTools("x")})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one warning, got %d:\n%s", len(lines), buf.String())
	}
	var entry map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &entry); err != nil {
		t.Fatal(err)
	}
	if entry["@level"] != "warn" || entry["exposed"] != "x" || entry["winner"] != "a" || entry["kind"] != "tool" {
		t.Errorf("log entry = %v", entry)
	}
	if losers, _ := entry["losers"].([]any); len(losers) != 1 || losers[0] != "b" {
		t.Errorf("losers = %v", entry["losers"])
	}
}

// A server that never listed its tools (parked at its first start) is
// still reached by a call to PREFIX__tool, so that the call can start it
// (LookupUnlisted); the longest matching prefix wins, its tool filter
// applies, a server without a prefix is never matched, and a server with
// a catalog is looked up by LookupTool alone.
func TestLookupUnlisted(t *testing.T) {
	r := registry.New(nil, "__", []registry.ServerSpec{
		{Name: "db", Prefix: "db"},
		{Name: "dbx", Prefix: "db__x"},
		{Name: "filtered", Prefix: "f", Exclude: []string{"secret*"}},
		{Name: "bare"},
		{Name: "up", Prefix: "up"},
	}, nil)
	r.Update("up", &registry.Catalog{Tools: mkTools("t")})
	cases := []struct {
		name, server, original string
	}{
		{"db__query", "db", "query"},
		{"db__x__query", "dbx", "query"},
		{"f__open", "filtered", "open"},
		{"f__secret_key", "", ""},
		{"db__", "", ""},
		{"query", "", ""},
		{"up__other", "", ""},
	}
	for _, c := range cases {
		e, ok := r.LookupUnlisted(c.name)
		if ok != (c.server != "") || e.Server != c.server || e.Original != c.original {
			t.Errorf("LookupUnlisted(%q) = %+v, %t; want server %q, original %q", c.name, e, ok, c.server, c.original)
		}
	}
	// Once db lists its tools, it is no longer unlisted.
	r.Update("db", &registry.Catalog{Tools: mkTools("query")})
	if e, ok := r.LookupUnlisted("db__other"); ok {
		t.Errorf("LookupUnlisted(db__other) = %+v after db listed its tools", e)
	}
}
