package wire

import (
	"io"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// NewLineTransport returns a transport that speaks newline-delimited
// JSON-RPC over r and w, with the same framing and limits as the SDK's
// IOTransport but without its per-line goroutine handoff and large
// per-message decode buffer. Close closes both r and w.
func NewLineTransport(r io.ReadCloser, w io.WriteCloser) mcp.Transport {
	return &lineTransport{r: r, w: w}
}

// StdioTransport serves the process's own stdin and stdout, for
// `run --stdio`. Closing its connection leaves fd 0 and fd 1 open: a read
// pending on stdin ends when the client closes its end or the process
// exits.
func StdioTransport() mcp.Transport {
	return NewLineTransport(nopReadCloser{os.Stdin}, nopWriteCloser{os.Stdout})
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

type nopReadCloser struct{ io.Reader }

func (nopReadCloser) Close() error { return nil }
