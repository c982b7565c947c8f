package transport_test

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// limitedEnv, set in the test binary's environment, makes it a process
// that waits for a line on stdin (so the limits are applied before it
// acts), then does what its value says: "hog N" touches N MiB and
// sleeps; "files" opens files until that fails and says how many on
// stderr.
const limitedEnv = "MCPVISOR_TEST_LIMITED"

func limitedProcess(mode string) {
	bufio.NewReader(os.Stdin).ReadString('\n')
	f := strings.Fields(mode)
	switch f[0] {
	case "hog":
		n, _ := strconv.Atoi(f[1])
		var keep [][]byte
		for i := 0; i < n; i++ {
			b := make([]byte, 1<<20)
			for j := range b {
				b[j] = 1
			}
			keep = append(keep, b)
		}
		fmt.Fprintln(os.Stderr, "allocated", len(keep))
	case "files":
		var n int
		for {
			if _, err := os.Open("/dev/null"); err != nil {
				fmt.Fprintf(os.Stderr, "opened %d: %v\n", n, err)
				break
			}
			n++
		}
	}
	time.Sleep(time.Hour)
}
