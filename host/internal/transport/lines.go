package transport

import "bufio"

// ReadCappedLine returns the next line of br without its line ending, at
// most br's buffer size of it, and how many bytes beyond that it dropped.
// err is set at the end of input (the line is the last, unterminated one,
// possibly empty). It is how a stdio server's stderr is read, for the
// readers of other processes' output (a plugin's stderr).
func ReadCappedLine(br *bufio.Reader) (line []byte, cut int, err error) {
	return readCappedLine(br)
}
