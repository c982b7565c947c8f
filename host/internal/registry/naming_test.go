package registry_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/host/internal/registry"
)

var validExposed = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

func TestExposedName(t *testing.T) {
	long := strings.Repeat("a", 70)
	tests := []struct {
		name, prefix, sep, tool string
		want                    string // "" means: check only the shape
	}{
		{"prefixed", "echo", "__", "echo", "echo__echo"},
		{"empty prefix keeps the name", "", "__", "read_file", "read_file"},
		{"custom separator", "fs", ".", "read", "fs.read"},
		{"dots and dashes kept", "a-b", "__", "x.y-z", "a-b__x.y-z"},
		{"spaces and slashes", "my server", "__", "do/it now", "my_server__do_it_now"},
		{"unicode rune becomes one underscore", "", "__", "héllo✓", "h_llo_"},
		{"separator sanitised too", "a", "::", "b", "a__b"},
		{"exactly 64 is not cut", "", "__", strings.Repeat("x", 64), strings.Repeat("x", 64)},
		{"empty input", "", "__", "", ""},
		{"65 is cut with a hash", "", "__", strings.Repeat("x", 65), ""},
		{"long prefixed", "server", "__", long, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := registry.ExposedName(tt.prefix, tt.sep, tt.tool)
			if tt.want != "" || tt.tool == "" {
				if got != tt.want {
					t.Fatalf("ExposedName(%q, %q, %q) = %q, want %q", tt.prefix, tt.sep, tt.tool, got, tt.want)
				}
				return
			}
			if !validExposed.MatchString(got) || len(got) != registry.MaxNameLen {
				t.Fatalf("ExposedName(%q, %q, %q) = %q (len %d): want a cut name of %d valid characters",
					tt.prefix, tt.sep, tt.tool, got, len(got), registry.MaxNameLen)
			}
			if !regexp.MustCompile(`_[0-9a-f]{8}$`).MatchString(got) {
				t.Errorf("cut name %q has no hash suffix", got)
			}
		})
	}
}

func TestExposedNameLongNamesStayDistinctAndStable(t *testing.T) {
	base := strings.Repeat("very_long_tool_name_", 5) // 100 chars
	a := registry.ExposedName("srv", "__", base+"alpha")
	b := registry.ExposedName("srv", "__", base+"beta")
	if a == b {
		t.Fatalf("two long names sharing a beginning collide: %q", a)
	}
	if a[:55] != b[:55] {
		t.Errorf("cut names should share the readable beginning: %q vs %q", a, b)
	}
	if again := registry.ExposedName("srv", "__", base+"alpha"); again != a {
		t.Errorf("not stable: %q then %q", a, again)
	}
	// Names that sanitise alike but differ in the original still differ
	// once cut, because the hash is of the unsanitised name.
	c := registry.ExposedName("", "__", strings.Repeat("x", 70)+"é")
	d := registry.ExposedName("", "__", strings.Repeat("x", 70)+"ü")
	if c == d {
		t.Errorf("unsanitised difference lost: %q", c)
	}
}

func FuzzExposedName(f *testing.F) {
	f.Add("echo", "__", "echo", "x")
	f.Add("", "__", "read_file", "y")
	f.Add("ünïcode server", "::", "tool/name with spaces", "z")
	f.Add("p", "__", strings.Repeat("n", 80), "tail")
	f.Add(strings.Repeat("p", 64), "", "", "q")
	f.Fuzz(func(t *testing.T, prefix, sep, name, tail string) {
		got := registry.ExposedName(prefix, sep, name)
		full := name
		if prefix != "" {
			full = prefix + sep + name
		}
		if full == "" {
			if got != "" {
				t.Fatalf("empty input gave %q", got)
			}
			return
		}
		if !validExposed.MatchString(got) {
			t.Fatalf("ExposedName(%q, %q, %q) = %q: not ^[A-Za-z0-9_.-]{1,64}$", prefix, sep, name, got)
		}
		if again := registry.ExposedName(prefix, sep, name); again != got {
			t.Fatalf("not deterministic: %q then %q", got, again)
		}
		// Two inputs that share their first 64 characters and differ
		// afterwards must map to distinct names.
		if tail == "" {
			return
		}
		long := full
		for len([]rune(long)) < 64 {
			long += "_"
		}
		x := registry.ExposedName("", sep, long+"a")
		y := registry.ExposedName("", sep, long+"a"+tail)
		if x == y {
			t.Fatalf("%q and %q both map to %q", long+"a", long+"a"+tail, x)
		}
	})
}

func TestFilters(t *testing.T) {
	tools := []string{"read_file", "write_file", "delete_file", "trigger-a", "trigger-b", "echo"}
	tests := []struct {
		name             string
		include, exclude []string
		want             []string
	}{
		{"no filter exposes all", nil, nil, []string{"delete_file", "echo", "read_file", "trigger-a", "trigger-b", "write_file"}},
		{"exclude glob", nil, []string{"trigger-*"}, []string{"delete_file", "echo", "read_file", "write_file"}},
		{"include only", []string{"*_file"}, nil, []string{"delete_file", "read_file", "write_file"}},
		{"include wins over exclude", []string{"trigger-a"}, []string{"trigger-*"}, []string{"trigger-a"}},
		{"include and exclude", []string{"read_*", "echo"}, []string{"*_file"}, []string{"echo", "read_file"}},
		{"bad glob matches nothing", nil, []string{"[", "echo"}, []string{"delete_file", "read_file", "trigger-a", "trigger-b", "write_file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := registry.New(nil, "__", []registry.ServerSpec{{Name: "s", Include: tt.include, Exclude: tt.exclude}}, nil)
			r.Update("s", &registry.Catalog{Tools: mkTools(tools...)})
			var got []string
			for _, e := range r.Tools() {
				got = append(got, e.Original)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("exposed %v, want %v", got, tt.want)
			}
		})
	}
}

func ExampleExposedName() {
	fmt.Println(registry.ExposedName("github", "__", "create_issue"))
	fmt.Println(registry.ExposedName("", "__", "read_file"))
	fmt.Println(registry.ExposedName("my server", "__", "do it/now"))
	long := registry.ExposedName("srv", "__", strings.Repeat("x", 80))
	fmt.Println(len(long), long[:10], long[55:56])
	// Output:
	// github__create_issue
	// read_file
	// my_server__do_it_now
	// 64 srv__xxxxx _
}

// TestAliases: a tool's aliases are its full upstream name and that name
// made valid, before any clash suffix or cut.
func TestAliases(t *testing.T) {
	if got := registry.Aliases("weird__del/ete"); len(got) != 2 || got[0] != "weird__del/ete" || got[1] != "weird__del_ete" {
		t.Errorf("Aliases(weird__del/ete) = %q", got)
	}
	if got := registry.Aliases(""); got != nil {
		t.Errorf("Aliases(\"\") = %q; want none", got)
	}
}
