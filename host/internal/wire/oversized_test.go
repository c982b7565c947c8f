package wire

import (
	"strings"
	"testing"
)

func TestOversizedResponseID(t *testing.T) {
	big := strings.Repeat("y", 64)
	for _, tc := range []struct {
		name, line string
		want       string // "" for none
	}{
		{"go-sdk order", `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"` + big + `"}]}}`, "7"},
		{"typescript order", `{"result":{"content":[{"type":"text","text":"` + big + `"}]},"jsonrpc":"2.0","id":7}`, "7"},
		{"string id at the end", `{"result":{"x":"` + big + `"}, "jsonrpc":"2.0", "id" : "fwd-3" }` + "\r\n", `"fwd-3"`},
		{"error response", `{"error":{"code":1,"message":"` + big + `"},"jsonrpc":"2.0","id":2}`, "2"},
		{"a request", `{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":{"x":"` + big + `"}}`, ""},
		{"a request, method last", `{"params":{"x":"` + big + `"},"jsonrpc":"2.0","method":"x","id":7}`, ""},
		{"an id inside the text", `{"result":{"text":"` + big + `\",\"id\":9}"},"jsonrpc":"2.0"}`, ""},
		{"an escaped id at the end", `{"result":{"text":"` + big + `\"id\":9}`, ""},
		{"no id", `{"result":{"text":"` + big + `"}}`, ""},
		{"not JSON", big, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The head is cut inside the large value, the tail starts in it.
			cut := strings.Index(tc.line, big) + 10
			head, tail := []byte(tc.line[:cut]), []byte(tc.line[cut+20:])
			id, ok := OversizedResponseID(head, tail)
			if got := string(id); ok != (tc.want != "") || got != tc.want {
				t.Errorf("OversizedResponseID = %q, %v; want %q", got, ok, tc.want)
			}
		})
	}
}
