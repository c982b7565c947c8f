package upstream

/*
Design note: listing within bounds.

An upstream chooses how many tools, resources and prompts it lists, how big
each is and how many pages it takes; a hostile or broken one lists millions,
or hands back a cursor that never ends (or the same cursor again). Every
list operation here therefore follows pagination itself, page by page, and
stops requesting pages as soon as one of the server's catalog bounds
(config.Catalog: entries per list, encoded bytes for the whole catalog,
pages per list) is reached, or a cursor repeats. The entries up to the bound
are kept and exposed; the listing is marked truncated with the reason, which
the log, `mcpvisor status` and GET /status show. One page is bounded by the
transport's message size limit, so what is held at once is the kept catalog
plus one page.

Bytes are counted on the entries as decoded (their JSON encoding), because
the SDK hands over decoded pages only; that is what the host keeps.
*/

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/registry"
	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// catalogListing is one listing of a server's whole catalog: its bounds,
// the bytes kept so far and why it stopped early.
type catalogListing struct {
	limits    config.Catalog
	bytes     int
	truncated []string
}

// list fetches the whole catalog, following pagination within the
// server's catalog bounds, for the capabilities the server advertised.
func (s *Supervisor) list(ctx context.Context, cs *mcp.ClientSession) (*registry.Catalog, error) {
	cat := &registry.Catalog{}
	caps := &mcp.ServerCapabilities{}
	if ir := cs.InitializeResult(); ir != nil && ir.Capabilities != nil {
		caps = ir.Capabilities
	}
	l := &catalogListing{limits: s.cfg.Catalog.WithDefaults()}
	var err error
	if caps.Tools != nil {
		cat.Tools, err = listAll(ctx, l, "tools/list", "max_tools", l.limits.MaxTools,
			func(ctx context.Context, cursor string) ([]*mcp.Tool, string, error) {
				res, err := cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
				if err != nil {
					return nil, "", err
				}
				return res.Tools, res.NextCursor, nil
			})
		if err != nil {
			return nil, fmt.Errorf("tools/list: %w", err)
		}
	}
	if caps.Resources != nil {
		cat.Resources, err = listAll(ctx, l, "resources/list", "max_resources", l.limits.MaxResources,
			func(ctx context.Context, cursor string) ([]*mcp.Resource, string, error) {
				res, err := cs.ListResources(ctx, &mcp.ListResourcesParams{Cursor: cursor})
				if err != nil {
					return nil, "", err
				}
				return res.Resources, res.NextCursor, nil
			})
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("resources/list: %w", err)
			}
			// A server whose resources are broken still serves its
			// tools; expose what listed.
			s.logger.Warn("resources/list failed; exposing no resources", "error", recovery.Redact(err.Error()))
		}
		cat.Templates, err = listAll(ctx, l, "resources/templates/list", "max_resources", l.limits.MaxResources,
			func(ctx context.Context, cursor string) ([]*mcp.ResourceTemplate, string, error) {
				res, err := cs.ListResourceTemplates(ctx, &mcp.ListResourceTemplatesParams{Cursor: cursor})
				if err != nil {
					return nil, "", err
				}
				return res.ResourceTemplates, res.NextCursor, nil
			})
		if err != nil {
			// Templates are optional even for servers with resources.
			s.logger.Debug("resources/templates/list failed", "error", err)
		}
	}
	if caps.Prompts != nil {
		cat.Prompts, err = listAll(ctx, l, "prompts/list", "max_prompts", l.limits.MaxPrompts,
			func(ctx context.Context, cursor string) ([]*mcp.Prompt, string, error) {
				res, err := cs.ListPrompts(ctx, &mcp.ListPromptsParams{Cursor: cursor})
				if err != nil {
					return nil, "", err
				}
				return res.Prompts, res.NextCursor, nil
			})
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("prompts/list: %w", err)
			}
			s.logger.Warn("prompts/list failed; exposing no prompts", "error", recovery.Redact(err.Error()))
		}
	}
	cat.Truncated = l.truncated
	if len(l.truncated) > 0 {
		// Warn when the truncation is new or changed; a re-list that
		// stops for the same reasons (list_changed churn) only debugs.
		log := s.logger.Warn
		if prev := s.Catalog(); prev != nil && slices.Equal(prev.Truncated, l.truncated) {
			log = s.logger.Debug
		}
		for _, why := range l.truncated {
			log("catalog truncated: listing stopped early, the entries before the bound are exposed; raise the bound in the server's catalog block if the server is trusted", "reason", why)
		}
	}
	return cat, nil
}

// listAll follows one list operation's pages (op, such as "tools/list")
// and returns its entries, at most max of them (the catalog block's
// attribute limit), within the listing's byte and page bounds. A bound
// reached, or a cursor seen before, stops it without error: the entries
// up to there are returned and the listing is marked truncated. On error
// it returns no entries.
func listAll[T any](ctx context.Context, l *catalogListing, op, limit string, max int,
	page func(ctx context.Context, cursor string) ([]*T, string, error),
) ([]*T, error) {
	var out []*T
	// seen holds a hash of every cursor followed, not the cursor: a cursor
	// is the upstream's to size.
	seen := map[[sha256.Size]byte]bool{}
	cursor := ""
	for pages := 0; ; pages++ {
		if pages == l.limits.MaxPages {
			l.truncate("%s: still more pages after %d (catalog.max_pages); kept the first %d entries", op, pages, len(out))
			return out, nil
		}
		items, next, err := page(ctx, cursor)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			if len(out) == max {
				l.truncate("%s: more than %d entries (catalog.%s); kept the first %d", op, max, limit, max)
				return out, nil
			}
			n := encodedSize(it)
			if l.bytes+n > l.limits.MaxBytes {
				l.truncate("%s: the catalog passed %d bytes (catalog.max_bytes); kept the first %d entries", op, l.limits.MaxBytes, len(out))
				return out, nil
			}
			l.bytes += n
			out = append(out, it)
		}
		if next == "" {
			return out, nil
		}
		if len(out) == max {
			l.truncate("%s: more pages after %d entries (catalog.%s); kept the first %d", op, max, limit, max)
			return out, nil
		}
		h := sha256.Sum256([]byte(next))
		if seen[h] {
			l.truncate("%s: the server sent a cursor it had sent before (a pagination loop); kept the first %d entries", op, len(out))
			return out, nil
		}
		seen[h] = true
		cursor = next
	}
}

func (l *catalogListing) truncate(format string, args ...any) {
	l.truncated = append(l.truncated, fmt.Sprintf(format, args...))
}

// encodedSize is the size of v as JSON, what the catalog budget counts.
func encodedSize(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return len(b)
}
