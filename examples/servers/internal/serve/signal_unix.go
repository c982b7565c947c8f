//go:build unix

package serve

import (
	"os"
	"os/signal"
	"syscall"
)

// notifyForgetSessions returns a channel that receives SIGUSR1, the signal
// that makes an HTTP server drop all its sessions.
func notifyForgetSessions() chan os.Signal {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGUSR1)
	return c
}

func stopForgetSessions(c chan os.Signal) { signal.Stop(c) }
