// Command bigstdio is a stdio MCP server for the hardening tests whose one
// tool, "t", answers with as many bytes as it is asked for, laid out as
// different SDKs write a response. Arguments: "mode" is "ok" (a small
// result: the server's pid), "id-first" ({"jsonrpc","id","result"}, as the
// go-sdk writes it) or "result-first" ({"result","jsonrpc","id"}, as the
// TypeScript SDK does); "size" is the bytes of text in the result.
//
// With -unix PATH it serves the same on a unix socket instead, one
// session per connection, and "ok" answers "conn-N" for the Nth
// connection.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
)

func main() {
	unix := flag.String("unix", "", "serve on this unix socket instead of stdio")
	flag.Parse()
	if *unix == "" {
		serve(os.Stdin, os.Stdout, strconv.Itoa(os.Getpid()))
		return
	}
	ln, err := net.Listen("unix", *unix)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "listening on unix:"+*unix)
	for n := 1; ; n++ {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			serve(c, c, "conn-"+strconv.Itoa(n))
		}()
	}
}

// serve answers one session's requests on r and w; tag is what "ok"
// answers.
func serve(r io.Reader, w io.Writer, tag string) {
	in := bufio.NewScanner(r)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriterSize(w, 64<<10)
	for in.Scan() {
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string `json:"protocolVersion"`
				Arguments       struct {
					Mode string `json:"mode"`
					Size int    `json:"size"`
				} `json:"arguments"`
			} `json:"params"`
		}
		if json.Unmarshal(in.Bytes(), &msg) != nil || len(msg.ID) == 0 || msg.Method == "" {
			continue // a notification or an answer
		}
		id := string(msg.ID)
		switch msg.Method {
		case "initialize":
			fmt.Fprintf(out, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":%q,"capabilities":{"tools":{}},"serverInfo":{"name":"bigstdio","version":"1"}}}`+"\n", id, msg.Params.ProtocolVersion)
		case "tools/list":
			fmt.Fprintf(out, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"t","inputSchema":{"type":"object"}}]}}`+"\n", id)
		case "tools/call":
			a := msg.Params.Arguments
			text := tag
			if a.Mode != "ok" {
				text = strings.Repeat("y", a.Size)
			}
			result := `{"content":[{"type":"text","text":"` + text + `"}]}`
			if a.Mode == "result-first" {
				fmt.Fprintf(out, `{"result":%s,"jsonrpc":"2.0","id":%s}`+"\n", result, id)
			} else {
				fmt.Fprintf(out, `{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", id, result)
			}
		default:
			fmt.Fprintf(out, `{"jsonrpc":"2.0","id":%s,"result":{}}`+"\n", id)
		}
		if out.Flush() != nil {
			return
		}
	}
}
