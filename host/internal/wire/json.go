package wire

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Members calls fn for each top-level member of the JSON object obj, in
// order, with its key (unescaped; valid only during the call, and not to
// be modified) and the byte range [start, end) of its value in obj. It
// stops early when fn returns false. It reports false if obj is not an
// object. obj must be valid JSON.
func Members(obj []byte, fn func(key []byte, start, end int) bool) bool {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return false
	}
	i++
	for {
		i = skipSpace(obj, i)
		if i >= len(obj) || obj[i] == '}' {
			return true
		}
		if obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
		if i >= len(obj) || obj[i] != '"' {
			return false
		}
		kEnd := skipString(obj, i)
		key := obj[i+1 : kEnd-1] // a plain key is its own bytes: no copy
		if containsByte(key, '\\') || !utf8.Valid(key) {
			key = []byte(Unquote(obj[i:kEnd]))
		}
		i = skipSpace(obj, kEnd)
		if i >= len(obj) || obj[i] != ':' {
			return false
		}
		start := skipSpace(obj, i+1)
		end := skipValue(obj, start)
		if !fn(key, start, end) {
			return true
		}
		i = end
	}
}

// Unquote returns the string a valid JSON string literal (quotes
// included) stands for.
func Unquote(lit []byte) string {
	if len(lit) >= 2 && !containsByte(lit, '\\') && utf8.Valid(lit) {
		return string(lit[1 : len(lit)-1])
	}
	var s string
	if json.Unmarshal(lit, &s) != nil {
		return ""
	}
	return s
}

// Quote returns s as a JSON string literal, escaped as encoding/json does.
func Quote(s string) []byte {
	if !strings.ContainsAny(s, "\"\\<>&\u2028\u2029") && isPlainASCII(s) {
		b := make([]byte, 0, len(s)+2)
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	b, _ := json.Marshal(s)
	return b
}

func isPlainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 {
			return false
		}
	}
	return true
}

func containsByte(b []byte, c byte) bool {
	for _, x := range b {
		if x == c {
			return true
		}
	}
	return false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index just past the string literal at b[i].
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// skipValue returns the index just past the value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	default: // number, true, false, null
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}
