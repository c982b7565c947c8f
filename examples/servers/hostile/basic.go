package main

import (
	"context"
	"fmt"
	"os"
)

// The positive controls: a contained server must still do its job.
func init() {
	// read-file ARG: the first bytes of the file at ARG.
	register("read-file", func(_ context.Context, path string) (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		if len(b) > 64 {
			b = b[:64]
		}
		return fmt.Sprintf("%d bytes: %q", len(b), b), nil
	})
	// write-file ARG: creates (or truncates) the file at ARG.
	register("write-file", func(_ context.Context, path string) (string, error) {
		if err := os.WriteFile(path, []byte("hostile was here\n"), 0o600); err != nil {
			return "", err
		}
		return "wrote " + path, nil
	})
}
