package wire

import (
	"context"
	"io"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// NewLineTransport returns a transport that speaks newline-delimited
// JSON-RPC over r and w, with the same framing and limits as the SDK's
// IOTransport but without its per-line goroutine handoff and large
// per-message decode buffer. Close closes both r and w. A line that is not
// a JSON-RPC message ends the connection with an error.
func NewLineTransport(r io.ReadCloser, w io.WriteCloser) mcp.Transport {
	return &lineTransport{r: r, w: w}
}

// NewServerLineTransport is NewLineTransport for a server process's pipes:
// a line on its stdout that is not a JSON-RPC message (a stray print, an
// npm banner) is handed to stray and skipped, as the reference TypeScript
// client does, instead of ending the session. maxLine bounds one line
// (the server's max_message_size); zero means the SDK's default, 16 MiB.
// A response longer than that fails the call it answers with the error
// tooLarge makes, and the connection goes on (see oversized.go); nil
// tooLarge ends the connection instead.
func NewServerLineTransport(r io.ReadCloser, w io.WriteCloser, stray func(line []byte), maxLine int64, tooLarge func(limit int64) error) mcp.Transport {
	return &lineTransport{r: r, w: w, stray: stray, maxLine: maxLine, tooLarge: tooLarge}
}

// NewClientLineTransport is NewLineTransport for a client's pipes (the
// downstream side of `run --stdio`): a line that is not a JSON-RPC message
// mcpvisor can decode (malformed, or nested deeper than the decoder
// allows) is answered with a JSON-RPC parse error (-32700, id null, as
// JSON-RPC 2.0 asks) and skipped, so one bad request fails alone instead
// of ending the client's session and, with it, mcpvisor.
func NewClientLineTransport(r io.ReadCloser, w io.WriteCloser) mcp.Transport {
	return &lineTransport{r: r, w: w, answerInvalid: true}
}

// StdioTransport serves the process's own stdin and stdout, for
// `run --stdio`.
//
// A read of stdin blocks in the kernel until the client writes or closes
// its end, and closing fd 0 does not end it. So stdin is copied by a
// goroutine of its own into a pipe the connection reads: closing the
// connection ends its reads at once (a shutdown never waits for the
// client), and the copying goroutine ends with the client's next write or
// with the process. fd 0 and fd 1 themselves are never closed.
func StdioTransport() mcp.Transport { return stdioTransport{} }

type stdioTransport struct{}

func (stdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	pr, pw := io.Pipe()
	go func() {
		_, err := io.Copy(pw, os.Stdin)
		pw.CloseWithError(err) // nil: EOF for the reader
	}()
	return NewClientLineTransport(pr, nopWriteCloser{os.Stdout}).Connect(ctx)
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
