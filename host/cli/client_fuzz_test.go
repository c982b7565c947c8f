package cli

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzClientDocEdit checks the in-place editor of client config files
// (client install/uninstall) against encoding/json: for any file it
// accepts, adding mcpvisor's entry gives valid JSON that decodes to the
// file's object with that one entry added, and removing the entry again
// gives back the original bytes exactly (when the file already listed a
// server: an empty servers object comes back as "{}").
func FuzzClientDocEdit(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`{"mcpServers":{}}`,
		"{\n  \"mcpServers\": {\n    \"fs\": {\"command\": \"npx\"}\n  },\n  \"theme\": \"dark\"\n}\n",
		"{\n\t\"servers\": {\"a\": {\"command\": \"x\", \"args\": [\"1\"]}}\n}",
		`{"other":[1,2,{"x":null}],"mcpServers":{"a":{},"b":{"command":"y"}}}`,
		`  { "mcpServers" : { } }  `,
	} {
		f.Add([]byte(seed))
	}
	entry := json.RawMessage(`{"command":"/usr/local/bin/mcpvisor","args":["run","--stdio","-config","/etc/mcpvisor/config.hcl"]}`)
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := parseOrdered(bytes.Clone(data))
		if err != nil {
			return
		}
		var before, before0 map[string]any
		json.Unmarshal(data, &before0)
		if json.Unmarshal(data, &before) != nil {
			t.Fatalf("parseOrdered accepted what encoding/json refuses: %q", data)
		}
		replaced, err := d.setServer("mcpServers", "mcpvisor", entry)
		if err != nil || replaced {
			return // a servers value that is not an object, or an entry already there
		}
		out := d.encode()
		var after map[string]any
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("adding the entry made invalid JSON (%v):\n%s\nfrom\n%s", err, out, data)
		}
		servers, _ := after["mcpServers"].(map[string]any)
		if servers == nil {
			t.Fatalf("no mcpServers object after adding the entry:\n%s", out)
		}
		var want any
		json.Unmarshal(entry, &want)
		if !reflect.DeepEqual(servers["mcpvisor"], want) {
			t.Fatalf("the entry decodes as %v, want %v:\n%s", servers["mcpvisor"], want, out)
		}
		delete(servers, "mcpvisor")
		if prev, ok := before["mcpServers"]; ok {
			if !reflect.DeepEqual(prev, servers) {
				t.Fatalf("the other servers changed: %v, want %v", servers, prev)
			}
		} else if len(servers) == 0 {
			delete(after, "mcpServers")
		}
		delete(before, "mcpServers")
		delete(after, "mcpServers")
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("other keys changed: %v, want %v", after, before)
		}

		d2, err := parseOrdered(bytes.Clone(out))
		if err != nil {
			t.Fatalf("the edited file does not parse again: %v\n%s", err, out)
		}
		removed, err := d2.removeServer("mcpServers", "mcpvisor")
		if err != nil || !removed {
			t.Fatalf("removing the entry just added: removed %v, %v\n%s", removed, err, out)
		}
		// Byte for byte when the file already listed servers; an empty
		// servers object comes back as "{}" whatever spacing it had.
		if prev, ok := before0["mcpServers"].(map[string]any); ok && len(prev) > 0 {
			if got := d2.encode(); !bytes.Equal(got, data) {
				t.Fatalf("install then uninstall changed the file:\n%q\nwant\n%q", got, data)
			}
		}
	})
}
