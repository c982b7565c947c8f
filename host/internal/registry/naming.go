package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"path"
	"strings"
)

// MaxNameLen is the longest exposed tool or prompt name. Clients (and the
// model APIs behind them) reject longer tool names, so longer names are cut.
const MaxNameLen = 64

// hashSuffixLen is the number of hex digits of the SHA-256 of the full,
// unsanitised name appended to a cut name. 32 bits keep two long names that
// share their first 55 characters apart in any realistic catalog.
const hashSuffixLen = 8

// ExposedName returns the name under which an upstream tool or prompt called
// name is exposed: prefix + sep + name, or name alone when prefix is empty.
// Runes outside [A-Za-z0-9_.-] become '_'. A result longer than MaxNameLen
// is cut and ends in "_" plus a short hash of the full unsanitised name, so
// the same input always gives the same output and two long names that differ
// only at their end stay distinct. An empty prefix and name give "".
func ExposedName(prefix, sep, name string) string {
	full := fullName(prefix, sep, name)
	if full == "" {
		return ""
	}
	clean := sanitise(full)
	if len(clean) <= MaxNameLen {
		return clean
	}
	sum := sha256.Sum256([]byte(full))
	keep := MaxNameLen - 1 - hashSuffixLen
	return clean[:keep] + "_" + hex.EncodeToString(sum[:])[:hashSuffixLen]
}

// Aliases are the names besides the exposed one that a policy glob may
// have been written for, given an entry's Full name: Full itself (the
// upstream's own name with the prefix, "weird__del/ete") and Full made
// valid but not yet cut or made unique ("weird__del_ete"), so a deny of
// either still holds when the exposed name had to change (a clash
// suffix, a cut). Empty without a Full name.
func Aliases(full string) []string {
	if full == "" {
		return nil
	}
	return []string{full, sanitise(full)}
}

// fullName is what ExposedName sanitises: prefix + sep + name, or name
// alone when prefix is empty.
func fullName(prefix, sep, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + sep + name
}

// disambiguated returns exposed (what ExposedName gave for full) with "_"
// and a short hash of full appended, cut so the result stays within
// MaxNameLen. Two distinct full names that sanitise to the same exposed
// name get two distinct results, and the result depends on full alone, so
// it is the same on every re-list and restart, whatever the list order.
func disambiguated(exposed, full string) string {
	sum := sha256.Sum256([]byte(full))
	suffix := "_" + hex.EncodeToString(sum[:])[:hashSuffixLen]
	if len(exposed)+len(suffix) > MaxNameLen {
		exposed = exposed[:MaxNameLen-len(suffix)]
	}
	return exposed + suffix
}

// sanitise maps every rune outside [A-Za-z0-9_.-] to '_'. The result is
// ASCII, so its byte length equals the input's rune count.
func sanitise(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if validNameRune(r) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func validNameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
		r == '_' || r == '.' || r == '-'
}

// toolAllowed applies a server's include/exclude globs (path.Match syntax)
// to an upstream tool's original name. Include wins: a name matching Include
// is always exposed; otherwise a name matching Exclude is hidden; with a
// non-empty Include, names matching neither are hidden. A malformed glob
// matches nothing (config validation reports it before it gets here).
func toolAllowed(spec ServerSpec, name string) bool {
	if matchAny(spec.Include, name) {
		return true
	}
	if matchAny(spec.Exclude, name) {
		return false
	}
	return len(spec.Include) == 0
}

func matchAny(globs []string, name string) bool {
	for _, g := range globs {
		if ok, err := path.Match(g, name); err == nil && ok {
			return true
		}
	}
	return false
}
