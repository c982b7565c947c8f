// Package h1text holds the HTTP/1.1 text checks shared by mcpvisor's two
// small HTTP parsers (the front's request heads and the raw poster's
// response heads), and a header builder that allocates little.
package h1text

import (
	"net/http"
	"net/textproto"
	"strings"
)

// tchar marks the RFC 9110 token characters.
var tchar = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// IsToken reports whether s is a non-empty RFC 9110 token.
func IsToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !tchar[s[i]] {
			return false
		}
	}
	return len(s) > 0
}

// IsVisible reports whether s is printable ASCII without spaces.
func IsVisible(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// ValidValue refuses control characters other than horizontal tab, as
// net/http does.
func ValidValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// ASCIIValue is ValidValue that also refuses bytes above 0x7e.
func ASCIIValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c >= 0x7f {
			return false
		}
	}
	return true
}

// TrimOWS trims optional whitespace (spaces and tabs).
func TrimOWS(s string) string { return strings.Trim(s, " \t") }

// AllDigits reports whether s is decimal digits only.
func AllDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// HasToken reports whether the comma-separated list v holds token,
// case-insensitively.
func HasToken(v, token string) bool {
	for part := range strings.SplitSeq(v, ",") {
		if strings.EqualFold(TrimOWS(part), token) {
			return true
		}
	}
	return false
}

// Header builds an http.Header whose first value of each field shares
// one allocation.
type Header struct {
	H    http.Header
	vals []string
}

// NewHeader returns a Header for up to n fields (more still work).
func NewHeader(n int) Header {
	return Header{H: make(http.Header, n), vals: make([]string, 0, n)}
}

// Reset empties b for the next head, keeping its storage: the fields of
// the last one must no longer be in use.
func (b *Header) Reset() {
	clear(b.H)
	clear(b.vals)
	b.vals = b.vals[:0]
}

// Add adds a field; name must be a token (see IsToken). It is stored in
// canonical form, without allocating when it already is.
func (b *Header) Add(name, value string) string {
	key := textproto.CanonicalMIMEHeaderKey(name)
	if old, ok := b.H[key]; ok {
		b.H[key] = append(old, value)
		return key
	}
	if len(b.vals) < cap(b.vals) {
		i := len(b.vals)
		b.vals = append(b.vals, value)
		b.H[key] = b.vals[i : i+1 : i+1]
		return key
	}
	b.H[key] = []string{value}
	return key
}
