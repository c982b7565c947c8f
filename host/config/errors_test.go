package config_test

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/host/config"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden with the current diagnostics")

// testFilename is the name error cases are parsed under. Its directory is
// testdata, so file("…") resolves there and golden text stays portable.
var testFilename = filepath.Join("testdata", "config.hcl")

// errorCases are invalid configurations, one per diagnostic a user can get.
// The expected text of each is testdata/<name>.golden; want is a fragment
// that must appear in it, so that -update cannot silently bless a
// regression.
var errorCases = []struct {
	name string
	src  string
	want string
}{
	{"syntax_error", `server "a" {
  command = "x"
`, "Unclosed configuration block"},
	{"discovery_mode_invalid", `host {
  discovery { mode = "lazy" }
}
`, `mode in the discovery block of the host block is "lazy"; use "search"`},
	{"discovery_pin_bad_glob", `server "gh" {
  command = "npx"
  discovery { pin = ["get_[issue"] }
}
`, `pin in the discovery block of server "gh" has the pattern "get_[issue"`},
	{"unknown_top_level_block", `servers "a" {
  command = "x"
}
`, `Did you mean "server"?`},
	{"unknown_top_level_attribute", `listen = "127.0.0.1:8811"
`, `An argument named "listen" is not expected here. "listen" belongs in the host block.`},
	{"attribute_in_wrong_block", `server "fs" {
  command = "npx"
  max_retries = 3
}
`, `"max_retries" belongs in a server's reconnect block.`},
	{"unknown_attribute_server", `server "fs" {
  comand = "npx"
}
`, `Did you mean "command"?`},
	{"unknown_attribute_host", `host {
  log_levl = "debug"
}
`, `Did you mean "log_level"?`},
	{"unknown_attribute_auth", `host {
  auth {
    bearer_tokn = "x"
  }
}
`, `Did you mean "bearer_token"?`},
	{"unknown_attribute_tools", `server "fs" {
  command = "npx"
  tools {
    includes = ["read_*"]
  }
}
`, `Did you mean "include"?`},
	{"unknown_attribute_reconnect", `server "fs" {
  command = "npx"
  reconnect {
    max_retry = 3
  }
}
`, `Did you mean "max_retries"?`},
	{"unknown_attribute_breaker", `server "fs" {
  command = "npx"
  breaker {
    treshold = 3
  }
}
`, `Did you mean "threshold"?`},
	{"unknown_attribute_plugin", `server "sock" {
  plugin "unix" {
    command = "./bin/unix"
    sha265  = "00"
  }
}
`, `Did you mean "sha256"?`},
	{"unknown_block", `server "fs" {
  command = "npx"
  tool {
    include = ["a"]
  }
}
`, `Did you mean "tools"?`},
	{"attribute_written_as_block", `server "fs" {
  command = "npx"
  env {
    K = "v"
  }
}
`, `Did you mean to define argument "env"?`},
	{"oauth_without_url", `server "fs" {
  command = "npx"
  oauth {}
}
`, "OAuth without url"},
	{"oauth_grant_invalid", `server "linear" {
  url = "https://mcp.linear.app/mcp"
  oauth {
    grant = "password"
  }
}
`, `use "authorization_code" (tokens from ` + "`mcpvisor login linear`" + `)`},
	{"oauth_client_credentials_without_secret", `server "svc" {
  url = "https://mcp.example.com/mcp"
  oauth {
    grant     = "client_credentials"
    client_id = "svc"
  }
}
`, "needs client_id and client_secret"},
	{"oauth_secret_without_client_id", `server "linear" {
  url = "https://mcp.linear.app/mcp"
  oauth {
    client_secret = "s"
  }
}
`, "sets client_secret but no client_id"},
	{"oauth_with_authorization_header", `server "linear" {
  url     = "https://mcp.linear.app/mcp"
  headers = { Authorization = "Bearer x" }
  oauth {}
}
`, "Remove the header."},
	{"oauth_client_metadata_url_http", `server "linear" {
  url = "https://mcp.linear.app/mcp"
  oauth {
    client_metadata_url = "http://example.com/client.json"
  }
}
`, "an https URL with a path"},
	{"oauth_scope_invalid", `server "linear" {
  url = "https://mcp.linear.app/mcp"
  oauth {
    scopes = ["read write"]
  }
}
`, "Invalid scope"},
	// private_key_jwt, issuer and cross_app_access.
	{"oauth_private_key_invalid", `server "svc" {
  url = "https://mcp.example.com/mcp"
  oauth {
    grant       = "client_credentials"
    client_id   = "svc"
    private_key = "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n"
  }
}
`, "Use a PEM-encoded EC (P-256, P-384, P-521), RSA or Ed25519 private key"},
	{"oauth_private_key_and_secret", `server "svc" {
  url = "https://mcp.example.com/mcp"
  oauth {
    grant         = "client_credentials"
    client_id     = "svc"
    client_secret = "s"
    private_key   = "x"
  }
}
`, "sets both private_key and client_secret"},
	{"oauth_private_key_authorization_code", `server "svc" {
  url = "https://mcp.example.com/mcp"
  oauth {
    client_id   = "svc"
    private_key = "x"
  }
}
`, "with the authorization_code grant use client_secret"},
	{"oauth_issuer_invalid", `server "jira" {
  url = "https://mcp.atlassian.com/v1/sse"
  oauth {
    issuer = "mcp.atlassian.com"
  }
}
`, "Invalid issuer"},
	{"oauth_cross_app_access_incomplete", `server "svc" {
  url = "https://mcp.example.com/mcp"
  oauth {
    grant         = "cross_app_access"
    client_id     = "svc"
    client_secret = "s"
  }
}
`, "needs id_token"},
	{"oauth_id_token_without_cross_app_access", `server "svc" {
  url = "https://mcp.example.com/mcp"
  oauth {
    id_token = "x"
  }
}
`, `applies to grant = "cross_app_access" only`},
	{"oauth_redirect_port_invalid", `server "linear" {
  url = "https://mcp.linear.app/mcp"
  oauth {
    redirect_port = 70000
  }
}
`, "Invalid redirect_port"},
	{"unknown_attribute_oauth", `server "linear" {
  url = "https://mcp.linear.app/mcp"
  oauth {
    client = "x"
  }
}
`, `Did you mean "client_id"?`},
	{"duplicate_host_block", `host {}
host {}
`, "Duplicate host block"},
	{"duplicate_plugin_block", `server "sock" {
  plugin "unix" { command = "./a" }
  plugin "tcp" { command = "./b" }
}
`, "Duplicate plugin block"},
	{"missing_server_label", `server {
  command = "npx"
}
`, "Missing name for server"},
	{"duplicate_server", `server "fs" {
  command = "npx"
}

server "fs" {
  url = "http://127.0.0.1:9000/mcp"
}
`, `A server named "fs" was already defined at testdata/config.hcl:1.`},
	{"empty_server_name", `server "" {
  command = "npx"
}
`, "Empty server name"},
	{"command_and_url", `server "both" {
  command = "npx"
  url     = "http://127.0.0.1:9000/mcp"
}
`, `server "both" sets command and url.`},
	{"plugin_and_command", `server "both" {
  command = "npx"
  plugin "unix" {
    command = "./bin/unix"
  }
}
`, `server "both" sets command and plugin.`},
	{"plugin_and_url", `server "both" {
  url = "http://127.0.0.1:9000/mcp"
  plugin "unix" {
    command = "./bin/unix"
  }
}
`, `server "both" sets url and plugin.`},
	{"no_transport", `server "nothing" {
  timeout = "10s"
}
`, "Server has no transport"},
	{"empty_command", `server "fs" {
  command = ""
}
`, "Empty command"},
	{"empty_url", `server "web" {
  url = ""
}
`, "Empty url"},
	{"transport_invalid", `server "web" {
  url       = "http://127.0.0.1:9000/mcp"
  transport = "websocket"
}
`, `transport in server "web" is "websocket"`},
	{"transport_without_url", `server "fs" {
  command   = "npx"
  transport = "sse"
}
`, "Transport without url"},
	{"duration_invalid", `server "fs" {
  command = "npx"
  timeout = "5 minutes"
}
`, `timeout in server "fs" is "5 minutes", which is not a duration.`},
	{"duration_without_unit", `server "fs" {
  command = "npx"
  reconnect {
    max_backoff = "60"
  }
}
`, `max_backoff in server "fs" is "60", which is not a duration.`},
	{"timeout_zero", `server "fs" {
  command = "npx"
  timeout = "0s"
}
`, `timeout in server "fs" is 0s; it must be greater than zero`},
	{"connect_timeout_negative", `server "fs" {
  command         = "npx"
  connect_timeout = "-5s"
}
`, `connect_timeout in server "fs" is -5s`},
	{"max_retries_negative", `server "fs" {
  command = "npx"
  reconnect {
    max_retries = -1
  }
}
`, `max_retries in server "fs" is -1; it must be 0 or more`},
	{"health_timeout_not_shorter", `server "fs" {
  command = "npx"
  health {
    interval = "10s"
    timeout  = "10s"
  }
}
`, `timeout in the health block of server "fs" is 10s, not shorter than its interval (10s): a ping must end before the next is due. Lower timeout (such as "2.5s") or raise interval.`},
	{"health_interval_negative", `server "fs" {
  command = "npx"
  health { interval = "-5s" }
}
`, `interval in the health block of server "fs" is -5s; it must be at least 1s`},
	{"health_timeout_zero", `server "fs" {
  command = "npx"
  health {
    interval = "30s"
    timeout  = "0s"
  }
}
`, `timeout in the health block of server "fs" is 0s; it must be greater than zero and shorter than its interval (30s)`},
	{"health_interval_missing", `server "fs" {
  command = "npx"
  health { timeout = "2s" }
}
`, `The health block in server "fs" has no interval`},
	{"max_retries_fraction", `server "fs" {
  command = "npx"
  reconnect {
    max_retries = 1.5
  }
}
`, "a whole number is required, not 1.5"},
	{"parked_retry_zero", `server "fs" {
  command = "npx"
  reconnect {
    parked_retry = "0s"
  }
}
`, `parked_retry in server "fs" is 0s`},
	{"healthy_after_zero", `server "fs" {
  command = "npx"
  reconnect {
    healthy_after = "0s"
  }
}
`, `healthy_after in server "fs" is 0s`},
	{"max_pending_requests_zero", `server "fs" {
  command = "npx"
  max_pending_requests = 0
}
`, `max_pending_requests in server "fs" is 0; it must be 1 or more`},
	{"max_sessions_zero", `host {
  max_sessions = 0
}
`, `max_sessions in the host block is 0; it must be 1 or more`},
	{"session_idle_timeout_zero", `host {
  session_idle_timeout = "0s"
}
`, `session_idle_timeout in the host block is 0s; it must be positive`},
	{"threshold_zero", `server "fs" {
  command = "npx"
  breaker {
    threshold = 0
  }
}
`, `threshold in server "fs" is 0; it must be 1 or more`},
	{"cooldown_zero", `server "fs" {
  command = "npx"
  breaker {
    cooldown = "0s"
  }
}
`, `cooldown in server "fs" is 0s`},
	{"log_level_invalid", `host {
  log_level = "verbose"
}
`, `log_level in the host block is "verbose"; use one of "trace", "debug", "info", "warn", "error".`},
	{"log_format_invalid", `host {
  log_format = "yaml"
}
`, `log_format in the host block is "yaml"`},
	{"drain_negative", `host {
  drain = "-5s"
}
`, `drain in the host block is -5s; it must be zero`},
	{"drain_invalid", `host {
  drain = "5"
}
`, `drain in the host block is "5", which is not a duration`},
	{"body_timeout_zero", `host {
  body_timeout = "0s"
}
`, `body_timeout in the host block is 0s; it must be positive`},
	{"max_body_bytes_inflight_invalid", `host {
  max_body_bytes_inflight = "64 megs"
}
`, `max_body_bytes_inflight in the host block is "64 megs", which is not a size`},
	{"max_body_bytes_inflight_zero", `host {
  max_body_bytes_inflight = 0
}
`, `max_body_bytes_inflight in the host block is 0 bytes; it must be positive`},
	{"max_inflight_negative", `host {
  max_inflight = -1
}
`, `max_inflight in the host block is -1; it must be 1 or more`},
	{"replica_empty", `host {
  replica = ""
}
`, `replica in the host block is "": it is empty`},
	{"replica_with_space", `host {
  replica = "web 1"
}
`, `replica in the host block is "web 1": it contains a space`},
	{"drain_at_top_level", `drain = "10s"
`, `"drain" belongs in the host block.`},
	{"separator_invalid", `host {
  separator = "::"
}
`, `separator in the host block is "::"`},
	{"sha256_invalid", `server "sock" {
  plugin "unix" {
    command = "./bin/unix"
    sha256  = "abc123"
  }
}
`, "it must be 64 hexadecimal digits"},
	{"plugin_command_missing", `server "sock" {
  plugin "unix" {
    args = ["-v"]
  }
}
`, "Missing plugin command"},
	{"plugin_name_empty", `server "sock" {
  plugin "" {
    command = "./bin/unix"
  }
}
`, "Empty plugin name"},
	{"plugin_config_not_object", `server "sock" {
  plugin "unix" {
    command = "./bin/unix"
    config  = "/run/x.sock"
  }
}
`, "an object is required"},
	{"protocol_version_unsupported", `server "fs" {
  command          = "npx"
  protocol_version = "2024-11-05"
}
`, `protocol_version in server "fs" is "2024-11-05"; use one of "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"`},
	{"env_missing", `server "remote" {
  url     = "https://mcp.example.com/mcp"
  headers = { Authorization = "Bearer ${env("MCPVISOR_TEST_UNSET")}" }
}
`, `environment variable "MCPVISOR_TEST_UNSET" is not set; store it with ` + "`mcpvisor secret set MCPVISOR_TEST_UNSET`" + `, set it in mcpvisor's environment, or write env("MCPVISOR_TEST_UNSET", "default") to supply a default`},
	{"env_too_many_arguments", `server "fs" {
  command = env("A", "b", "c")
}
`, "env takes a variable name and at most one default value"},
	{"file_missing", `server "remote" {
  url     = "https://mcp.example.com/mcp"
  headers = { Authorization = file("no-such-token.txt") }
}
`, `cannot read file "no-such-token.txt" (resolved to "testdata/no-such-token.txt"): no such file or directory`},
	{"unknown_function", `server "fs" {
  command = envv("X")
}
`, `Did you mean "env"?`},
	{"variable_reference", `server "fs" {
  command = npx
}
`, "Variables not allowed"},
	{"wrong_type", `server "fs" {
  command = "npx"
  args    = "-y"
}
`, `Inappropriate value for attribute "args": list of string required, but have string.`},
	{"null_element", `server "fs" {
  command = "npx"
  args    = ["-y", null]
}
`, `Inappropriate value for attribute "args": element [1]: element must not be null.`},
	{"url_unparseable", `server "web" {
  url = "http://[::1/mcp"
}
`, "Invalid url"},
	{"url_scheme", `server "web" {
  url = "ftp://example.com/mcp"
}
`, `the scheme "ftp" is not http or https`},
	{"url_relative", `server "web" {
  url = "mcp.example.com/mcp"
}
`, "it has no scheme"},
	{"header_name_invalid", `server "web" {
  url     = "https://mcp.example.com/mcp"
  headers = { "X Token" = "t" }
}
`, `headers in server "web" has the name "X Token"`},
	{"header_value_newline", `server "web" {
  url     = "https://mcp.example.com/mcp"
  headers = { Authorization = "Bearer t\n" }
}
`, "wrap it in trimspace()"},
	{"env_name_invalid", `server "fs" {
  command = "npx"
  env     = { "A=B" = "c" }
}
`, `env in server "fs" has the name "A=B"`},
	{"glob_invalid", `server "fs" {
  command = "npx"
  tools {
    include = ["[read"]
  }
}
`, `include in the tools block of server "fs" has the pattern "[read"`},
	{"listen_without_token", `host {
  listen = "0.0.0.0:8811"
}
`, `Add auth { bearer_token = env("MCPVISOR_TOKEN") } to the host block`},
	{"listen_all_interfaces_without_token", `host {
  listen = ":8811"
}
`, "Non-loopback listen address without a bearer token"},
	{"listen_invalid", `host {
  listen = "8811"
}
`, `listen in the host block is "8811": missing port in address.`},
	{"listen_bad_port", `host {
  listen = "127.0.0.1:http"
}
`, `the port "http" is not a number from 0 to 65535`},
	{"audit_path_empty", `host {
  audit {
    path = ""
  }
}
`, "Empty audit path"},
	{"audit_path_missing", `host {
  audit {
    include_arguments = true
  }
}
`, "The audit block needs path"},
	{"audit_include_arguments_not_bool", `host {
  audit {
    path              = "audit.jsonl"
    include_arguments = "yes please"
  }
}
`, `Inappropriate value for attribute "include_arguments"`},
	{"required_not_bool", `server "a" {
  command  = "x"
  required = "sure"
}
`, `Inappropriate value for attribute "required"`},
	{"required_in_host", `host {
  required = true
}
`, `"required" belongs in a server block.`},
	{"bearer_token_empty", `host {
  listen = "127.0.0.1:8811"
  auth {
    bearer_token = env("MCPVISOR_TEST_UNSET", "")
  }
}
`, "Empty bearer token"},
	{"bearer_token_missing", `host {
  auth {}
}
`, "The auth block needs token"},
	{"auth_token_and_bearer_token", `host {
  auth {
    token        = "a"
    bearer_token = "b"
  }
}
`, "sets both token and bearer_token"},
	{"oidc_issuer_missing", `host {
  auth {
    oidc {
      audience = "https://mcp.example.com/mcp"
    }
  }
}
`, "The oidc block needs issuer"},
	{"oidc_issuer_not_a_url", `host {
  auth {
    oidc {
      issuer   = "idp.example.com"
      audience = "https://mcp.example.com/mcp"
    }
  }
}
`, "it must be the OpenID provider's issuer URL"},
	{"several_arguments_on_one_line", `server "fs" {
  command = "npx"
  reconnect { max_retries = 5  max_backoff = "60s" }
}
`, "Invalid single-argument block definition"},
	{"many_errors_in_source_order", `server "b" {
  url       = "http://127.0.0.1:9000/mcp"
  transport = "ws"
}

host {
  log_level = "loud"
}

server "a" {
  command = "npx"
  timeout = "0s"
}
`, "Invalid log level"},
	{"policy_subject_kind", `policy "analysts" {
  subjects = ["groups:analysts"]
  tools    = ["github__*"]
}
`, `did you mean "group:analysts"?`},
	{"policy_subject_bare", `policy "alice" {
  subjects = ["alice"]
}
`, `write "sub:alice"`},
	{"policy_subject_empty_value", `policy "p" {
  subjects = ["email:"]
}
`, `names no email`},
	{"policy_no_subjects", `policy "p" {
  tools = ["*"]
}
`, "needs subjects"},
	{"policy_invalid_glob", `policy "p" {
  subjects = ["*"]
  tools    = ["github__[a"]
}
`, "is not a valid glob"},
	{"policy_duplicate", `policy "p" {
  subjects = ["*"]
}
policy "p" {
  subjects = ["token"]
}
`, `more than one policy named "p"`},
	{"policy_unknown_attribute", `policy "p" {
  subjects = ["*"]
  tool     = ["a__*"]
}
`, `Did you mean "tools"?`},
	{"policy_rate_zero", `policy "p" {
  subjects = ["*"]
  rate {
    calls_per_minute = 0
  }
}
`, "it must be at least 1"},
	{"policy_rate_missing", `policy "p" {
  subjects = ["*"]
  rate "github__*" {
    burst = 2
  }
}
`, "needs calls_per_minute"},
	{"policy_rate_unknown_attribute", `policy "p" {
  subjects = ["*"]
  rate "github__*" {
    calls_per_min = 2
  }
}
`, `Did you mean "calls_per_minute"?`},
	{"policy_rate_duplicate", `policy "p" {
  subjects = ["*"]
  rate {
    calls_per_minute = 60
  }
  rate {
    calls_per_minute = 30
  }
}
`, "already has an unlabelled rate block"},
	{"policy_rate_bad_label", `policy "p" {
  subjects = ["*"]
  rate "[x" {
    calls_per_minute = 6
  }
}
`, "The label of a rate block"},
}

func TestParseErrors(t *testing.T) {
	for _, tc := range errorCases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(tc.src), testFilename)
			if err == nil {
				t.Fatalf("Parse succeeded, want an error; got %+v", cfg)
			}
			if cfg != nil {
				t.Errorf("Parse returned a config along with the error")
			}
			var de *config.DiagnosticsError
			if !errors.As(err, &de) {
				t.Fatalf("error is %T, want *config.DiagnosticsError", err)
			}
			for _, d := range de.Diags {
				if d.Subject == nil {
					t.Errorf("diagnostic %q has no Subject; it must point into the file", d.Summary)
				}
			}
			got := err.Error() + "\n"
			if !strings.Contains(got, tc.want) {
				t.Errorf("error text lacks %q:\n%s", tc.want, got)
			}
			if !strings.Contains(got, "testdata/config.hcl line ") {
				t.Errorf("error text does not name file and line:\n%s", got)
			}
			checkGolden(t, tc.name, got)
		})
	}
}

// TestUnknownAttributeNamesServer checks the acceptance criterion behind
// all "unsupported argument" cases: the text names the server block.
func TestUnknownAttributeNamesServer(t *testing.T) {
	_, err := config.Parse([]byte("server \"github\" {\n  comand = \"npx\"\n}\n"), "config.hcl")
	if err == nil {
		t.Fatal("Parse succeeded")
	}
	for _, want := range []string{`on config.hcl line 2, in server "github":`, `2:   comand = "npx"`, `Did you mean "command"?`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%s", want, err)
		}
	}
}

// testdataDir is this package's testdata directory, found before any test
// changes the working directory.
var testdataDir = func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Join(wd, "testdata")
}()

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join(testdataDir, name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./host/config -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("diagnostics differ from %s (run with -update if the change is intended)\n--- got:\n%s\n--- want:\n%s", path, got, want)
	}
}
