// Command mcpvisor is a supervising host for Model Context Protocol
// servers. See README.md, or run `mcpvisor help`.
package main

import (
	"os"
	"runtime/debug"

	"github.com/mcpvisor/mcpvisor/host/cli"
)

// gcPercent trades a little memory for less GC work on the per-call path:
// every proxied call decodes and re-encodes a few short-lived JSON
// messages, and mcpvisor's live heap is small. An explicit GOGC in the
// environment (GOGC=100, GOGC=off) still wins; docs/operations.md
// ("Memory and GOGC") says so to operators.
const gcPercent = 400

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	os.Exit(cli.Run(os.Args[1:], cli.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}))
}
