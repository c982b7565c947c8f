package upstream

/*
Design note: input requests of a 2026-07-28 upstream.

A 2026-07-28 server that needs the client's help during tools/call,
prompts/get or resources/read ends the request with an input_required
result listing what it needs (sampling, elicitation, roots), and the client
sends the request again with the answers. The go-sdk client does this
itself, but it answers a roots/list from the client's own root list, which
in mcpvisor is shared by every downstream client (SetRoots): a call would
get the roots of whichever client last connected, not its own. So the
SDK's loop is turned off and answerInputRequests runs the same loop (the
same bounds on rounds) with every input request answered by the downstream
client the call is made for, exactly, since each result belongs to one
call. A call with no downstream client gets an empty root list and a
refused sampling or elicitation, as a session-based upstream does (see
downstream.go).

The SDK passes a request's context to its sending middleware and offers no
other way to hand the middleware a value per call, so the call's
downstream travels in that context (withCaller), within this package only.
*/

import (
	"context"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const (
	// maxInputRounds bounds the rounds of one call (the go-sdk's own
	// bound): an upstream that keeps asking cannot hold the call forever.
	maxInputRounds = 10
	// maxBusyRounds bounds the rounds in which the upstream asked for
	// nothing (it sheds load and wants the request again).
	maxBusyRounds = 3
)

type callerKey struct{}

// withCaller records in ctx the downstream client a call is made for.
func withCaller(ctx context.Context, d Downstream) context.Context {
	return context.WithValue(ctx, callerKey{}, d)
}

// callerOf returns the downstream client recorded by withCaller, or nil.
func callerOf(ctx context.Context) Downstream {
	d, _ := ctx.Value(callerKey{}).(Downstream)
	return d
}

// answerInputRequests is the SDK client's sending middleware that
// completes input_required results (see the note at the top).
func (s *Supervisor) answerInputRequests(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" && method != "prompts/get" && method != "resources/read" {
			return next(ctx, method, req)
		}
		d := callerOf(ctx)
		busy := 0
		for round := 1; ; round++ {
			res, err := next(ctx, method, req)
			if err != nil {
				return res, err
			}
			asks, state, ok := inputRequestsOf(res)
			if !ok {
				return res, nil
			}
			if len(asks) == 0 {
				busy++
				if busy >= maxBusyRounds {
					return nil, fmt.Errorf("server %q: %s: the server answered %d times that it is busy; try again later", s.name, method, busy)
				}
			}
			if round >= maxInputRounds {
				return nil, fmt.Errorf("server %q: %s: the server still asked for input after %d rounds; giving up", s.name, method, round)
			}
			answers, err := answerInputs(ctx, d, asks)
			if err != nil {
				return nil, err
			}
			if req, err = withAnswers(req, answers, state); err != nil {
				return nil, err
			}
		}
	}
}

// inputRequestsOf returns the input requests and request state of an
// input_required result; ok is false for any other result.
func inputRequestsOf(res mcp.Result) (asks mcp.InputRequestMap, state string, ok bool) {
	switch r := res.(type) {
	case *mcp.CallToolResult:
		return r.InputRequests, r.RequestState, r.InputRequests != nil
	case *mcp.GetPromptResult:
		return r.InputRequests, r.RequestState, r.InputRequests != nil
	case *mcp.ReadResourceResult:
		return r.InputRequests, r.RequestState, r.InputRequests != nil
	}
	return nil, "", false
}

// withAnswers returns the request to send again: a copy of req's params
// with the answers and the state to echo (req's own params are the
// caller's, never changed).
func withAnswers(req mcp.Request, answers mcp.InputResponseMap, state string) (mcp.Request, error) {
	cs, ok := req.GetSession().(*mcp.ClientSession)
	if !ok {
		return nil, fmt.Errorf("input requests: unexpected session type %T", req.GetSession())
	}
	switch p := req.GetParams().(type) {
	case *mcp.CallToolParams:
		cp := *p
		cp.InputResponses, cp.RequestState = answers, state
		return &mcp.ClientRequest[*mcp.CallToolParams]{Session: cs, Params: &cp}, nil
	case *mcp.CallToolParamsRaw:
		cp := *p
		cp.InputResponses, cp.RequestState = answers, state
		return &mcp.ClientRequest[*mcp.CallToolParamsRaw]{Session: cs, Params: &cp}, nil
	case *mcp.GetPromptParams:
		cp := *p
		cp.InputResponses, cp.RequestState = answers, state
		return &mcp.ClientRequest[*mcp.GetPromptParams]{Session: cs, Params: &cp}, nil
	case *mcp.ReadResourceParams:
		cp := *p
		cp.InputResponses, cp.RequestState = answers, state
		return &mcp.ClientRequest[*mcp.ReadResourceParams]{Session: cs, Params: &cp}, nil
	}
	return nil, fmt.Errorf("input requests: unexpected params type %T", req.GetParams())
}

// answerInputs asks the downstream client d (nil: none) every input
// request at once and collects the answers.
func answerInputs(ctx context.Context, d Downstream, asks mcp.InputRequestMap) (mcp.InputResponseMap, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		answers = make(mcp.InputResponseMap, len(asks))
		first   error
	)
	for id, ask := range asks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answer, err := answerInput(ctx, d, ask)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = fmt.Errorf("answering the server's input request %q: %w", id, err)
					cancel()
				}
				return
			}
			answers[id] = answer
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return answers, nil
}

// answerInput asks the downstream client d (nil: none) one input request.
func answerInput(ctx context.Context, d Downstream, ask mcp.InputRequest) (mcp.InputResponse, error) {
	switch p := ask.(type) {
	case *mcp.ListRootsParams:
		if d == nil {
			return &mcp.ListRootsResult{Roots: []*mcp.Root{}}, nil
		}
		return d.ListRoots(ctx, p)
	case *mcp.ElicitParams:
		if d == nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "elicitation/create: " + ErrNoDownstream.Error()}
		}
		return d.Elicit(ctx, p)
	case *mcp.CreateMessageParams:
		if d == nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "sampling/createMessage: " + ErrNoDownstream.Error()}
		}
		return d.CreateMessage(ctx, p)
	case *mcp.CreateMessageWithToolsParams:
		if d == nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "sampling/createMessage: " + ErrNoDownstream.Error()}
		}
		base, err := singleContent(p)
		if err != nil {
			return nil, err
		}
		return d.CreateMessage(ctx, base)
	}
	return nil, fmt.Errorf("unknown input request type %T", ask)
}

// singleContent converts a sampling request to the form a Downstream
// takes, one content block per message, as the go-sdk client does for a
// handler of that form.
func singleContent(p *mcp.CreateMessageWithToolsParams) (*mcp.CreateMessageParams, error) {
	msgs := make([]*mcp.SamplingMessage, 0, len(p.Messages))
	for _, m := range p.Messages {
		if len(m.Content) > 1 {
			return nil, fmt.Errorf("sampling/createMessage: a message has %d content blocks; mcpvisor hands clients one per message", len(m.Content))
		}
		var c mcp.Content
		if len(m.Content) == 1 {
			c = m.Content[0]
		}
		msgs = append(msgs, &mcp.SamplingMessage{Content: c, Role: m.Role})
	}
	return &mcp.CreateMessageParams{
		Meta:             p.Meta,
		IncludeContext:   p.IncludeContext,
		MaxTokens:        p.MaxTokens,
		Messages:         msgs,
		Metadata:         p.Metadata,
		ModelPreferences: p.ModelPreferences,
		StopSequences:    p.StopSequences,
		SystemPrompt:     p.SystemPrompt,
		Temperature:      p.Temperature,
	}, nil
}
