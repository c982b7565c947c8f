package wire

import (
	"bytes"
	"encoding/json"
)

// MarshalResult encodes v (a result the go-sdk decoded) as JSON without
// HTML escaping: encoding/json writes '<', '>' and '&' as \u003c, \u003e
// and \u0026, and the go-sdk's content types encode themselves with
// json.Marshal, so a result of '<' would grow sixfold on its way through
// mcpvisor (docs/proxy.md, "Results pass through as bytes"). The escapes
// are turned back into the characters they stand for; every other byte
// is what encoding/json wrote.
func MarshalResult(v any) (json.RawMessage, error) {
	if m, ok := v.(json.Marshaler); ok {
		// The go-sdk's result types encode themselves: their bytes are
		// fresh, and unescaped in place.
		b, err := m.MarshalJSON()
		if err != nil {
			return nil, err
		}
		return UnescapeHTML(b), nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return UnescapeHTML(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), nil
}

// UnescapeHTML returns the JSON text b with the escapes \u003c, \u003e and
// \u0026 replaced by '<', '>' and '&', in place (b is changed). b must be
// valid JSON: outside strings it has no backslash, and inside one each
// backslash starts an escape, so walking escape by escape never mistakes
// an escaped backslash followed by "u003c" for an escape of '<'.
func UnescapeHTML(b []byte) []byte {
	i := bytes.IndexByte(b, '\\')
	if i < 0 {
		return b
	}
	out := b[:i]
	for i < len(b) {
		c := b[i]
		if c != '\\' {
			j := bytes.IndexByte(b[i:], '\\')
			if j < 0 {
				out = append(out, b[i:]...)
				break
			}
			out = append(out, b[i:i+j]...)
			i += j
			continue
		}
		if i+1 >= len(b) {
			out = append(out, c)
			break
		}
		if b[i+1] == 'u' && i+6 <= len(b) && b[i+2] == '0' && b[i+3] == '0' {
			if r, ok := htmlEscaped(b[i+4], b[i+5]); ok {
				out = append(out, r)
				i += 6
				continue
			}
		}
		// Any other escape: its two first bytes as they are (the rest of
		// a \uXXXX is plain hex and is copied by the next step).
		out = append(out, b[i], b[i+1])
		i += 2
	}
	return out
}

// htmlEscaped returns the character of a \u00XY escape that encoding/json
// writes for HTML safety.
func htmlEscaped(x, y byte) (byte, bool) {
	switch {
	case x == '3' && (y == 'c' || y == 'C'):
		return '<', true
	case x == '3' && (y == 'e' || y == 'E'):
		return '>', true
	case x == '2' && y == '6':
		return '&', true
	}
	return 0, false
}
