package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

var validSeeds = []string{
	``, ` `, `{}`, `[]`, `""`, `0`, `-0`, `01`, `-`, `1.`, `1.5`, `.5`, `1e5`, `1E+5`, `1e-5`, `1e`, `1e+`, `-1.5e3`,
	`true`, `tru`, `false`, `null`, `nul`, `nulll`, `truex`,
	`{"a":1}`, `{"a":1,}`, `{,}`, `{"a"}`, `{"a":}`, `{a:1}`, `[1,]`, `[,1]`, `[1 2]`, `{"a":1 "b":2}`,
	` { "a" : [ 1 , { "b" : null } ] } `, `{"a":1}}`, `[[]]]`, `1 2`, "\t\n\r 1 \r\n\t", "\v1", "\u00a01",
	`"\"\\\/\b\f\n\r\t"`, `"\u00e9"`, `"\u00G9"`, `"\u00e"`, `"\x"`, `"a`, "\"\x1f\"", "\"\x7f\"", "\"\xff\xfe\"", `"é"`,
	`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo__echo","arguments":{"text":"x"}}}`,
}

// Valid must agree with json.Valid on every input.
func FuzzValid(f *testing.F) {
	for _, s := range validSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := Valid(data), json.Valid(data); got != want {
			t.Fatalf("Valid(%q) = %v, json.Valid says %v", data, got, want)
		}
	})
}

func TestValidDepthLimit(t *testing.T) {
	for _, n := range []int{maxDepth - 1, maxDepth, maxDepth + 1} {
		for _, open := range []string{"[", `{"a":`} {
			close := "]"
			if open != "[" {
				close = "}"
			}
			s := []byte(strings.Repeat(open, n) + "1" + strings.Repeat(close, n))
			if got, want := Valid(s), json.Valid(s); got != want {
				t.Errorf("depth %d of %q: Valid = %v, json.Valid = %v", n, open, got, want)
			}
		}
	}
}

func BenchmarkValid(b *testing.B) {
	msg := []byte(`{"jsonrpc":"2.0","id":"mcpvisor-fast-12","result":{"content":[{"type":"text","text":"x"}],"structuredContent":{"echo":"x"}}}`)
	b.Run("rawjson", func(b *testing.B) {
		for range b.N {
			Valid(msg)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for range b.N {
			json.Valid(msg)
		}
	})
}

func TestNestedDeeper(t *testing.T) {
	for _, tc := range []struct {
		data  string
		limit int
		want  bool
	}{
		{`1`, 0, false},
		{`{}`, 0, true},
		{`{}`, 1, false},
		{`[[1],{"a":[2]}]`, 2, true},
		{`[[1],{"a":[2]}]`, 3, false},
		{`{"a":"[[[[{{{{"}`, 1, false},
		{`{"a":"\"[[["}`, 1, false},
		{strings.Repeat("[", 1001) + strings.Repeat("]", 1001), MaxNesting, true},
		{strings.Repeat("[", 1000) + strings.Repeat("]", 1000), MaxNesting, false},
	} {
		if got := NestedDeeper([]byte(tc.data), tc.limit); got != tc.want {
			t.Errorf("NestedDeeper(%.40q, %d) = %v, want %v", tc.data, tc.limit, got, tc.want)
		}
	}
}
