package h1text

import (
	"net/http"
	"net/textproto"
	"reflect"
	"testing"
)

func TestHeaderMatchesHTTPHeaderAdd(t *testing.T) {
	fields := [][2]string{{"content-type", "a"}, {"X-A", "1"}, {"x-a", "2"}, {"Host", "h"}, {"mcp-session-id", "s"}, {"X-B", ""}, {"X-C", "c"}}
	want := http.Header{}
	for _, f := range fields {
		want.Add(f[0], f[1])
	}
	for _, n := range []int{0, 2, len(fields)} {
		b := NewHeader(n)
		for _, f := range fields {
			if key := b.Add(f[0], f[1]); key != textproto.CanonicalMIMEHeaderKey(f[0]) {
				t.Errorf("Add(%q) key %q", f[0], key)
			}
		}
		if !reflect.DeepEqual(b.H, want) {
			t.Errorf("n=%d: %v, want %v", n, b.H, want)
		}
		// Appending to one field's values must not clobber another's.
		b.H["Content-Type"] = append(b.H["Content-Type"], "z")
		if b.H.Get("X-A") != "1" || len(b.H["X-A"]) != 2 {
			t.Errorf("n=%d: appending to one field changed another: %v", n, b.H)
		}
	}
}

func TestChecks(t *testing.T) {
	for s, want := range map[string]bool{"Content-Type": true, "a!#$%&'*+-.^_`|~z": true, "": false, "a b": false, "a:": false, "é": false, "a\x00": false} {
		if IsToken(s) != want {
			t.Errorf("IsToken(%q) = %v", s, !want)
		}
	}
	if !ValidValue("a\tb é") || ValidValue("a\rb") || ValidValue("\x7f") {
		t.Error("ValidValue")
	}
	if ASCIIValue("é") || !ASCIIValue("a\t~") {
		t.Error("ASCIIValue")
	}
	if !HasToken("keep-alive, Close", "close") || HasToken("closed", "close") {
		t.Error("HasToken")
	}
	if !AllDigits("0123") || AllDigits("1a") || !IsVisible("/mcp?x=1") || IsVisible("/a b") {
		t.Error("AllDigits/IsVisible")
	}
}
