//go:build !unix

package transport

import (
	"io"
	"os"
)

func pollableStdin() io.ReadCloser { return nopReadCloser{os.Stdin} }

func pollableStdout() io.WriteCloser { return nopWriteCloser{os.Stdout} }

func rawIO(x any) any { return x }
