// Command everything is an example MCP server implementing every tool,
// resource, prompt and server feature that the official conformance suite
// (@modelcontextprotocol/conformance) exercises in its server scenarios, under
// exactly the names the suite calls. mcpvisor's conformance test runs the
// suite against it directly and then through mcpvisor (host/conformance), so
// every scenario it passes directly is a fidelity check of the gateway.
//
// Tools (arguments are JSON object properties; * marks required ones):
//
//	test_simple_text                  text "This is a simple text response for testing."
//	test_image_content                a 1x1 PNG (image/png)
//	test_audio_content                a short WAV (audio/wav)
//	test_embedded_resource            an embedded text resource test://embedded-resource
//	test_multiple_content_types       text, image and an embedded JSON resource
//	test_tool_with_logging            three info log messages, 50ms apart
//	test_tool_with_progress           progress 0, 50, 100 of 100, 50ms apart, with
//	                                  the request's progress token
//	test_error_handling               isError: true, text "This tool intentionally
//	                                  returns an error for testing"
//	test_sampling {prompt*}           sampling/createMessage to the client, then
//	                                  "LLM response: <text>"
//	test_elicitation {message*}       elicitation/create (username, email), then
//	                                  "User response: action=<a>, content=<json>"
//	test_elicitation_sep1034_defaults elicitation with a default for every primitive type
//	test_elicitation_sep1330_enums    elicitation with the five enum schema shapes
//	json_schema_2020_12_tool          an input schema with $schema, $defs, $ref,
//	                                  allOf/anyOf, if/then/else, additionalProperties
//	test_reconnection                 waits 100ms and answers; it does not close
//	                                  the SSE stream (SEP-1699), since without an
//	                                  event store the result would be lost
//	update_watched_resource           changes test://watched-resource and notifies
//	                                  its subscribers (not used by the suite)
//	list_roots                        asks the client for roots/list mid-call (on
//	                                  2026-07-28 with an input_required result);
//	                                  their URIs, one per line (not used by the suite)
//	sleep {ms*}                       waits ms milliseconds or until cancelled
//	                                  (not used by the suite)
//
// Resources: test://static-text (text/plain), test://static-binary (image/png
// blob), the template test://template/{id}/data (application/json echoing id)
// and test://watched-resource, which accepts resources/subscribe.
//
// Prompts: test_simple_prompt, test_prompt_with_arguments {arg1*, arg2*},
// test_prompt_with_embedded_resource {resourceUri*}, test_prompt_with_image.
// completion/complete suggests values for the arguments of
// test_prompt_with_arguments and for {id} of the template.
//
// Flags are those of every example server (see examples/servers/README.md):
// stdio by default, -http ADDR for streamable HTTP at /mcp, -stateless, and
// so on. Stderr carries "everything server starting pid=N" and, with -http,
// "listening on http://HOST:PORT/mcp".
package main

import "github.com/mcpvisor/mcpvisor/examples/servers/internal/serve"

func main() {
	serve.Main("everything", newServer)
}
