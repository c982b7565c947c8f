// Command notes is an example MCP server that keeps notes in memory and
// exposes them as resources, tools and prompts, for use as an upstream in
// mcpvisor's default config and its integration tests. It exercises what a
// proxy must carry besides tool calls: resource and template listing and
// reading, list_changed and resources/updated notifications, subscriptions,
// prompts with arguments, and completion.
//
// It starts with two notes, "welcome" and "todo". All sessions share them.
//
// Resources (all text/plain):
//
//	notes://list          the note names, sorted, one per line
//	notes://note/{name}   one note's text; a template, and also one concrete
//	                      resource per note so that adding or deleting a note
//	                      changes resources/list (and sends list_changed)
//
// Tools (* marks required arguments):
//
//	add_note    {name*, text*: string}  creates or replaces a note; a new note is a
//	                                    new resource (list_changed); subscribers of the
//	                                    note (and, on create, of notes://list) get
//	                                    notifications/resources/updated
//	delete_note {name*: string}         removes a note (list_changed, and updated for
//	                                    the note and notes://list); isError if none
//	pid         {}                      the process id as text (read-only)
//	extra<S>    {value: string}         only with -tools-suffix S
//
// Note names are 1 to 64 of the characters A-Z a-z 0-9 _ . -
//
// Prompts:
//
//	summarize   name (required)   a user message asking to summarize the note
//	brainstorm  topic (optional)  a user message asking for ideas about topic
//
// Completion suggests existing note names for the "name" argument of the
// summarize prompt and of the notes://note/{name} template. Subscriptions
// are accepted for notes://list and any notes://note/{name}.
//
// Flags:
//
//	(none)                   serve over stdio
//	-http ADDR               serve streamable HTTP at /mcp on ADDR (e.g. 127.0.0.1:0)
//	-sse ADDR                serve the legacy SSE transport at /sse on ADDR
//	-session-ttl DUR         with -http, forget sessions idle for DUR (then HTTP 404)
//	-forget-sessions-signal  with -http or -sse, drop all sessions on SIGUSR1
//	-stateless               with -http, serve without sessions
//	-tools-suffix S          add the tool extra<S>
//
// Stderr carries "notes server starting pid=N" at startup, "listening on
// http://HOST:PORT/mcp" once an HTTP listener is up, and "forgot N sessions"
// after SIGUSR1.
package main

import "github.com/mcpvisor/mcpvisor/examples/servers/internal/serve"

func main() {
	serve.Main("notes", newServer)
}
