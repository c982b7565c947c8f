package upstream

import (
	"context"
	"encoding/json"
	"maps"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// CallTool calls a tool on the upstream by its original name, for the
// downstream client d (nil: none). A tool that declared readOnlyHint is
// replayed if the process dies mid-call; any other tool is not, since its
// side effects may already have happened.
func (s *Supervisor) CallTool(ctx context.Context, d Downstream, params *mcp.CallToolParamsRaw) (*mcp.CallToolResult, error) {
	var res *mcp.CallToolResult
	meta := params.Meta
	upTok, rewritten, release := s.track(ctx, d, params.GetProgressToken())
	defer release()
	ctx = withCaller(ctx, d)
	if rewritten {
		meta = maps.Clone(meta)
		meta["progressToken"] = upTok
	}
	obs := s.newCall(d, "tools/call", params.Name, params.Arguments)
	obs.traceFromMeta(params.Meta)
	ctx = s.started(ctx, obs)
	meta = obs.propagated(meta)
	err := s.exec.do(ctx, nil, "tools/call", s.sessions.replayable(params.Name), obs.wrap(s, func(ctx context.Context, sess *session) error {
		var err error
		res, err = sdkCallTool(ctx, sess, meta, params)
		return err
	}))
	if obs != nil {
		var result any
		if res != nil {
			result = res
		}
		s.end(ctx, obs, err, res != nil && res.IsError, result)
	}
	return res, err
}

// sdkCallTool calls a tool through the SDK client with the downstream's
// raw params (meta may replace theirs).
func sdkCallTool(ctx context.Context, sess *session, meta mcp.Meta, p *mcp.CallToolParamsRaw) (*mcp.CallToolResult, error) {
	return sess.cs.CallTool(ctx, &mcp.CallToolParams{
		Meta:           sess.bridgeMeta(meta),
		Name:           p.Name,
		Arguments:      rawArgs(p.Arguments),
		InputResponses: p.InputResponses,
		RequestState:   p.RequestState,
	})
}

// ReadResource reads a resource for the downstream client d (nil: none).
// Reads are replayable.
func (s *Supervisor) ReadResource(ctx context.Context, d Downstream, params *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
	return observed(ctx, s, d, "resources/read", params.URI, nil, params,
		func(p *mcp.ReadResourceParams) *mcp.Meta { return &p.Meta }, (*mcp.ClientSession).ReadResource)
}

// observed runs a replayable operation for the downstream client d through
// the recovery path, reported to the observer as op on name (args, if
// set, gives its arguments as JSON). meta points at a params' _meta: the
// observer's trace context is added to it, and it is bridged to each
// session's version.
func observed[P, R any](ctx context.Context, s *Supervisor, d Downstream, op, name string, args func() []byte, params *P,
	meta func(*P) *mcp.Meta, send func(*mcp.ClientSession, context.Context, *P) (*R, error),
) (*R, error) {
	var obs *Call
	if s.opts.Observer != nil {
		var a []byte
		if args != nil {
			a = args()
		}
		obs = s.newCall(d, op, name, a)
		obs.traceFromMeta(*meta(params))
		ctx = s.started(ctx, obs)
		p := *params
		*meta(&p) = obs.propagated(*meta(params))
		params = &p
	}
	var res *R
	err := s.exec.do(ctx, d, op, true, obs.wrap(s, func(ctx context.Context, sess *session) error {
		var err error
		res, err = send(sess.cs, ctx, forSession(sess, params, meta))
		return err
	}))
	if obs != nil {
		var result any
		if res != nil {
			result = res
		}
		s.end(ctx, obs, err, false, result)
	}
	return res, err
}

// list runs one page of a list operation through the recovery path; list
// operations are replayable.
func list[P, R any](ctx context.Context, s *Supervisor, op string, params P, page func(*mcp.ClientSession, context.Context, P) (R, error)) (R, error) {
	var res R
	err := s.exec.do(ctx, nil, op, true, func(ctx context.Context, sess *session) error {
		var err error
		res, err = page(sess.cs, ctx, params)
		return err
	})
	return res, err
}

// ListResources lists the upstream's resources (one page).
func (s *Supervisor) ListResources(ctx context.Context, params *mcp.ListResourcesParams) (*mcp.ListResourcesResult, error) {
	return list(ctx, s, "resources/list", params, (*mcp.ClientSession).ListResources)
}

// ListResourceTemplates lists the upstream's resource templates (one page).
func (s *Supervisor) ListResourceTemplates(ctx context.Context, params *mcp.ListResourceTemplatesParams) (*mcp.ListResourceTemplatesResult, error) {
	return list(ctx, s, "resources/templates/list", params, (*mcp.ClientSession).ListResourceTemplates)
}

// ListPrompts lists the upstream's prompts (one page).
func (s *Supervisor) ListPrompts(ctx context.Context, params *mcp.ListPromptsParams) (*mcp.ListPromptsResult, error) {
	return list(ctx, s, "prompts/list", params, (*mcp.ClientSession).ListPrompts)
}

// ListTools lists the upstream's tools (one page).
func (s *Supervisor) ListTools(ctx context.Context, params *mcp.ListToolsParams) (*mcp.ListToolsResult, error) {
	return list(ctx, s, "tools/list", params, (*mcp.ClientSession).ListTools)
}

// GetPrompt gets a prompt by its original name, for the downstream client
// d (nil: none). Prompt gets are replayable.
func (s *Supervisor) GetPrompt(ctx context.Context, d Downstream, params *mcp.GetPromptParams) (*mcp.GetPromptResult, error) {
	var args func() []byte
	if params.Arguments != nil {
		args = func() []byte {
			b, _ := json.Marshal(params.Arguments)
			return b
		}
	}
	return observed(ctx, s, d, "prompts/get", params.Name, args, params,
		func(p *mcp.GetPromptParams) *mcp.Meta { return &p.Meta }, (*mcp.ClientSession).GetPrompt)
}

// Complete asks the upstream for argument completions, for the downstream
// client d (nil: none).
func (s *Supervisor) Complete(ctx context.Context, d Downstream, params *mcp.CompleteParams) (*mcp.CompleteResult, error) {
	var res *mcp.CompleteResult
	err := s.exec.do(ctx, d, "completion/complete", true, func(ctx context.Context, sess *session) error {
		var err error
		res, err = sess.cs.Complete(ctx, forSession(sess, params, func(p *mcp.CompleteParams) *mcp.Meta { return &p.Meta }))
		return err
	})
	return res, err
}

// Subscribe subscribes to updates of a resource.
func (s *Supervisor) Subscribe(ctx context.Context, params *mcp.SubscribeParams) error {
	return s.exec.do(ctx, nil, "resources/subscribe", true, func(ctx context.Context, sess *session) error {
		err := sess.cs.Subscribe(ctx, forSession(sess, params, func(p *mcp.SubscribeParams) *mcp.Meta { return &p.Meta }))
		if err == nil {
			s.idle.subscribed(sess, params.URI) // held: no idle stop (idle.go)
		}
		return err
	})
}

// Unsubscribe ends a resource subscription.
func (s *Supervisor) Unsubscribe(ctx context.Context, params *mcp.UnsubscribeParams) error {
	s.idle.unsubscribed(params.URI) // idle.go
	return s.exec.do(ctx, nil, "resources/unsubscribe", true, func(ctx context.Context, sess *session) error {
		return sess.cs.Unsubscribe(ctx, forSession(sess, params, func(p *mcp.UnsubscribeParams) *mcp.Meta { return &p.Meta }))
	})
}

// forSession returns a copy of params whose _meta (meta points at it)
// suits the session's protocol version (bridge.go).
func forSession[P any](sess *session, params *P, meta func(*P) *mcp.Meta) *P {
	p := *params
	*meta(&p) = sess.bridgeMeta(*meta(&p))
	return &p
}

// rawArgs passes the downstream's argument bytes through without decoding;
// a nil message stays absent rather than becoming JSON null.
func rawArgs(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return raw
}
