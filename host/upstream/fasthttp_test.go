package upstream

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestScanEvents(t *testing.T) {
	stream := ": comment\r\n" +
		"event: message\n" +
		"id: 1\n" +
		"data: {\"a\":\n" +
		"data: 1}\n" +
		"\n" +
		"event: ping\n" +
		"data: ignored\n" +
		"\n" +
		"data:{\"b\":2}\r\n" +
		"\r\n" +
		"event:\n" + // an empty type is a message
		"data: {\"d\":4}\n" +
		"\n" +
		"event: ping\n" +
		"event: message\n" + // the last type counts
		"data: {\"e\":5}\n" +
		"\n" +
		"data: {\"c\":3}\n" // no blank line after it: never dispatched
	var got []string
	if err := scanEvents(strings.NewReader(stream), func(data []byte) (bool, error) {
		got = append(got, string(data))
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{"{\"a\":\n1}", "{\"b\":2}", "{\"d\":4}", "{\"e\":5}"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("events %q, want %q", got, want)
	}

	// An error from fn ends the scan and is returned.
	n := 0
	stop := errors.New("stop")
	err := scanEvents(strings.NewReader("data: 1\n\ndata: 2\n\n"), func([]byte) (bool, error) {
		n++
		return false, stop
	})
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("err %v after %d events, want stop after 1", err, n)
	}
	// done ends it without an error.
	n = 0
	err = scanEvents(strings.NewReader("data: 1\n\ndata: 2\n\n"), func([]byte) (bool, error) {
		n++
		return true, nil
	})
	if err != nil || n != 1 {
		t.Fatalf("err %v after %d events, want nil after 1", err, n)
	}
}

// FuzzScanEvents: whatever precedes it, a complete event written after a
// blank line comes back as written, and no event exceeds the limit.
func FuzzScanEvents(f *testing.F) {
	f.Add([]byte("data: {}\n\n"), []byte(`{"jsonrpc":"2.0","id":"x","result":{}}`))
	f.Add([]byte("event: x\ndata: y\n\n:\n\n"), []byte("z"))
	f.Add([]byte("data"), []byte(" "))
	f.Add([]byte("event: ping\r"), []byte("p"))
	f.Fuzz(func(t *testing.T, prefix, payload []byte) {
		if len(payload) == 0 || bytes.ContainsAny(payload, "\r\n") {
			return // an empty event carries no message and is skipped
		}
		stream := append(append([]byte(nil), prefix...), "\n\ndata: "...)
		stream = append(append(stream, payload...), "\n\n"...)
		var last []byte
		events := 0
		err := scanEvents(bytes.NewReader(stream), func(data []byte) (bool, error) {
			if len(data) > maxHTTPMessage {
				t.Fatalf("event of %d bytes", len(data))
			}
			last = append(last[:0], data...)
			events++
			return false, nil
		})
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		if events == 0 || !bytes.Equal(last, payload) {
			t.Fatalf("last of %d events %q, want %q", events, last, payload)
		}
	})
}
