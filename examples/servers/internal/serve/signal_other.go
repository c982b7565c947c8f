//go:build !unix

package serve

import "os"

// notifyForgetSessions returns a channel that never receives: there is no
// SIGUSR1 outside unix, so -forget-sessions-signal has no effect there.
func notifyForgetSessions() chan os.Signal { return make(chan os.Signal) }

func stopForgetSessions(chan os.Signal) {}
