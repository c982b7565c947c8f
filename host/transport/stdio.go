package transport

import (
	"io"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// NewLineTransport returns a transport that speaks newline-delimited
// JSON-RPC over r and w, with the same framing and limits as the SDK's
// IOTransport but without its per-line goroutine handoff and large
// per-message decode buffer. Close closes both r and w.
func NewLineTransport(r io.ReadCloser, w io.WriteCloser) mcp.Transport {
	return &lineTransport{r: r, w: w}
}

// StdioTransport serves mcpvisor's own stdin and stdout, for `run --stdio`.
//
// When stdin is a pipe or a socket it is read through a duplicate
// descriptor in non-blocking mode, so the read waits in Go's poller: a
// pending read then costs no thread and Close ends it at once (a blocking
// read of fd 0 could only end with the process). Stdout, when a pipe or a
// socket, is written the same way (a slow client makes a write wait in the
// poller, not in a thread), and both take the raw path of rawfile_unix.go.
// A terminal or a regular file is used as it is. Closing the transport's
// connection closes the duplicates, never fd 0 or fd 1 themselves.
func StdioTransport() mcp.Transport {
	return NewLineTransport(pollableStdin(), pollableStdout())
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// nopReadCloser is stdin when it cannot be duplicated: Close leaves fd 0
// open (the process is exiting anyway).
type nopReadCloser struct{ io.Reader }

func (nopReadCloser) Close() error { return nil }
