package plugin

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// stderrTailLines is how many lines of plugin output are kept for error
// messages.
const stderrTailLines = 20

// output collects what a plugin process writes outside its log: the raw
// stderr go-plugin copies to ClientConfig.Stderr (which go-plugin also logs
// itself, line by line), and the plugin's os.Stdout and os.Stderr after
// Serve, which go-plugin forwards over gRPC to SyncStdout and SyncStderr
// and would otherwise discard.
type output struct {
	tail   *tail
	stdout *lineLogger
	stderr *lineLogger
}

func newOutput(logger hclog.Logger) *output {
	t := &tail{}
	return &output{
		tail:   t,
		stdout: &lineLogger{logger: logger, stream: "stdout"},
		stderr: &lineLogger{logger: logger, stream: "stderr", tail: t},
	}
}

// tail keeps the last lines written to it. go-plugin writes each line and
// its newline separately, so partial lines are buffered.
type tail struct {
	mu      sync.Mutex
	partial []byte
	lines   []string
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.partial = append(t.partial, p...)
	for {
		i := bytes.IndexByte(t.partial, '\n')
		if i < 0 {
			break
		}
		t.add(string(t.partial[:i]))
		t.partial = t.partial[i+1:]
	}
	return len(p), nil
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

// lineLogger writes each line it receives to the server's logger.
type lineLogger struct {
	logger  hclog.Logger
	stream  string
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
			w.logger.Info(line, "stream", w.stream)
			if w.tail != nil {
				w.tail.mu.Lock()
				w.tail.add(line)
				w.tail.mu.Unlock()
			}
		}
		w.partial = w.partial[i+1:]
	}
	return len(p), nil
}
