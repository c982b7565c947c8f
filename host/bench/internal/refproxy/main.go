// Command refproxy is the reference hop of the overhead benchmarks: the
// least any proxy process can add between the same client and server on
// this machine. It understands nothing about MCP.
//
//	refproxy -stdio -- CMD [ARGS...]   copy stdin to CMD and CMD's stdout back
//	refproxy -http ADDR -to URL        net/http reverse proxy from ADDR to URL
//
// With -http it prints "listening on http://ADDR" to stderr once serving.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
)

func main() {
	stdio := flag.Bool("stdio", false, "relay stdin/stdout to the command after --")
	listen := flag.String("http", "", "serve a reverse proxy on `addr`")
	to := flag.String("to", "", "with -http, the upstream base `url`")
	flag.Parse()
	var err error
	switch {
	case *stdio && flag.NArg() > 0:
		err = relay(flag.Args())
	case *listen != "" && *to != "":
		err = reverseProxy(*listen, *to)
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "refproxy:", err)
		os.Exit(1)
	}
}

func relay(args []string) error {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	go io.Copy(os.Stdout, out)
	io.Copy(in, os.Stdin)
	in.Close()
	return cmd.Wait()
}

func reverseProxy(addr, to string) error {
	u, err := url.Parse(to)
	if err != nil {
		return err
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	rp.Transport = tr
	// Streams the client abandons end with a copy error; that is normal.
	rp.ErrorLog = log.New(io.Discard, "", 0)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "listening on http://%s\n", l.Addr())
	return http.Serve(l, rp)
}
