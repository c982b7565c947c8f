package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// termSafe makes text an upstream server chose (tool names and
// descriptions, stderr lines, error messages, status reasons) safe to print
// on a terminal: every control character — C0 (tab and newline included:
// they would break a table row or forge one), DEL and C1 — is written as a
// visible \xNN or \uNNNN escape, so an upstream cannot clear the screen,
// retitle the window, plant a hyperlink or move the cursor with ESC, CSI
// or OSC sequences. The Unicode bidirectional overrides are escaped too:
// they reorder what is shown. Invalid UTF-8 bytes become \xNN. JSON output
// needs none of this: encoding/json escapes control characters already.
// See docs/security.md, "Terminal output".
func termSafe[S ~string](str S) string {
	s := string(str)
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r <= 0x9f, isBidiControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// termSafeErr is termSafe of err's message.
func termSafeErr(err error) string {
	if err == nil {
		return ""
	}
	return termSafe(err.Error())
}

func needsEscape(s string) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || isBidiControl(r) || (r == utf8.RuneError && size == 1) {
			return true
		}
		i += size
	}
	return false
}

// isBidiControl reports the explicit bidirectional formatting characters
// (embeddings, overrides, isolates and their terminators).
func isBidiControl(r rune) bool {
	return (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == 0x200e || r == 0x200f || r == 0x061c
}

// logWriter is a log destination that escapes what termSafe escapes except
// the newline that ends each entry and tabs: a server's stderr line is
// logged as the message of an entry, which hclog's text format writes as
// it is.
type logWriter struct{ w io.Writer }

func (l logWriter) Write(p []byte) (int, error) {
	s := string(p)
	if !needsEscape(strings.NewReplacer("\n", "", "\t", "").Replace(s)) {
		return l.w.Write(p)
	}
	var b strings.Builder
	for i, line := range strings.Split(s, "\n") {
		if i > 0 {
			b.WriteByte('\n')
		}
		for j, field := range strings.Split(line, "\t") {
			if j > 0 {
				b.WriteByte('\t')
			}
			b.WriteString(termSafe(field))
		}
	}
	if _, err := io.WriteString(l.w, b.String()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// writeJSON writes v as indented JSON with the characters encoding/json
// leaves raw but a terminal obeys — C1 controls (U+0080–U+009F, among
// them the one-byte CSI) and bidi overrides — escaped as \uXXXX: they can
// only stand inside JSON strings, where the escape means the same.
func writeJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	s := buf.String()
	var b strings.Builder
	for _, r := range s {
		if (r >= 0x80 && r <= 0x9f) || isBidiControl(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
			continue
		}
		b.WriteRune(r)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
