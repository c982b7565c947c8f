package config

// hclsyntax suggests a name for an unknown attribute or block only within
// an edit distance of two, which misses common slips such as max_retry for
// max_retries. suggestNames walks the syntax tree against the schema in
// schema.go and completes the "Unsupported argument" and "Unsupported block
// type" diagnostics that came without a suggestion, with a looser distance
// and with a hint for attributes written in the wrong block.

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// suggestNames adds suggestions to diags in place. body is the file's root.
func suggestNames(body hcl.Body, diags hcl.Diagnostics) {
	hints := map[int]string{} // by the start byte of the unknown name
	if root, ok := body.(*hclsyntax.Body); ok {
		collectHints(root, reflect.TypeOf(fileSchema{}), hints)
	}

	for _, d := range diags {
		if d.Subject == nil || strings.Contains(d.Detail, "Did you mean") {
			continue
		}
		if d.Summary == "Invalid single-argument block definition" {
			// HCL allows one argument in a one-line block; the examples
			// people copy often have several.
			d.Detail += " Put each argument of the block on a line of its own."
			continue
		}
		if d.Summary == "Variables not allowed" {
			// The usual cause is a missing pair of quotes.
			d.Detail += " A string needs double quotes, as in \"npx\"; env(\"NAME\") reads an environment variable."
			continue
		}
		if d.Summary != "Unsupported argument" && d.Summary != "Unsupported block type" {
			continue
		}
		if hint, ok := hints[d.Subject.Start.Byte]; ok {
			d.Detail += " " + hint
		}
	}
}

// collectHints records a hint for each attribute and block in body that the
// schema struct ty does not declare.
func collectHints(body *hclsyntax.Body, ty reflect.Type, hints map[int]string) {
	schema, _ := gohcl.ImpliedBodySchema(reflect.New(ty).Interface())
	var attrs, blocks []string
	for _, a := range schema.Attributes {
		attrs = append(attrs, a.Name)
	}
	for _, b := range schema.Blocks {
		blocks = append(blocks, b.Type)
	}

	for name, attr := range body.Attributes {
		if slices.Contains(attrs, name) {
			continue
		}
		if s := closest(name, attrs); s != "" {
			hints[attr.NameRange.Start.Byte] = fmt.Sprintf("Did you mean %q?", s)
		} else if where := homes[name]; where != "" {
			hints[attr.NameRange.Start.Byte] = fmt.Sprintf("%q belongs in %s.", name, where)
		}
	}
	for _, block := range body.Blocks {
		child := blockType(ty, block.Type)
		if child == nil {
			if s := closest(block.Type, blocks); s != "" {
				hints[block.TypeRange.Start.Byte] = fmt.Sprintf("Did you mean %q?", s)
			} else if where := homes[block.Type]; where != "" {
				hints[block.TypeRange.Start.Byte] = fmt.Sprintf("%q blocks belong in %s.", block.Type, where)
			}
			continue
		}
		collectHints(block.Body, child, hints)
	}
}

// homes are the blocks an attribute or block name belongs in, for a hint
// when it is written elsewhere (listen at the top level, command in host).
var homes = map[string]string{
	"listen": "the host block", "log_level": "the host block", "log_format": "the host block",
	"separator": "the host block", "auth": "the host block", "bearer_token": "the host block's auth block",
	"command": "a server block", "args": "a server block", "env": "a server block", "cwd": "a server block",
	"url": "a server block", "headers": "a server block", "transport": "a server block",
	"timeout": "a server block", "connect_timeout": "a server block", "prefix": "a server block",
	"protocol_version": "a server block", "tools": "a server block", "reconnect": "a server block",
	"breaker": "a server block", "plugin": "a server block", "required": "a server block", "enabled": "a server block",
	"audit": "the host block", "replica": "the host block", "drain": "the host block",
	"include_arguments": "the host block's audit block",
	"include":           "a server's tools block", "exclude": "a server's tools block",
	"max_retries": "a server's reconnect block", "max_backoff": "a server's reconnect block",
	"parked_retry": "a server's reconnect block", "healthy_after": "a server's reconnect block", "unresponsive_after": "a server's reconnect block",
	"threshold": "a server's breaker block", "cooldown": "a server's breaker block",
	"health": "a server block", "interval": "a server's health block",
	"sha256": "a server's plugin block", "config": "a server's plugin block",
	"metrics": "the host block", "max_names_per_server": "the host block's metrics block", "max_names": "the host block's metrics block",
	"catalog": "a server block", "max_tools": "a server's catalog block", "max_resources": "a server's catalog block",
	"max_prompts": "a server's catalog block", "max_bytes": "a server's catalog block", "max_pages": "a server's catalog block",
}

// blockType is the schema struct of the block typ inside ty, or nil.
func blockType(ty reflect.Type, typ string) reflect.Type {
	for i := 0; i < ty.NumField(); i++ {
		f := ty.Field(i)
		if f.Tag.Get("hcl") != typ+",block" {
			continue
		}
		t := f.Type
		for t.Kind() == reflect.Slice || t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		return t
	}
	return nil
}

// closest is the candidate nearest to name, if it is near enough that a
// typo is the likely explanation: within a third of the name's length (at
// least two edits), or one being a prefix of the other.
func closest(name string, candidates []string) string {
	best, bestDist := "", -1
	for _, c := range candidates {
		d := editDistance(name, c)
		limit := max(2, len(c)/3)
		if d > limit && !(len(name) >= 3 && (strings.HasPrefix(c, name) || strings.HasPrefix(name, c))) {
			continue
		}
		if bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
