package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/mcpvisor/mcpvisor/host"
)

// versionLine is `mcpvisor version`: the version and commit `make dist`
// stamps (-ldflags -X), else the commit the Go toolchain recorded when it
// built from a checkout, and the Go version and platform.
func versionLine() string {
	commit := host.Commit
	if commit == "" {
		commit = "unknown"
		if bi, ok := debug.ReadBuildInfo(); ok {
			var rev, dirty string
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					if s.Value == "true" {
						dirty = "-dirty"
					}
				}
			}
			if rev != "" {
				commit = rev + dirty
			}
		}
	}
	return fmt.Sprintf("mcpvisor %s\ncommit %s\n%s %s/%s\n", host.Version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
