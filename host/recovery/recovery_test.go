package recovery_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/host/recovery"
)

func TestIsSessionGone(t *testing.T) {
	accept := []string{
		"Invalid params: Invalid or expired session",
		"Session expired",
		"expired session: abc",
		"session not found",
		"Unknown session: abc123",
		"SESSION NOT FOUND",
		"uNkNoWn SeSsIoN",
		"INVALID OR EXPIRED SESSION",
	}
	for _, msg := range accept {
		if !recovery.IsSessionGone(errors.New(msg)) {
			t.Errorf("IsSessionGone(%q) = false, want true", msg)
		}
		if got := recovery.Classify(context.Background(), errors.New(msg)); got != recovery.SessionGone {
			t.Errorf("Classify(%q) = %v, want session_gone", msg, got)
		}
	}
	reject := []string{
		"Tool failed to execute",
		"Missing parameter",
		"Connection refused",
		"401 Unauthorized",
		"",
		"session",
		"expired token",
	}
	for _, msg := range reject {
		if recovery.IsSessionGone(errors.New(msg)) {
			t.Errorf("IsSessionGone(%q) = true, want false", msg)
		}
		if got := recovery.Classify(context.Background(), errors.New(msg)); got == recovery.SessionGone {
			t.Errorf("Classify(%q) = session_gone", msg)
		}
	}
	if !recovery.IsSessionGone(fmt.Errorf("calling %q: %w", "tools/call", mcp.ErrSessionMissing)) {
		t.Error("a wrapped mcp.ErrSessionMissing is not recognised")
	}
	if recovery.IsSessionGone(nil) {
		t.Error("nil error classified as session gone")
	}
}

func TestCanceledNeverReconnects(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// A canceled context wins even when the message matches the allow-list.
	for _, err := range []error{
		errors.New("Invalid or expired session"),
		fmt.Errorf("session not found: %w", context.Canceled),
		mcp.ErrSessionMissing,
		errors.New("401 Unauthorized"),
	} {
		if got := recovery.Classify(ctx, err); got != recovery.Canceled {
			t.Errorf("Classify(canceled ctx, %q) = %v, want canceled", err, got)
		}
	}
	if recovery.IsSessionGone(fmt.Errorf("session expired: %w", context.Canceled)) {
		t.Error("a canceled error matching the allow-list counted as session gone")
	}
}

func TestClassify(t *testing.T) {
	bg := context.Background()
	tests := []struct {
		err  error
		want recovery.Class
	}{
		{nil, recovery.None},
		{context.Canceled, recovery.Canceled},
		{context.DeadlineExceeded, recovery.Timeout},
		{fmt.Errorf("x: %w", recovery.ErrUnauthorized), recovery.Auth},
		{errors.New("sending request: 401 Unauthorized"), recovery.Auth},
		{fmt.Errorf("calling: %w", &jsonrpc.Error{Code: -32042, Message: "custom"}), recovery.Application},
		{fmt.Errorf("boom: %w", recovery.ErrProcessExited), recovery.ProcessDied},
		{fmt.Errorf("%w: calling", mcp.ErrConnectionClosed), recovery.Transport},
		{io.EOF, recovery.Transport},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), recovery.Transport},
		{&recovery.Error{Class: recovery.Unavailable, Reason: "parked"}, recovery.Unavailable},
		// A refresh that failed behind a 401 is a login problem, not a
		// reconnectable auth failure.
		{fmt.Errorf("initialize: %w: %w", recovery.ErrUnauthorized, recovery.ErrNeedsLogin), recovery.NeedsLogin},
		// A 403 insufficient_scope fails the one call; it is not a lost
		// login, although a login is what fixes it.
		{fmt.Errorf("tools/call: %w", recovery.ErrInsufficientScope), recovery.InsufficientScope},
	}
	for _, tt := range tests {
		if got := recovery.Classify(bg, tt.err); got != tt.want {
			t.Errorf("Classify(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestRedact(t *testing.T) {
	in := `GET https://x/mcp?token=s3cr3t&x=1 failed: Authorization: Bearer abc.def-ghi; api key=k9 "authorization":"Basic Zm9v"`
	out := recovery.Redact(in)
	for _, secret := range []string{"s3cr3t", "abc.def-ghi", "Zm9v"} {
		if strings.Contains(out, secret) {
			t.Errorf("Redact left %q in %q", secret, out)
		}
	}
	if !strings.Contains(out, "x=1") {
		t.Errorf("Redact removed an unrelated query value: %q", out)
	}
}

func TestErrorMessage(t *testing.T) {
	e := &recovery.Error{Server: "echo", Op: "tools/call", Class: recovery.Unavailable,
		Reason: "unreachable", Err: errors.New("Authorization: Bearer tok123")}
	msg := e.Error()
	if !strings.Contains(msg, `server "echo"`) || !strings.Contains(msg, "tools/call") || strings.Contains(msg, "tok123") {
		t.Errorf("unexpected message %q", msg)
	}
	if !errors.Is(e, e.Err) {
		t.Error("Error does not unwrap")
	}
}

// The go-sdk wraps a POST that never reached the server (connection
// refused, 502/503/504) in its jsonrpc2.ErrRejected, a *jsonrpc.Error with
// code -32005 that no upstream sent: a transport failure. An upstream's own
// JSON-RPC error that the SDK wraps before it stays an application error.
func TestRejectedByTransportIsTransport(t *testing.T) {
	rejected := &jsonrpc.Error{Code: -32005, Message: "rejected by transport"}
	refused := fmt.Errorf("calling %q: sending %q: %w: Post \"http://127.0.0.1:1/mcp\": %w", "tools/call", "tools/call", rejected, io.ErrUnexpectedEOF)
	if got := recovery.Classify(context.Background(), refused); got != recovery.Transport {
		t.Errorf("Classify(a refused POST) = %v, want transport", got)
	}
	own := &jsonrpc.Error{Code: -32602, Message: "bad params"}
	answered := fmt.Errorf("POST: %w: %w: Bad Request", own, rejected)
	if got := recovery.Classify(context.Background(), answered); got != recovery.Application {
		t.Errorf("Classify(an upstream's error in a 400) = %v, want application", got)
	}
	same := &jsonrpc.Error{Code: -32005, Message: "the upstream's own -32005"}
	if got := recovery.Classify(context.Background(), same); got != recovery.Application {
		t.Errorf("Classify(an upstream's own -32005) = %v, want application", got)
	}
}

// LimitOf finds the bound that refused an operation both in mcpvisor's own
// error and in the JSON-RPC error a transport put in the place of an
// oversized response; other errors name none.
func TestLimitOf(t *testing.T) {
	own := &recovery.Error{Server: "big", Op: "tools/call", Class: recovery.Application, Reason: "too large", Limit: "max_message_size"}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"own error", own, "max_message_size"},
		{"wrapped own error", fmt.Errorf("calling: %w", own), "max_message_size"},
		{"on the wire", recovery.WireError(own), "max_message_size"},
		{"own error without a limit", &recovery.Error{Server: "s", Reason: "parked"}, ""},
		{"upstream's JSON-RPC error", &jsonrpc.Error{Code: recovery.CodeUpstream, Message: "x", Data: json.RawMessage(`{"limit":"max_inflight_bytes"}`)}, "max_inflight_bytes"},
		{"another code", &jsonrpc.Error{Code: -32000, Message: "x", Data: json.RawMessage(`{"limit":"max_message_size"}`)}, ""},
		{"nil", nil, ""},
	} {
		if got := recovery.LimitOf(tc.err); got != tc.want {
			t.Errorf("%s: LimitOf = %q, want %q", tc.name, got, tc.want)
		}
	}
}
