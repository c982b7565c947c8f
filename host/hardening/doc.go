// Package hardening holds regression tests for the security findings of
// issue 12, run against a real mcpvisor process: stalled request bodies
// must not grow its memory, a silent connection must be closed by the
// header timeout, an HTTP upstream's oversized header blocks and floods
// of 103 Early Hints must end in a clean error with bounded memory, and
// /status and /healthz must refuse DNS-rebinding Host headers as /mcp
// does. The tests are in package hardening_test; see main_test.go.
package hardening
