package wire

import (
	"bytes"
	"encoding/json"
	"testing"
)

// Members must see exactly the members encoding/json sees (the last of
// duplicate keys wins there; here every occurrence is visited in order, so
// keeping the last one gives the same map).
func FuzzMembers(f *testing.F) {
	for _, s := range []string{
		`{}`,
		` { "a" : 1 , "b":[1,{"c":"}"}], "d":"x\"y", "e":null,"f":true,"g":-1.5e3 } `,
		`{"\u0061":1,"a":2}`,
		`{"name":"echo__echo","arguments":{"text":"x"},"_meta":{"progressToken":7}}`,
		`[1,2]`,
		`"str"`,
		`{"a":{"b":{"c":[[],{}]}},"z":""}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		var want map[string]json.RawMessage
		isObj := json.Unmarshal(data, &want) == nil && bytes.TrimSpace(data)[0] == '{'
		got := map[string]json.RawMessage{}
		ok := Members(data, func(key []byte, start, end int) bool {
			got[string(key)] = data[start:end]
			return true
		})
		if ok != isObj {
			t.Fatalf("Members(%q) = %v, want %v", data, ok, isObj)
		}
		if !ok {
			return
		}
		if len(got) != len(want) {
			t.Fatalf("Members(%q): %d members, want %d", data, len(got), len(want))
		}
		for k, w := range want {
			if g, ok := got[k]; !ok || !bytes.Equal(g, w) {
				t.Fatalf("Members(%q)[%q] = %q, want %q", data, k, g, w)
			}
		}
	})
}

func FuzzQuote(f *testing.F) {
	for _, s := range []string{"", "echo", `a"b`, "a\\b", "<&>", "\u2028", "é", "\x00", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := Quote(s); !bytes.Equal(got, want) {
			t.Fatalf("Quote(%q) = %s, want %s", s, got, want)
		}
		var back string
		json.Unmarshal(want, &back)
		if got := Unquote(want); got != back {
			t.Fatalf("Unquote(%s) = %q, want %q", want, got, back)
		}
	})
}
