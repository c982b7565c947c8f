package wire

// maxDepth is encoding/json's nesting limit: Valid refuses deeper input as
// json.Valid does.
const maxDepth = 10000

// Valid reports whether data is one JSON value with optional surrounding
// whitespace, exactly as json.Valid does (FuzzValid), in one pass without
// json.Valid's per-byte state machine. Like json.Valid it checks syntax
// only: bytes of 0x80 and above pass inside strings unchecked.
func Valid(data []byte) bool {
	v := validator{b: data}
	i, ok := v.value(skipSpace(data, 0), 0)
	return ok && skipSpace(data, i) == len(data)
}

type validator struct{ b []byte }

// value checks the value at b[i] and returns the index just past it.
func (v *validator) value(i, depth int) (int, bool) {
	b := v.b
	if i >= len(b) {
		return i, false
	}
	switch c := b[i]; {
	case c == '"':
		return v.str(i)
	case c == '{' || c == '[':
		if depth++; depth > maxDepth {
			return i, false
		}
		object, end := c == '{', byte(']')
		if object {
			end = '}'
		}
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == end {
			return i + 1, true
		}
		for {
			var ok bool
			if object { // a member's key and colon first
				if i >= len(b) || b[i] != '"' {
					return i, false
				}
				if i, ok = v.str(i); !ok {
					return i, false
				}
				if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
					return i, false
				}
				i = skipSpace(b, i+1)
			}
			if i, ok = v.value(i, depth); !ok {
				return i, false
			}
			if i = skipSpace(b, i); i >= len(b) {
				return i, false
			}
			switch b[i] {
			case ',':
				i = skipSpace(b, i+1)
			case end:
				return i + 1, true
			default:
				return i, false
			}
		}
	case c == '-' || (c >= '0' && c <= '9'):
		return v.number(i)
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	}
	return i, false
}

func literal(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

// str checks the string literal at b[i] (its opening quote).
func (v *validator) str(i int) (int, bool) {
	b := v.b
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return i, false
		case c == '\\':
			if i++; i >= len(b) {
				return i, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-i < 5 {
					return i, false
				}
				for _, h := range b[i+1 : i+5] {
					if !isHex(h) {
						return i, false
					}
				}
				i += 4
			default:
				return i, false
			}
		}
	}
	return i, false
}

// number checks the number at b[i]: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (v *validator) number(i int) (int, bool) {
	b := v.b
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return j, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return j, false
		}
		i = j
	}
	return i, true
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// MaxNesting is the go-sdk's JSON nesting limit: a message nested deeper
// is refused by the SDK's decoder, and a go-sdk peer on stdio may end its
// session on one. What mcpvisor forwards as bytes must stay within it.
const MaxNesting = 1000

// NestedDeeper reports whether the valid JSON value data nests objects and
// arrays more than limit levels deep.
func NestedDeeper(data []byte, limit int) bool {
	depth := 0
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '"':
			i = skipString(data, i) - 1
		case '{', '[':
			if depth++; depth > limit {
				return true
			}
		case '}', ']':
			depth--
		}
	}
	return false
}
