//go:build unix && race

package transport

import "syscall"

// Under the race detector the annotated system calls are used: they tell
// it that data written to a pipe happens before its reading.

func rawRead(fd uintptr, p []byte) (int, error) {
	n, err := syscall.Read(int(fd), p)
	if err != nil {
		return 0, err
	}
	return n, nil
}

func rawWrite(fd uintptr, p []byte) (int, error) {
	n, err := syscall.Write(int(fd), p)
	if err != nil {
		return 0, err
	}
	return n, nil
}
