package telemetry

/*
Design note: spans.

Each operation forwarded upstream gets one span, "<method> <name>", a child
of the downstream's W3C trace context: the request's _meta.traceparent
when it has one, else the HTTP request's traceparent header (the gateway
hands the headers to ExtractHTTP, which puts it in the request context). The span's context goes
upstream twice: in the request's _meta (every transport) and, for HTTP
upstreams, as the traceparent header (InjectHTTP wraps their client).

What happened inside the operation is known only when it ends (the
supervisor records the attempts, see upstream/observer.go), so the child
spans are recorded afterwards with their real timestamps: "await session"
while no session was ready, "reconnect" between a failed attempt and the
new session, and "retry" for the second attempt.
*/

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpvisor/mcpvisor/host/internal/upstream"
)

// instrumentationName names mcpvisor's tracer.
const instrumentationName = "github.com/mcpvisor/mcpvisor/host"

// propagator is the W3C trace context format, the only one MCP carries.
var propagator = propagation.TraceContext{}

type tracer struct {
	t trace.Tracer
}

func newTracer(tp trace.TracerProvider) *tracer {
	return &tracer{t: tp.Tracer(instrumentationName)}
}

func (t *tracer) start(ctx context.Context, c *upstream.Call) context.Context {
	if c.Traceparent != "" {
		carrier := propagation.MapCarrier{"traceparent": c.Traceparent}
		if c.Tracestate != "" {
			carrier["tracestate"] = c.Tracestate
		}
		if sc := trace.SpanContextFromContext(propagator.Extract(context.Background(), carrier)); sc.IsValid() {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	name := c.Method
	if c.Name != "" && c.Method != "resources/read" {
		name += " " + c.Name
	}
	attrs := []attribute.KeyValue{
		attribute.String("mcp.method.name", c.Method),
		attribute.String("mcpvisor.server", c.Server),
	}
	switch c.Method {
	case "tools/call":
		attrs = append(attrs, attribute.String("gen_ai.tool.name", c.Name))
	case "prompts/get":
		attrs = append(attrs, attribute.String("gen_ai.prompt.name", c.Name))
	case "resources/read":
		attrs = append(attrs, attribute.String("mcp.resource.uri", c.Name))
	}
	ctx, _ = t.t.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(c.Start), trace.WithAttributes(attrs...))
	carrier := propagation.MapCarrier{}
	propagator.Inject(ctx, carrier)
	if len(carrier) > 0 {
		c.Propagate = carrier
	}
	return ctx
}

// finish records the child spans and ends the operation's span. It
// returns the trace id, for the audit log.
func (t *tracer) finish(ctx context.Context, c *upstream.Call) string {
	span := trace.SpanFromContext(ctx)
	end := c.Start.Add(c.Duration)
	if c.AwaitedSession {
		until := end
		if len(c.Attempts) > 0 {
			until = c.Attempts[0].Start
		}
		t.child(ctx, "await session", c.Start, until)
	}
	for i := 1; i < len(c.Attempts); i++ {
		prev, a := c.Attempts[i-1], c.Attempts[i]
		t.child(ctx, "reconnect", prev.End, a.Start,
			attribute.String("mcpvisor.reason", prev.Class.String()),
			attribute.Int64("mcpvisor.generation.failed", int64(prev.Generation)),
			attribute.Int64("mcpvisor.generation.new", int64(a.Generation)))
		t.child(ctx, "retry", a.Start, a.End, attribute.Int64("mcpvisor.generation", int64(a.Generation)))
	}
	span.SetAttributes(
		attribute.String("mcpvisor.outcome", string(c.Outcome)),
		attribute.Int64("mcpvisor.generation", int64(c.Generation())),
		attribute.Int("mcpvisor.attempts", len(c.Attempts)),
	)
	if c.Err != nil {
		span.SetAttributes(attribute.String("error.type", errorKind(c.Class)))
		span.SetStatus(codes.Error, string(c.Outcome))
	}
	span.End(trace.WithTimestamp(end))
	if sc := span.SpanContext(); sc.IsValid() {
		return sc.TraceID().String()
	}
	return ""
}

func (t *tracer) child(ctx context.Context, name string, start, end time.Time, attrs ...attribute.KeyValue) {
	if end.Before(start) {
		end = start
	}
	_, s := t.t.Start(ctx, name, trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	s.End(trace.WithTimestamp(end))
}

// ExtractHTTP returns ctx with the W3C trace context of an HTTP request's
// headers, if any, as the remote parent.
func ExtractHTTP(ctx context.Context, h http.Header) context.Context {
	if h.Get("traceparent") == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// InjectHTTP wraps an HTTP upstream's round tripper so that requests made
// within a traced operation carry its traceparent header.
func InjectHTTP(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return injectingTransport{next: next}
}

type injectingTransport struct{ next http.RoundTripper }

func (t injectingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if trace.SpanContextFromContext(r.Context()).IsValid() {
		// A RoundTripper must not modify the request it was given.
		r = r.Clone(r.Context())
		propagator.Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	}
	return t.next.RoundTrip(r)
}

// CloseIdleConnections passes through, so http.Client.CloseIdleConnections
// still reaches the pool.
func (t injectingTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// TracingFromEnv returns a tracer provider exporting over OTLP/HTTP as the
// standard OTEL_EXPORTER_OTLP_* variables configure it, or nil when
// neither OTEL_EXPORTER_OTLP_ENDPOINT nor OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// is set (or OTEL_SDK_DISABLED=true, or OTEL_TRACES_EXPORTER=none).
// shutdown flushes and stops it.
func TracingFromEnv(ctx context.Context, serviceVersion string) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, nil, nil
	}
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(os.Getenv("OTEL_TRACES_EXPORTER"), "none") {
		return nil, nil, nil
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := os.Getenv(v); p != "" {
			if p != "http/protobuf" {
				return nil, nil, fmt.Errorf("%s=%q: mcpvisor exports traces over OTLP/HTTP only (http/protobuf)", v, p)
			}
			break
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName("mcpvisor"), semconv.ServiceVersion(serviceVersion)))
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		res = resource.Default()
	}
	p := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return p, p.Shutdown, nil
}
