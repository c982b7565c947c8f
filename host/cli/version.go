package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/mcpvisor/mcpvisor/host"
)

// versionLine is `mcpvisor version`: the version and commit `make dist`
// stamps (-ldflags -X), else the commit the Go toolchain recorded when it
// built from a checkout, and the Go version and platform.
func versionLine() string {
	commit := host.Commit
	if commit == "" {
		commit = "unknown"
		if rev, dirty := buildRevision(); rev != "" {
			commit = rev
			if dirty {
				commit += "-dirty"
			}
		}
	}
	return fmt.Sprintf("mcpvisor %s\ncommit %s\n%s %s/%s\n", semver(host.Version), commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// semver is version as a semantic version in every build: a development
// version without build metadata (a plain `go build`) gets the commit the
// toolchain recorded, as `make version` writes it (0.1.0-dev+0123456789ab,
// .dirty with uncommitted changes), so two dev builds never look alike.
func semver(version string) string {
	if !strings.HasSuffix(version, "-dev") {
		return version
	}
	rev, dirty := buildRevision()
	if rev == "" {
		return version + "+unknown"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += ".dirty"
	}
	return version + "+" + rev
}

// buildRevision is the commit the Go toolchain recorded (vcs.revision) and
// whether the checkout had uncommitted changes; "" outside a checkout.
func buildRevision() (rev string, dirty bool) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "", false
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	return rev, dirty
}
