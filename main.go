// Command mcpvisor is a supervising host for Model Context Protocol
// servers. See README.md, or run `mcpvisor help`.
package main

import (
	"os"

	"github.com/mcpvisor/mcpvisor/host/cli"
)

func main() {
	os.Exit(cli.Run(os.Args[1:], cli.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}))
}
