package cli

import (
	"io/fs"

	"golang.org/x/sys/windows"
)

// permBitsArePrivate is false on Windows: Go reports synthetic permission
// bits there (0777 for every directory), and access is decided by ACLs.
// The control socket directory lives under the user's %TEMP%, which only
// that user can read; mcpvisor does not inspect ACLs (docs/operations.md).
const permBitsArePrivate = false

// fileOwner has no uid to report on Windows.
func fileOwner(fs.FileInfo) (uid int, ok bool) { return 0, false }

// processAlive reports whether a process with this pid runs.
func processAlive(pid int) bool {
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
	if err != nil {
		return false
	}
	defer windows.CloseHandle(h)
	var code uint32
	if err := windows.GetExitCodeProcess(h, &code); err != nil {
		return false
	}
	const stillActive = 259 // STILL_ACTIVE
	return code == stillActive
}
