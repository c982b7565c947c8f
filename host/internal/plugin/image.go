package plugin

/*
Design note: a locked plugin runs from the bytes that were hashed.

Hashing the binary's path and then executing the path leaves a window in
which someone who can write the file or its directory swaps the binary:
the hash is of one file, the process of another. So a locked plugin is
read once, through one open descriptor, into an image only this process
can write, hashing the bytes as they are copied; the image is then sealed
and executed, and a binary swapped in at the path afterwards is never run.

  - Linux: the image is a memfd (memfd_create), sealed against writes,
    shrinking and growing, and executed as /proc/self/fd/3 in the child.
    Nothing touches a file system, so a noexec /tmp does not matter. The
    image costs the binary's size in memory while the plugin runs.
  - elsewhere, or when memfd_create or /proc is not available: a private
    copy, mode 0700, in the 0700 directory go-plugin made for the plugin's
    socket (removed with it), executed by its path.

See docs/plugins.md ("Locking plugin binaries") and docs/security.md.
*/

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// image is the verified copy of a plugin binary a process is started from.
type image struct {
	// execPath is what the child executes.
	execPath string
	// files are handed to the child from fd 3 on (the memfd).
	files []*os.File
	// sealed is our copy of the memfd, closed once the child started.
	sealed *os.File
}

// close releases the image's descriptor; the child keeps its own.
func (im *image) close() {
	if im.sealed != nil {
		im.sealed.Close()
	}
}

// verifiedImage reads the binary at path once, copying it into an image
// only this process can write while hashing what it copies, and returns
// the image when the hash is want. privateDir is a 0700 directory of ours
// for the fallback copy.
func verifiedImage(path, want, privateDir string) (*image, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, &checksumError{path: path, err: err}
	}
	defer src.Close()
	if im, err := sealedImage(src, path, want); err == nil || !errFallback(err) {
		return im, err
	}
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return nil, &checksumError{path: path, err: err}
	}
	return copiedImage(src, path, want, privateDir)
}

// copyHashed copies src to dst and checks the SHA-256 of what was copied.
func copyHashed(dst io.Writer, src io.Reader, path, want string) error {
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(dst, h), src); err != nil {
		return &checksumError{path: path, err: fmt.Errorf("copying it: %w", err)}
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return &checksumError{path: path, got: got}
	}
	return nil
}

// copiedImage is the fallback: a private copy of the binary, mode 0700, in
// privateDir, executed by its path.
func copiedImage(src io.Reader, path, want, privateDir string) (*image, error) {
	dst := filepath.Join(privateDir, "plugin-"+filepath.Base(path))
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o700)
	if err != nil {
		return nil, &checksumError{path: path, err: fmt.Errorf("making a private copy to run: %w", err)}
	}
	err = copyHashed(f, src, path, want)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = &checksumError{path: path, err: fmt.Errorf("making a private copy to run: %w", cerr)}
	}
	if err != nil {
		os.Remove(dst)
		return nil, err
	}
	return &image{execPath: dst}, nil
}
