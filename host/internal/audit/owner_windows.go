package audit

import "io/fs"

// permBitsArePrivate is false on Windows: Go reports synthetic permission
// bits there (0666 for every writable file) and access is decided by ACLs,
// which mcpvisor does not inspect (docs/operations.md).
const permBitsArePrivate = false

// fileOwner has no uid to report on Windows.
func fileOwner(fs.FileInfo) (uid int, ok bool) { return 0, false }
