//go:build unix

package transport

import (
	"bytes"
	"errors"
	"io"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestRawFilePipes(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r, ok := rawIO(pr).(*rawFile)
	if !ok {
		t.Fatal("a non-blocking pipe was not taken")
	}
	w, ok := rawIO(pw).(*rawFile)
	if !ok {
		t.Fatal("a non-blocking pipe was not taken")
	}

	// A read waits (in the poller) until data comes.
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 16)
		n, err := r.Read(buf)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string(buf[:n])
	}()
	time.Sleep(20 * time.Millisecond)
	if _, err := w.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "hello" {
		t.Fatalf("read %q", s)
	}

	// A write larger than the pipe's buffer waits for the reader.
	big := bytes.Repeat([]byte("x"), 1<<20)
	done := make(chan error, 1)
	go func() {
		_, err := w.Write(big)
		done <- err
	}()
	all, err := io.ReadAll(io.LimitReader(r, int64(len(big))))
	if err != nil || !bytes.Equal(all, big) {
		t.Fatalf("read %d bytes of %d, %v", len(all), len(big), err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Close ends a pending read.
	go func() {
		_, err := r.Read(make([]byte, 1))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	r.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("read after Close succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end a pending read")
	}

	// The reader gone, a write fails with EPIPE rather than a signal.
	if _, err := w.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write to a pipe without a reader: %v", err)
	}
	w.Close()
}

func TestRawFileEOFAndBlockingFilesLeftAlone(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r := rawIO(pr).(*rawFile)
	pw.Write([]byte("ab"))
	pw.Close()
	b, err := io.ReadAll(r)
	if err != nil || string(b) != "ab" {
		t.Fatalf("read %q, %v", b, err)
	}
	r.Close()

	f, err := os.CreateTemp(t.TempDir(), "plain")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, ok := rawIO(f).(*rawFile); ok {
		t.Error("a regular (blocking) file was taken")
	}
	bp, bw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer bp.Close()
	defer bw.Close()
	bp.Fd() // puts it in blocking mode
	if _, ok := rawIO(bp).(*rawFile); ok {
		t.Error("a blocking pipe was taken")
	}
	if x := rawIO(io.NopCloser(nil)); x == nil {
		t.Error("a non-file was not returned as it was")
	}
}
