package config_test

import (
	"fmt"

	"github.com/mcpvisor/mcpvisor/host/config"
)

func ExampleParse() {
	src := []byte(`
server "github" {
  command = "npx"
  args    = ["-y", "@modelcontextprotocol/server-github"]

  reconnect {
    max_retries = 3
  }
}
`)
	cfg, err := config.Parse(src, "config.hcl")
	if err != nil {
		fmt.Println(err)
		return
	}
	s := cfg.Servers[0]
	fmt.Println(s.Name, s.Transport, s.Prefix, s.Timeout, s.Reconnect.MaxRetries, s.Breaker.Threshold)
	// Output: github stdio github 5m0s 3 3
}

func ExampleDiagnosticsError() {
	src := []byte(`
server "github" {
  comand = "npx"
}
`)
	_, err := config.Parse(src, "config.hcl")
	fmt.Println(err)
	// Output:
	// Error: Unsupported argument
	//
	//   on config.hcl line 3, in server "github":
	//    3:   comand = "npx"
	//
	// An argument named "comand" is not expected here. Did you mean "command"?
}

func ExampleConfig_Validate() {
	cfg := &config.Config{Servers: []*config.Server{
		{Name: "web", URL: "ftp://example.com/mcp"},
	}}
	cfg.ApplyDefaults()
	fmt.Println(cfg.Validate())
	// Output:
	// Error: Invalid url
	//
	// url in server "web" is "ftp://example.com/mcp": the scheme "ftp" is not http or https. Write an absolute http or https URL, such as "https://mcp.example.com/mcp".
}
