// Command asker is a hostile stdio MCP server for the hardening tests: its
// tools make requests to the client (sampling, elicitation, roots) in bulk,
// as a server that loops on sampling/createMessage would, and report what
// became of them.
//
// Tools:
//   - "flood" {method, n}: sends n requests of method ("sampling",
//     "elicitation" or "roots") at once and answers, once every one has an
//     answer or an error, with a JSON report (floodReport). While they run,
//     the report so far is written every 20 ms to the file named by
//     $ASKER_STATUS, when set, so a test can watch it.
//   - "hold": creates $ASKER_RELEASE.held, then answers "released" once
//     the file named by $ASKER_RELEASE exists, or fails when the call is
//     cancelled.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// floodReport is what "flood" answers and writes to $ASKER_STATUS.
type floodReport struct {
	Sent     int `json:"sent"`
	Answered int `json:"answered"`
	// CapDeclined counts errors naming max_pending_requests,
	// CapabilityDeclined those saying the client did not declare the
	// capability, Other every other error.
	CapDeclined        int    `json:"cap_declined"`
	CapabilityDeclined int    `json:"capability_declined"`
	Other              int    `json:"other"`
	FirstError         string `json:"first_error,omitempty"`
	Done               bool   `json:"done"`
}

type floodArgs struct {
	Method string `json:"method"`
	N      int    `json:"n"`
}

func main() {
	s := mcp.NewServer(&mcp.Implementation{Name: "asker", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "flood", Description: "Sends n requests of method to the client at once."},
		func(ctx context.Context, req *mcp.CallToolRequest, args floodArgs) (*mcp.CallToolResult, any, error) {
			rep := flood(ctx, req.Session, args)
			b, _ := json.Marshal(rep)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "hold", Description: "Answers once $ASKER_RELEASE exists."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			os.WriteFile(os.Getenv("ASKER_RELEASE")+".held", nil, 0o600)
			for {
				if _, err := os.Stat(os.Getenv("ASKER_RELEASE")); err == nil {
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "released"}}}, nil, nil
				}
				select {
				case <-ctx.Done():
					return nil, nil, ctx.Err()
				case <-time.After(20 * time.Millisecond):
				}
			}
		})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "asker:", err)
		os.Exit(1)
	}
}

func flood(ctx context.Context, ss *mcp.ServerSession, args floodArgs) floodReport {
	var (
		mu  sync.Mutex
		rep = floodReport{Sent: args.N}
		wg  sync.WaitGroup
	)
	record := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			rep.Answered++
			return
		case strings.Contains(err.Error(), "max_pending_requests"):
			rep.CapDeclined++
		case strings.Contains(err.Error(), "did not declare"):
			rep.CapabilityDeclined++
		default:
			rep.Other++
		}
		if rep.FirstError == "" {
			rep.FirstError = err.Error()
		}
	}
	for range args.N {
		wg.Go(func() {
			var err error
			switch args.Method {
			case "sampling":
				_, err = ss.CreateMessage(ctx, &mcp.CreateMessageParams{
					MaxTokens: 1,
					Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "again"}}},
				})
			case "elicitation":
				_, err = ss.Elicit(ctx, &mcp.ElicitParams{Message: "again"})
			case "roots":
				_, err = ss.ListRoots(ctx, nil)
			default:
				err = fmt.Errorf("unknown method %q", args.Method)
			}
			record(err)
		})
	}
	status := os.Getenv("ASKER_STATUS")
	stop := make(chan struct{})
	var writer sync.WaitGroup
	if status != "" {
		writer.Go(func() {
			for {
				mu.Lock()
				b, _ := json.Marshal(rep)
				mu.Unlock()
				os.WriteFile(status+".tmp", b, 0o600)
				os.Rename(status+".tmp", status)
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	writer.Wait()
	rep.Done = true
	if status != "" {
		b, _ := json.Marshal(rep)
		os.WriteFile(status+".tmp", b, 0o600)
		os.Rename(status+".tmp", status)
	}
	return rep
}
