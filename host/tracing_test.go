//go:build unix

package host_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/mcpvisor/mcpvisor/host"
	"github.com/mcpvisor/mcpvisor/host/config"
	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

// otlpReceiver is an OTLP/HTTP trace endpoint: it decodes the real
// protobuf export requests and keeps the spans.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []receivedSpan
}

type receivedSpan struct {
	traceID, spanID, parentID, name string
	attrs                           map[string]string
}

func (rcv *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "unexpected request", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rcv.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				attrs := map[string]string{}
				for _, kv := range s.Attributes {
					attrs[kv.Key] = kv.Value.GetStringValue()
				}
				rcv.spans = append(rcv.spans, receivedSpan{
					traceID: hex.EncodeToString(s.TraceId), spanID: hex.EncodeToString(s.SpanId),
					parentID: hex.EncodeToString(s.ParentSpanId), name: s.Name, attrs: attrs,
				})
			}
		}
	}
	rcv.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func (rcv *otlpReceiver) find(traceID, name string) (receivedSpan, bool) {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for _, s := range rcv.spans {
		if s.traceID == traceID && s.name == name {
			return s, true
		}
	}
	return receivedSpan{}, false
}

// headerTransport adds a header to every request.
type headerTransport struct {
	key, value string
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.key, h.value)
	return http.DefaultTransport.RoundTrip(r)
}

// metaSeen is what echo's meta tool reports it received.
type metaSeen struct {
	Meta              map[string]any `json:"meta"`
	TraceparentHeader string         `json:"traceparent_header"`
}

func callMeta(t *testing.T, cs *mcp.ClientSession, name string, meta mcp.Meta) metaSeen {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Meta: meta})
	if err != nil || res.IsError {
		t.Fatalf("%s: %v %+v", name, err, res)
	}
	var seen metaSeen
	if err := json.Unmarshal([]byte(textOf(t, res.Content[0])), &seen); err != nil {
		t.Fatal(err)
	}
	return seen
}

// traceOf splits a traceparent into trace id and parent span id.
func traceOf(t *testing.T, tp string) (traceID, spanID string) {
	t.Helper()
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || parts[0] != "00" {
		t.Fatalf("malformed traceparent %q", tp)
	}
	return parts[1], parts[2]
}

// `mcpvisor run` with OTEL_EXPORTER_OTLP_ENDPOINT set sends a span per
// forwarded call to the OTLP/HTTP receiver, in the downstream's trace:
// taken from the HTTP traceparent header, or from _meta.traceparent, which
// wins. The upstream gets mcpvisor's span as its parent, in the header
// (HTTP upstream) and in _meta (every upstream).
func TestTracesReachOTLPAndUpstreams(t *testing.T) {
	rcv := &otlpReceiver{}
	collector := httptest.NewServer(rcv)
	defer collector.Close()

	web := testutil.StartServer(t, bins["echo"], "-http", "127.0.0.1:0")
	addr := freePort(t)
	cfgPath := filepath.Join(t.TempDir(), "config.hcl")
	src := fmt.Sprintf(`host {
  listen = %q
}
server "echo" {
  command = %q
}
server "web" {
  url = %q
}
`, addr, bins["echo"], web.URL)
	if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	run := testutil.StartServer(t, bins["mcpvisor"], "run", "-config", cfgPath)
	run.WaitLine(t, "", 5*time.Second)
	testutil.Eventually(t, 60*time.Second, "both servers ready", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK && strings.Count(fmt.Sprint(statusNames(t, addr)), "ready") == 2
	})

	const headerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	const metaTrace = "0af7651916cd43dd8448eb211c80319c"
	client := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   "http://" + addr + "/mcp",
		HTTPClient: &http.Client{Transport: headerTransport{"traceparent", "00-" + headerTrace + "-00f067aa0ba902b7-01"}},
	}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	// The header's trace, to an HTTP upstream: header and _meta.
	seen := callMeta(t, cs, "web__meta", nil)
	tid, parent := traceOf(t, seen.TraceparentHeader)
	if tid != headerTrace || parent == "00f067aa0ba902b7" {
		t.Errorf("upstream header traceparent %q: want trace %s under mcpvisor's span", seen.TraceparentHeader, headerTrace)
	}
	if mt, _ := seen.Meta["traceparent"].(string); mt != seen.TraceparentHeader {
		t.Errorf("upstream _meta.traceparent %q, header %q: want the same", mt, seen.TraceparentHeader)
	}
	testutil.Eventually(t, 30*time.Second, "the web__meta span at the receiver", func() bool {
		s, ok := rcv.find(headerTrace, "tools/call meta")
		return ok && s.spanID == parent && s.parentID == "00f067aa0ba902b7" && s.attrs["mcpvisor.server"] == "web"
	})

	// _meta's trace wins over the header's, to a stdio upstream.
	seen = callMeta(t, cs, "echo__meta", mcp.Meta{"traceparent": "00-" + metaTrace + "-b7ad6b7169203331-01"})
	mt, _ := seen.Meta["traceparent"].(string)
	tid, parent = traceOf(t, mt)
	if tid != metaTrace || parent == "b7ad6b7169203331" {
		t.Errorf("upstream _meta.traceparent %q: want trace %s under mcpvisor's span", mt, metaTrace)
	}
	if seen.TraceparentHeader != "" {
		t.Errorf("a stdio upstream saw a header %q", seen.TraceparentHeader)
	}
	testutil.Eventually(t, 30*time.Second, "the echo__meta span at the receiver", func() bool {
		s, ok := rcv.find(metaTrace, "tools/call meta")
		return ok && s.spanID == parent && s.parentID == "b7ad6b7169203331" && s.attrs["mcpvisor.outcome"] == "ok"
	})
}

func statusNames(t *testing.T, addr string) []string {
	resp, err := http.Get("http://" + addr + "/status")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var doc struct {
		Servers []struct{ Name, State string }
	}
	json.NewDecoder(resp.Body).Decode(&doc)
	var out []string
	for _, s := range doc.Servers {
		out = append(out, s.Name+"="+s.State)
	}
	return out
}

// refuseOnce stands in front of an HTTP upstream and answers its next
// tools/call with 401, as an upstream whose token was just rotated does.
type refuseOnce struct {
	next   http.Handler
	refuse atomic.Bool
}

func (p *refuseOnce) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if bytes.Contains(body, []byte(`"tools/call"`)) && p.refuse.CompareAndSwap(true, false) {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	p.next.ServeHTTP(w, r)
}

// A call forwarded as bytes (stdio downstream) to an HTTP upstream that
// refuses it once: the upstream's _meta carries the downstream's trace,
// and the span has the reconnect and the retry as children.
func TestTraceOfRecoveredCall(t *testing.T) {
	web := testutil.StartServer(t, bins["echo"], "-http", "127.0.0.1:0")
	target, _ := url.Parse(web.URL)
	proxy := &refuseOnce{next: httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})}
	front := httptest.NewServer(proxy)
	defer front.Close()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
server "web" {
  url = %q
}
`, front.URL+target.Path)), filepath.Join(t.TempDir(), "config.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	h, err := host.New(cfg, host.WithLogger(logger(t)), host.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h.Start(ctx)
	defer h.Close(context.Background())
	if err := h.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil)
	cs, err := client.Connect(ctx, linePipes(t, h), &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	proxy.refuse.Store(true)
	const trace = "0af7651916cd43dd8448eb211c80319c"
	before := host.Forwarded(h)
	seen := callMeta(t, cs, "web__meta", mcp.Meta{"traceparent": "00-" + trace + "-b7ad6b7169203331-01", "other": "kept"})
	if host.Forwarded(h) == before {
		t.Error("the call was not forwarded as bytes")
	}
	mt, _ := seen.Meta["traceparent"].(string)
	if tid, _ := traceOf(t, mt); tid != trace || seen.Meta["other"] != "kept" {
		t.Errorf("upstream _meta %v: want trace %s and the downstream's own members", seen.Meta, trace)
	}
	var names []string
	var call sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		if s.SpanContext().TraceID().String() != trace {
			continue
		}
		names = append(names, s.Name())
		if s.Name() == "tools/call meta" {
			call = s
		}
	}
	if call == nil {
		t.Fatalf("no span for the call in trace %s; spans %v", trace, names)
	}
	children := map[string]bool{}
	for _, s := range spans.Ended() {
		if s.Parent().SpanID() == call.SpanContext().SpanID() {
			children[s.Name()] = true
		}
	}
	attrs := map[string]string{}
	for _, kv := range call.Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	if !children["reconnect"] || !children["retry"] || attrs["mcpvisor.outcome"] != "replayed" || attrs["mcpvisor.attempts"] != "2" {
		t.Errorf("call span %v with children %v; want outcome replayed after a reconnect and a retry", attrs, children)
	}
}
