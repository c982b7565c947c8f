//go:build !unix

package transport

import (
	"io"
	"os"
)

func pollableStdin() io.ReadCloser { return nopReadCloser{os.Stdin} }
