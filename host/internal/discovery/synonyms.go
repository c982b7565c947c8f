package discovery

import "strings"

// synonyms maps a word a person uses for a request to the words tools use
// for the same thing in their names and descriptions. It is deliberately
// small and generic (verbs of data handling, the nouns of files, code
// hosting and notes): a synonym only adds a lower-weighted query
// (weightSynonyms), so a wrong guess costs little and the user's own words
// always count most. Keys are lower case; inflected forms are listed where
// the stemmer would not bring them together.
var synonyms = map[string][]string{
	// Writing and storing.
	"save":     {"write", "create", "store"},
	"saving":   {"write", "create", "store"},
	"store":    {"write", "save"},
	"persist":  {"write", "save", "store"},
	"put":      {"write", "create"},
	"make":     {"create"},
	"new":      {"create"},
	"add":      {"create", "add"},
	"open":     {"create", "read"},
	"start":    {"create"},
	"file":     {"file"},
	"record":   {"create", "add", "observation"},
	"remember": {"memory", "entity", "observation", "add"},
	"note":     {"observation", "entity", "memory"},
	"notes":    {"observation", "entity", "memory"},
	"fact":     {"observation", "entity"},
	"facts":    {"observation", "entity"},

	// Reading and looking.
	"show":      {"read", "get", "list"},
	"display":   {"read", "get"},
	"view":      {"read", "get"},
	"see":       {"read", "get", "list"},
	"fetch":     {"get", "read"},
	"load":      {"read", "get"},
	"contents":  {"read", "content"},
	"content":   {"read", "contents"},
	"look":      {"search", "find", "get"},
	"lookup":    {"search", "find", "get"},
	"locate":    {"search", "find"},
	"find":      {"search"},
	"query":     {"search"},
	"what":      {"get", "info"},
	"details":   {"get", "info"},
	"info":      {"get", "information", "metadata"},
	"metadata":  {"info", "information"},
	"size":      {"info", "metadata"},
	"enumerate": {"list"},
	"all":       {"list"},
	"tree":      {"directory", "tree"},

	// Changing and removing.
	"change":   {"edit", "update", "modify"},
	"modify":   {"edit", "update"},
	"alter":    {"edit", "update"},
	"fix":      {"edit", "update"},
	"replace":  {"edit"},
	"rename":   {"move"},
	"relocate": {"move"},
	"delete":   {"delete", "remove"},
	"remove":   {"delete", "remove"},
	"erase":    {"delete", "remove"},
	"drop":     {"delete", "remove"},
	"forget":   {"delete", "remove"},
	"close":    {"update", "state"},
	"comment":  {"comment"},
	"reply":    {"comment"},

	// Places and things.
	"folder":       {"directory"},
	"folders":      {"directory"},
	"dir":          {"directory"},
	"repo":         {"repository"},
	"repos":        {"repository"},
	"project":      {"repository"},
	"bug":          {"issue"},
	"bugs":         {"issue"},
	"ticket":       {"issue"},
	"tickets":      {"issue"},
	"pr":           {"pull", "request"},
	"prs":          {"pull", "request"},
	"merge":        {"merge", "pull"},
	"code":         {"code", "file"},
	"source":       {"code", "file"},
	"picture":      {"image"},
	"photo":        {"image"},
	"png":          {"image"},
	"people":       {"entity", "user"},
	"person":       {"entity", "user"},
	"link":         {"relation"},
	"links":        {"relation"},
	"connect":      {"relation"},
	"relationship": {"relation"},

	// Thinking.
	"think":  {"thought", "thinking"},
	"reason": {"thought", "thinking"},
	"plan":   {"thought", "thinking"},
	"step":   {"thought"},
	"steps":  {"thought"},

	// Arithmetic and testing.
	"sum":       {"add"},
	"plus":      {"add"},
	"total":     {"add"},
	"wait":      {"long", "running", "operation"},
	"repeat":    {"echo"},
	"say":       {"echo"},
	"env":       {"environment"},
	"variables": {"environment"},
}

// expand returns the synonyms of the words of text (already split by
// Words), each once, leaving out words text has itself; "" when none.
func expand(text string) string {
	words := strings.Fields(text)
	have := map[string]bool{}
	for _, w := range words {
		have[w] = true
	}
	var out []string
	for _, w := range words {
		for _, s := range synonyms[w] {
			if !have[s] {
				have[s] = true
				out = append(out, s)
			}
		}
	}
	return strings.Join(out, " ")
}
