package wire

import (
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestMarshalResultDoesNotEscapeHTML(t *testing.T) {
	text := `<a href="x">&amp;</a> \u003c stays a backslash, ` + "\u2028"
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
	std, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	got, err := MarshalResult(res)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(got) {
		t.Fatalf("not JSON: %s", got)
	}
	want := `{"content":[{"type":"text","text":"<a href=\"x\">&amp;</a> \\u003c stays a backslash, \u2028"}]}`
	if string(got) != want {
		t.Fatalf("MarshalResult =\n%s\nwant\n%s\n(encoding/json: %s)", got, want, std)
	}
	var back mcp.CallToolResult
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatal(err)
	}
	if tc := back.Content[0].(*mcp.TextContent); tc.Text != text {
		t.Fatalf("round trip: %q, want %q", tc.Text, text)
	}
}

func TestUnescapeHTML(t *testing.T) {
	for in, want := range map[string]string{
		`"\u003c\u003E\u0026"`:      `"<>&"`,
		`"\\u003c"`:                 `"\\u003c"`,
		`"\\\u003c"`:                `"\\<"`,
		`"\u00e9\n\"\u003c"`:        `"\u00e9\n\"<"`,
		`{"a":"x"}`:                 `{"a":"x"}`,
		`["\u2028","\ud83d\ude00"]`: `["\u2028","\ud83d\ude00"]`,
	} {
		if got := string(UnescapeHTML([]byte(in))); got != want {
			t.Errorf("UnescapeHTML(%s) = %s, want %s", in, got, want)
		}
	}
}
