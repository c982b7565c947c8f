// Package registry decides what mcpvisor exposes downstream: the namespaced
// union of every upstream server's tools, prompts, resources and resource
// templates, with include/exclude filters and deterministic collision
// handling. It is pure logic: it never talks to a server.
//
// Design note. Every Update or SetSpecs recomputes the whole exposure from
// the last catalog of every server, rather than patching it. That keeps
// collision handling simple and always right: when the winner of a name
// leaves, the next loser takes over on the same recompute, and a reload that
// changes a prefix or a filter needs no special path. The result is an
// immutable snapshot published through an atomic pointer, so lookups on the
// call path never take a lock. The new snapshot is diffed against the old
// one and only the net difference reaches the Sink (the gateway), which
// turns it into list_changed notifications for connected clients.
package registry

import (
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Catalog is what one upstream currently offers (from its last list calls).
type Catalog struct {
	Tools     []*mcp.Tool
	Resources []*mcp.Resource
	Templates []*mcp.ResourceTemplate
	Prompts   []*mcp.Prompt
	// Truncated says, one sentence per list operation, why listing
	// stopped before the upstream's end (a catalog bound was reached);
	// empty when the upstream listed everything.
	Truncated []string
}

// ServerSpec says how one server's catalog is exposed.
type ServerSpec struct {
	// Name is the server block label.
	Name string
	// Prefix namespaces tool and prompt names; "" exposes names unchanged.
	Prefix string
	// Include and Exclude are tool globs (path.Match syntax) applied to the
	// upstream's original tool name; include wins.
	Include, Exclude []string
}

// ToolEntry is one exposed tool.
type ToolEntry struct {
	// Tool is a copy of the upstream tool carrying the exposed Name.
	Tool *mcp.Tool
	// Server is the server block that offers the tool.
	Server string
	// Original is the tool's name on that server.
	Original string
	// Full is Original with the server's prefix and the separator, as it
	// was before it was made a valid, unique name (Aliases).
	Full string
}

// PromptEntry is one exposed prompt.
type PromptEntry struct {
	// Prompt is a copy of the upstream prompt carrying the exposed Name.
	Prompt *mcp.Prompt
	// Server is the server block that offers the prompt.
	Server string
	// Original is the prompt's name on that server.
	Original string
	// Full is Original with the server's prefix and the separator, as it
	// was before it was made a valid, unique name (Aliases).
	Full string
}

// ResourceEntry is one exposed resource. URIs are never renamed.
type ResourceEntry struct {
	Resource *mcp.Resource
	Server   string
}

// TemplateEntry is one exposed resource template. URI templates are never
// renamed.
type TemplateEntry struct {
	Template *mcp.ResourceTemplate
	Server   string
}

// Sink receives the net changes after each update. The gateway implements
// it. Apply is called with the registry's update lock held, so changes
// arrive in order; it must not call Update or SetSpecs.
type Sink interface {
	Apply(ch Changes)
}

// Changes is the net difference between two exposures. An entry in an Add
// list is new or replaces an entry of the same name whose definition (or
// owning server) changed; unchanged entries are never listed. Every list is
// sorted.
type Changes struct {
	AddTools    []ToolEntry
	RemoveTools []string // exposed names

	AddPrompts    []PromptEntry
	RemovePrompts []string // exposed names

	AddResources    []ResourceEntry
	RemoveResources []string // URIs

	AddTemplates    []TemplateEntry
	RemoveTemplates []string // URI templates
}

// Empty reports whether ch changes nothing.
func (ch Changes) Empty() bool {
	return len(ch.AddTools)+len(ch.RemoveTools)+len(ch.AddPrompts)+len(ch.RemovePrompts)+
		len(ch.AddResources)+len(ch.RemoveResources)+len(ch.AddTemplates)+len(ch.RemoveTemplates) == 0
}

// Kind names what a Collision is about.
type Kind string

// The kinds of exposed items that can collide.
const (
	KindTool     Kind = "tool"
	KindPrompt   Kind = "prompt"
	KindResource Kind = "resource"
	KindTemplate Kind = "template"
)

// Collision records two or more upstream items that map to one exposed name
// (or URI). The server whose name sorts first wins; for items of one server,
// the original name that sorts first wins. Losers are hidden until the winner
// goes away.
type Collision struct {
	// Kind says whether tools, prompts, resources or templates collided.
	Kind Kind
	// Name is the exposed name, URI or URI template.
	Name string
	// Winner is the server whose item is exposed.
	Winner string
	// WinnerOriginal is the winner's original name (tools and prompts only).
	WinnerOriginal string
	// Losers are the servers whose items are hidden, in order; a server
	// appears here too when two of its own items collide.
	Losers []string
	// LoserOriginals are the losers' original names, parallel to Losers
	// (tools and prompts only).
	LoserOriginals []string
}

// Registry holds the exposure of all servers. It is safe for concurrent
// use: Update and SetSpecs are serialised, lookups are lock-free.
type Registry struct {
	logger hclog.Logger
	sep    string
	sink   Sink

	// mu serialises Update and SetSpecs, and the Sink calls they make, so
	// the Sink sees changes in the order the snapshots were published.
	mu       sync.Mutex
	specs    map[string]ServerSpec
	catalogs map[string]*Catalog
	// dormant holds, per server whose catalog was withdrawn (parked,
	// restarting), the tools it exposed until then: a call to one of
	// them still reaches that server's supervisor, which may revive it.
	dormant map[string][]ToolEntry
	// reported holds the collisions already logged, so a recompute that
	// leaves a collision as it was does not log it again.
	reported map[string]bool
	// renamed holds the renames already logged, likewise.
	renamed map[string]bool

	snap atomic.Pointer[snapshot]
}

// snapshot is one immutable exposure. Nothing in it changes after it is
// published.
type snapshot struct {
	tools      map[string]ToolEntry
	dormant    map[string]ToolEntry // withdrawn tools no live server exposes now
	unlisted   []ServerSpec         // named servers with no catalog now, longest prefix first (LookupUnlisted)
	toolList   []ToolEntry          // sorted by exposed name
	prompts    map[string]PromptEntry
	resources  map[string]ResourceEntry
	templates  map[string]TemplateEntry
	matchers   []templateMatcher // sorted by server, then URI template
	collisions []Collision
	renames    []Rename // tools, then prompts, each by sanitised name
}

type templateMatcher struct {
	entry TemplateEntry
	match func(string) bool
}

// New returns a Registry exposing nothing yet. separator joins a prefix and
// a name; sink may be nil.
func New(logger hclog.Logger, separator string, specs []ServerSpec, sink Sink) *Registry {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	r := &Registry{
		logger:   logger,
		sep:      separator,
		sink:     sink,
		specs:    specMap(specs),
		catalogs: map[string]*Catalog{},
		dormant:  map[string][]ToolEntry{},
		reported: map[string]bool{},
		renamed:  map[string]bool{},
	}
	r.snap.Store(&snapshot{
		tools: map[string]ToolEntry{}, prompts: map[string]PromptEntry{},
		resources: map[string]ResourceEntry{}, templates: map[string]TemplateEntry{},
		unlisted: r.unlisted(),
	})
	return r
}

func specMap(specs []ServerSpec) map[string]ServerSpec {
	m := make(map[string]ServerSpec, len(specs))
	for _, s := range specs {
		m[s.Name] = s
	}
	return m
}

// Update records server's current catalog and recomputes the exposure. A nil
// cat means the server offers nothing (parked, restarting or stopped):
// everything it exposed is withdrawn, and its tools become dormant
// (LookupDormant) until it offers a catalog again or SetSpecs drops it. A
// server without a spec is remembered but not exposed until SetSpecs names
// it.
func (r *Registry) Update(server string, cat *Catalog) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cat == nil {
		if r.catalogs[server] != nil {
			var exposed []ToolEntry
			for _, e := range r.snap.Load().toolList {
				if e.Server == server {
					exposed = append(exposed, e)
				}
			}
			r.dormant[server] = exposed
		}
		delete(r.catalogs, server)
	} else {
		delete(r.dormant, server)
		r.catalogs[server] = cat
		if _, ok := r.specs[server]; !ok {
			r.logger.Warn("catalog for a server without a spec is not exposed", "server", server)
		}
	}
	r.recompute()
}

// SetSpecs replaces the server specs (on config reload) and recomputes the
// exposure. Catalogs of servers that are no longer named stay remembered
// but are not exposed.
func (r *Registry) SetSpecs(specs []ServerSpec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.specs = specMap(specs)
	for server := range r.dormant {
		if _, ok := r.specs[server]; !ok {
			delete(r.dormant, server)
		}
	}
	r.recompute()
}

// recompute builds a new snapshot, publishes it, logs new collisions and
// hands the net difference to the sink. r.mu must be held.
func (r *Registry) recompute() {
	old := r.snap.Load()
	next := r.build()
	r.snap.Store(next)
	r.logCollisions(next.collisions)
	r.logRenames(next.renames)
	ch := diff(old, next)
	if r.sink != nil && !ch.Empty() {
		r.sink.Apply(ch)
	}
}

// candidate is one upstream item competing for an exposed key. full is
// the unsanitised name the key was made from (prefix + separator +
// original) for tools and prompts, "" for URIs.
type candidate struct {
	server, original string
	item             any
	full             string
}

// Rename records a tool or prompt exposed under a disambiguated name
// because its name, once sanitised, clashed with another's from a
// different original ("a/b" and "a_b" both sanitise to "s__a_b").
type Rename struct {
	// Kind is KindTool or KindPrompt.
	Kind Kind
	// Server is the server block that offers the item.
	Server string
	// Original is the item's name on that server.
	Original string
	// Sanitised is the name it clashed on; Exposed is the name it got.
	Sanitised, Exposed string
	// Clashes are the other original names that sanitised alike.
	Clashes []string
}

// disambiguate gives every distinct unsanitised name among the candidates
// of one exposed key a distinct key, so that sanitising never hides a tool
// or prompt. The candidates whose unsanitised name already is the key
// (the name sanitises to itself) keep it; every other one moves to
// disambiguated(key, full), which depends only on its own name: the
// result is the same whatever order the upstream lists in. Candidates
// that share one unsanitised name (two servers with prefix "" offering
// the same tool) stay together, for decide to pick a winner.
func disambiguate(kind Kind, cands map[string][]candidate) []Rename {
	var renames []Rename
	for _, key := range slices.Sorted(maps.Keys(cands)) {
		cs := cands[key]
		fulls := map[string]bool{}
		for _, c := range cs {
			fulls[c.full] = true
		}
		if len(fulls) < 2 {
			continue
		}
		var keep []candidate
		for _, c := range cs {
			if c.full == key {
				keep = append(keep, c)
				continue
			}
			exposed := disambiguated(key, c.full)
			if exposed == key {
				// Only a 64-character name that already ends in this
				// hash: nothing left to tell them apart; decide reports it.
				keep = append(keep, c)
				continue
			}
			cands[exposed] = append(cands[exposed], c)
			var clashes []string
			for _, o := range cs {
				if o.full != c.full && !slices.Contains(clashes, o.original) {
					clashes = append(clashes, o.original)
				}
			}
			sort.Strings(clashes)
			renames = append(renames, Rename{Kind: kind, Server: c.server, Original: c.original,
				Sanitised: key, Exposed: exposed, Clashes: clashes})
		}
		if len(keep) == 0 {
			delete(cands, key)
		} else {
			cands[key] = keep
		}
	}
	sort.Slice(renames, func(i, j int) bool {
		a, b := renames[i], renames[j]
		if a.Sanitised != b.Sanitised {
			return a.Sanitised < b.Sanitised
		}
		if a.Server != b.Server {
			return a.Server < b.Server
		}
		return a.Original < b.Original
	})
	// One item listed twice gives two equal renames.
	renames = slices.CompactFunc(renames, func(a, b Rename) bool {
		return a.Server == b.Server && a.Original == b.Original && a.Exposed == b.Exposed
	})
	return renames
}

func (r *Registry) build() *snapshot {
	names := make([]string, 0, len(r.specs))
	for name := range r.specs {
		if r.catalogs[name] != nil {
			names = append(names, name)
		}
	}
	sort.Strings(names)

	tools := map[string][]candidate{}
	prompts := map[string][]candidate{}
	resources := map[string][]candidate{}
	templates := map[string][]candidate{}
	for _, name := range names {
		spec, cat := r.specs[name], r.catalogs[name]
		for _, t := range cat.Tools {
			if t == nil || t.Name == "" || !toolAllowed(spec, t.Name) {
				continue
			}
			key := ExposedName(spec.Prefix, r.sep, t.Name)
			tools[key] = append(tools[key], candidate{name, t.Name, t, fullName(spec.Prefix, r.sep, t.Name)})
		}
		for _, p := range cat.Prompts {
			if p == nil || p.Name == "" {
				continue
			}
			key := ExposedName(spec.Prefix, r.sep, p.Name)
			prompts[key] = append(prompts[key], candidate{name, p.Name, p, fullName(spec.Prefix, r.sep, p.Name)})
		}
		for _, res := range cat.Resources {
			if res == nil || res.URI == "" {
				continue
			}
			resources[res.URI] = append(resources[res.URI], candidate{name, res.URI, res, ""})
		}
		for _, t := range cat.Templates {
			if t == nil || t.URITemplate == "" {
				continue
			}
			templates[t.URITemplate] = append(templates[t.URITemplate], candidate{name, t.URITemplate, t, ""})
		}
	}

	s := &snapshot{
		renames:   append(disambiguate(KindTool, tools), disambiguate(KindPrompt, prompts)...),
		tools:     make(map[string]ToolEntry, len(tools)),
		prompts:   make(map[string]PromptEntry, len(prompts)),
		resources: make(map[string]ResourceEntry, len(resources)),
		templates: make(map[string]TemplateEntry, len(templates)),
	}
	for key, cs := range tools {
		w := s.decide(KindTool, key, cs, true)
		t := *w.item.(*mcp.Tool)
		t.Name = key
		s.tools[key] = ToolEntry{Tool: &t, Server: w.server, Original: w.original, Full: w.full}
	}
	s.unlisted = r.unlisted()
	s.dormant = map[string]ToolEntry{}
	for _, server := range slices.Sorted(maps.Keys(r.dormant)) {
		if _, named := r.specs[server]; !named {
			continue
		}
		for _, e := range r.dormant[server] {
			if _, live := s.tools[e.Tool.Name]; !live {
				if _, taken := s.dormant[e.Tool.Name]; !taken {
					s.dormant[e.Tool.Name] = e
				}
			}
		}
	}
	for key, cs := range prompts {
		w := s.decide(KindPrompt, key, cs, true)
		p := *w.item.(*mcp.Prompt)
		p.Name = key
		s.prompts[key] = PromptEntry{Prompt: &p, Server: w.server, Original: w.original, Full: w.full}
	}
	for key, cs := range resources {
		w := s.decide(KindResource, key, cs, false)
		s.resources[key] = ResourceEntry{Resource: w.item.(*mcp.Resource), Server: w.server}
	}
	for key, cs := range templates {
		w := s.decide(KindTemplate, key, cs, false)
		e := TemplateEntry{Template: w.item.(*mcp.ResourceTemplate), Server: w.server}
		s.templates[key] = e
		m := templateMatcher{entry: e, match: func(string) bool { return false }}
		if re := compileTemplate(key); re != nil {
			m.match = re.MatchString
		}
		s.matchers = append(s.matchers, m)
	}

	s.toolList = make([]ToolEntry, 0, len(s.tools))
	for _, e := range s.tools {
		s.toolList = append(s.toolList, e)
	}
	sort.Slice(s.toolList, func(i, j int) bool { return s.toolList[i].Tool.Name < s.toolList[j].Tool.Name })
	sort.Slice(s.matchers, func(i, j int) bool {
		a, b := s.matchers[i].entry, s.matchers[j].entry
		if a.Server != b.Server {
			return a.Server < b.Server
		}
		return a.Template.URITemplate < b.Template.URITemplate
	})
	sort.Slice(s.collisions, func(i, j int) bool {
		a, b := s.collisions[i], s.collisions[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Name < b.Name
	})
	return s
}

// decide picks the winner among the candidates for one exposed key and
// records a collision when there is more than one. An upstream that lists
// the same item twice is not a collision.
func (s *snapshot) decide(kind Kind, key string, cs []candidate, named bool) candidate {
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].server != cs[j].server {
			return cs[i].server < cs[j].server
		}
		return cs[i].original < cs[j].original
	})
	cs = slices.CompactFunc(cs, func(a, b candidate) bool {
		return a.server == b.server && a.original == b.original
	})
	w := cs[0]
	if len(cs) > 1 {
		c := Collision{Kind: kind, Name: key, Winner: w.server}
		if named {
			c.WinnerOriginal = w.original
		}
		for _, l := range cs[1:] {
			c.Losers = append(c.Losers, l.server)
			if named {
				c.LoserOriginals = append(c.LoserOriginals, l.original)
			}
		}
		s.collisions = append(s.collisions, c)
	}
	return w
}

// logCollisions warns once about each collision as it appears (or changes
// its winner or losers); a collision that persists across recomputes is not
// logged again.
func (r *Registry) logCollisions(cs []Collision) {
	seen := make(map[string]bool, len(cs))
	for _, c := range cs {
		fp := string(c.Kind) + "\x00" + c.Name + "\x00" + c.Winner + "\x00" + c.WinnerOriginal + "\x00" +
			strings.Join(c.Losers, ",") + "\x00" + strings.Join(c.LoserOriginals, ",")
		seen[fp] = true
		if r.reported[fp] {
			continue
		}
		args := []any{"kind", c.Kind, "exposed", c.Name, "winner", c.Winner, "losers", c.Losers}
		if c.WinnerOriginal != "" {
			args = append(args, "winner_original", c.WinnerOriginal, "loser_originals", c.LoserOriginals)
		}
		r.logger.Warn("name collision: the first server by name wins, the others are hidden", args...)
	}
	r.reported = seen
}

// logRenames warns once about each tool or prompt that got a
// disambiguated name, naming its original and the originals it clashed
// with; a rename that persists across recomputes is not logged again.
func (r *Registry) logRenames(rs []Rename) {
	seen := make(map[string]bool, len(rs))
	for _, n := range rs {
		fp := string(n.Kind) + "\x00" + n.Server + "\x00" + n.Original + "\x00" + n.Exposed + "\x00" + strings.Join(n.Clashes, ",")
		seen[fp] = true
		if r.renamed[fp] {
			continue
		}
		r.logger.Warn("names clash once sanitised: exposing this one under a name with a hash suffix",
			"kind", n.Kind, "server", n.Server, "original", n.Original, "clashes_with", n.Clashes,
			"sanitised", n.Sanitised, "exposed", n.Exposed)
	}
	r.renamed = seen
}

func diff(old, next *snapshot) Changes {
	var ch Changes
	ch.AddTools, ch.RemoveTools = diffMap(old.tools, next.tools, func(a, b ToolEntry) bool {
		return a.Server == b.Server && a.Original == b.Original && reflect.DeepEqual(*a.Tool, *b.Tool)
	}, func(e ToolEntry) string { return e.Tool.Name })
	ch.AddPrompts, ch.RemovePrompts = diffMap(old.prompts, next.prompts, func(a, b PromptEntry) bool {
		return a.Server == b.Server && a.Original == b.Original && reflect.DeepEqual(*a.Prompt, *b.Prompt)
	}, func(e PromptEntry) string { return e.Prompt.Name })
	ch.AddResources, ch.RemoveResources = diffMap(old.resources, next.resources, func(a, b ResourceEntry) bool {
		return a.Server == b.Server && reflect.DeepEqual(*a.Resource, *b.Resource)
	}, func(e ResourceEntry) string { return e.Resource.URI })
	ch.AddTemplates, ch.RemoveTemplates = diffMap(old.templates, next.templates, func(a, b TemplateEntry) bool {
		return a.Server == b.Server && reflect.DeepEqual(*a.Template, *b.Template)
	}, func(e TemplateEntry) string { return e.Template.URITemplate })
	return ch
}

// diffMap returns the entries of next that are new or differ from old, and
// the keys of old that next no longer has, both sorted by key.
func diffMap[E any](old, next map[string]E, same func(a, b E) bool, key func(E) string) (add []E, remove []string) {
	for k, e := range next {
		if o, ok := old[k]; !ok || !same(o, e) {
			add = append(add, e)
		}
	}
	for k := range old {
		if _, ok := next[k]; !ok {
			remove = append(remove, k)
		}
	}
	sort.Slice(add, func(i, j int) bool { return key(add[i]) < key(add[j]) })
	sort.Strings(remove)
	return add, remove
}

// LookupTool returns the entry exposed under name. It never blocks.
func (r *Registry) LookupTool(exposed string) (ToolEntry, bool) {
	e, ok := r.snap.Load().tools[exposed]
	return e, ok
}

// LookupDormant returns the tool a server exposed under name before its
// catalog was withdrawn (it parked, or is restarting), when no live server
// exposes that name now. A call to it goes to that server, whose
// supervisor may revive it. It never blocks.
func (r *Registry) LookupDormant(exposed string) (ToolEntry, bool) {
	e, ok := r.snap.Load().dormant[exposed]
	return e, ok
}

// LookupUnlisted returns the tool a call to exposed would reach on a
// named server that has no catalog now (it never started, is starting,
// or is parked) when no live or dormant entry has that name: exposed is
// the server's prefix, the separator and a tool name its include and
// exclude globs let through (the longest prefix wins). The tool may not
// exist: only the server, once up, can say (docs/supervision.md: a call
// reaches a server that never started). A server without a prefix is
// never matched. It never blocks.
func (r *Registry) LookupUnlisted(exposed string) (ToolEntry, bool) {
	for _, spec := range r.snap.Load().unlisted {
		p := sanitise(spec.Prefix) + r.sep
		if rest, ok := strings.CutPrefix(exposed, p); ok && rest != "" && toolAllowed(spec, rest) {
			return ToolEntry{Tool: &mcp.Tool{Name: exposed}, Server: spec.Name, Original: rest}, true
		}
	}
	return ToolEntry{}, false
}

// unlisted is the named servers with a prefix and no catalog, longest
// prefix first, then by name. r.mu must be held (or r not yet shared).
func (r *Registry) unlisted() []ServerSpec {
	var out []ServerSpec
	for name, spec := range r.specs {
		if _, listed := r.catalogs[name]; !listed && spec.Prefix != "" {
			out = append(out, spec)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if len(out[i].Prefix) != len(out[j].Prefix) {
			return len(out[i].Prefix) > len(out[j].Prefix)
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// LookupPrompt returns the prompt exposed under name. It never blocks.
func (r *Registry) LookupPrompt(exposed string) (PromptEntry, bool) {
	e, ok := r.snap.Load().prompts[exposed]
	return e, ok
}

// LookupResource returns the server that owns uri: the server of an exposed
// resource with exactly that URI, else of a template whose text is exactly
// uri (as in a completion reference), else of the first template (by server
// name) that matches uri. It never blocks.
func (r *Registry) LookupResource(uri string) (server string, ok bool) {
	s := r.snap.Load()
	if e, ok := s.resources[uri]; ok {
		return e.Server, true
	}
	if e, ok := s.templates[uri]; ok {
		return e.Server, true
	}
	for _, m := range s.matchers {
		if m.match(uri) {
			return m.entry.Server, true
		}
	}
	return "", false
}

// Tools returns the exposed tools sorted by exposed name. The slice is the
// caller's; the entries' tools must not be modified.
func (r *Registry) Tools() []ToolEntry {
	return slices.Clone(r.snap.Load().toolList)
}

// Prompts returns the exposed prompts sorted by exposed name.
func (r *Registry) Prompts() []PromptEntry {
	return sortedValues(r.snap.Load().prompts)
}

// Resources returns the exposed resources sorted by URI.
func (r *Registry) Resources() []ResourceEntry {
	return sortedValues(r.snap.Load().resources)
}

// Templates returns the exposed resource templates sorted by URI template.
func (r *Registry) Templates() []TemplateEntry {
	return sortedValues(r.snap.Load().templates)
}

// Collisions returns the current collisions, sorted by kind and name.
func (r *Registry) Collisions() []Collision {
	cs := slices.Clone(r.snap.Load().collisions)
	for i := range cs {
		cs[i].Losers = slices.Clone(cs[i].Losers)
		cs[i].LoserOriginals = slices.Clone(cs[i].LoserOriginals)
	}
	return cs
}

// Renames returns the tools and prompts currently exposed under a
// disambiguated name, sorted by the name they clashed on.
func (r *Registry) Renames() []Rename {
	rs := slices.Clone(r.snap.Load().renames)
	for i := range rs {
		rs[i].Clashes = slices.Clone(rs[i].Clashes)
	}
	return rs
}

func sortedValues[E any](m map[string]E) []E {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]E, 0, len(keys))
	for _, k := range keys {
		out = append(out, m[k])
	}
	return out
}
