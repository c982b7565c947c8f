# mcpvisor's default configuration: works on a fresh checkout with `make run`.
# The two servers are the Go examples in examples/servers, built into bin/ by
# the Makefile. See docs/config.md for every block and attribute.

host {
  # Streamable HTTP at http://127.0.0.1:8811/mcp. Loopback only: a
  # non-loopback address also needs auth { bearer_token = env("…") }.
  listen    = "127.0.0.1:8811"
  log_level = "info"
}

# Tools: echo, add, fail, jsonrpc_error, image, sleep, pid, crash, progress, roots.
# Exposed as echo__echo, echo__add, …
server "echo" {
  command = "./bin/echo"
  timeout = "60s"

  reconnect {
    max_retries = 5
    max_backoff = "30s"
  }
}

# Notes with resources (notes://…), prompts and completion.
server "notes" {
  command = "./bin/notes"

  tools {
    exclude = ["pid"]
  }
}
