package plugin

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/mcpvisor/mcpvisor/host/internal/transport"
)

// stderrTailLines is how many lines of plugin output are kept for error
// messages.
const stderrTailLines = 20

// output collects what a plugin process writes outside the gRPC
// connection: its real stderr, read by the runner, and its os.Stdout and
// os.Stderr after Serve, which go-plugin forwards over gRPC to SyncStdout
// and SyncStderr and would otherwise discard. Every line goes into the
// tail; the lines logged pass the server's output rate limit.
type output struct {
	tail    *tail
	limiter *transport.OutputLimiter
	stdout  *lineLogger
	stderr  *lineLogger
}

func newOutput(logger hclog.Logger, limiter *transport.OutputLimiter) *output {
	t := &tail{}
	return &output{
		tail:    t,
		limiter: limiter,
		stdout:  &lineLogger{logger: logger, stream: "stdout", limiter: limiter},
		stderr:  &lineLogger{logger: logger, stream: "stderr", limiter: limiter, tail: t},
	}
}

// tail keeps the last lines of a plugin's output for error messages.
type tail struct {
	mu    sync.Mutex
	lines []string
}

// addLine adds one line.
func (t *tail) addLine(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.add(line)
}

func (t *tail) add(line string) {
	line = strings.TrimSpace(line)
	if line == "" {
		return
	}
	// A plugin's hclog lines are JSON; keep the message and error, which
	// are what a person reading an error wants. Debug and trace lines
	// (go-plugin's own chatter among them) say nothing about a failure.
	if strings.HasPrefix(line, "{") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) == nil {
			if lvl, _ := e["@level"].(string); lvl == "debug" || lvl == "trace" {
				return
			}
			if m, ok := e["@message"].(string); ok {
				line = m
				if er, ok := e["error"].(string); ok {
					line += ": " + er
				}
			}
		}
	}
	t.lines = append(t.lines, line)
	if len(t.lines) > stderrTailLines {
		t.lines = t.lines[len(t.lines)-stderrTailLines:]
	}
}

// last returns up to n last lines joined into one line.
func (t *tail) last(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := t.lines
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// lineLogger writes each line it receives to the server's logger, within
// the server's output rate limit.
type lineLogger struct {
	logger  hclog.Logger
	stream  string
	limiter *transport.OutputLimiter
	tail    *tail // also fed, when set
	mu      sync.Mutex
	partial []byte
}

func (w *lineLogger) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		if line := strings.TrimRight(string(w.partial[:i]), "\r"); line != "" {
			if w.tail != nil {
				w.tail.addLine(line)
			}
			if w.logger.IsInfo() && w.limiter.Allow() {
				w.logger.Info(line, "stream", w.stream)
			}
		}
		w.partial = w.partial[i+1:]
	}
	return len(p), nil
}
