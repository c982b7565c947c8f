package registry

import (
	"regexp"
	"strings"
)

// compileTemplate turns an RFC 6570 URI template into an anchored regular
// expression good enough for routing a concrete URI back to the server that
// offered the template. Simple expressions ({var}, {a,b}) match one or more
// characters other than '/'; reserved and fragment expressions ({+var},
// {#var}) match anything; path-style and query expressions ({/var}, {?q},
// {&q}, {;p}, {.ext}) are optional and match their operator followed by
// anything up to the next '/' (or to the end for query forms). A template
// with an unterminated brace yields nil: it can still be found by its exact
// text, but never matches a URI.
func compileTemplate(tmpl string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	rest := tmpl
	for rest != "" {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			b.WriteString(regexp.QuoteMeta(rest))
			break
		}
		b.WriteString(regexp.QuoteMeta(rest[:open]))
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return nil
		}
		expr := rest[open+1 : open+end]
		rest = rest[open+end+1:]
		if expr == "" {
			return nil
		}
		switch expr[0] {
		case '+':
			b.WriteString(`.*`)
		case '#':
			b.WriteString(`(?:#.*)?`)
		case '/', '.', ';':
			b.WriteString(`(?:` + regexp.QuoteMeta(expr[:1]) + `[^/?#]*)*`)
		case '?', '&':
			b.WriteString(`(?:[?&].*)?`)
		default:
			b.WriteString(`[^/?#]+`)
		}
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil
	}
	return re
}
