package plugin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// wrongSum is a SHA-256 no test content has.
const wrongSum = "0000000000000000000000000000000000000000000000000000000000000000"

func writeBinary(t *testing.T, content string) (path, sum string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256([]byte(content))
	return path, hex.EncodeToString(h[:])
}

// The image holds exactly the bytes that were hashed, and on Linux no one
// can change them afterwards, not even through our own descriptor.
func TestVerifiedImage(t *testing.T) {
	path, sum := writeBinary(t, "#!/bin/sh\nexit 0\n")
	im, err := verifiedImage(path, sum, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer im.close()
	if runtime.GOOS == "linux" {
		if im.sealed == nil || im.execPath != "/proc/self/fd/3" {
			t.Fatalf("on Linux the image is a memfd run as fd 3, got %+v", im)
		}
		if _, err := im.sealed.WriteAt([]byte("X"), 0); err == nil {
			t.Errorf("the sealed image took a write")
		}
		got := make([]byte, 64)
		n, _ := im.sealed.ReadAt(got, 0)
		if !bytes.Equal(got[:n], []byte("#!/bin/sh\nexit 0\n")) {
			t.Errorf("image holds %q", got[:n])
		}
	}
	if _, err := verifiedImage(path, wrongSum, t.TempDir()); err == nil {
		t.Errorf("an image with another hash was accepted")
	}
}

// The fallback copy is 0700 in the private directory, and a copy whose
// hash is wrong is not left behind.
func TestCopiedImage(t *testing.T) {
	path, sum := writeBinary(t, "#!/bin/sh\nexit 0\n")
	dir := t.TempDir()
	src, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	im, err := copiedImage(src, path, sum, dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(im.execPath)
	if err != nil || fi.Mode().Perm() != 0o700 || filepath.Dir(im.execPath) != dir {
		t.Errorf("copy %s: %v %v", im.execPath, fi, err)
	}
	src.Seek(0, 0)
	_, err = copiedImage(src, path, sum, t.TempDir())
	var ce *checksumError
	if err != nil {
		t.Fatalf("second copy into a fresh dir: %v", err)
	}
	other := t.TempDir()
	src.Seek(0, 0)
	if _, err = copiedImage(src, path, wrongSum, other); !errors.As(err, &ce) || ce.got != sum {
		t.Errorf("wrong hash: %v", err)
	}
	if entries, _ := os.ReadDir(other); len(entries) != 0 {
		t.Errorf("a refused copy was left behind: %s", entries[0].Name())
	}
}
