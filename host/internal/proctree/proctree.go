// Package proctree tells whether a local process is one an mcpvisor host
// started — a server, or anything a server started — so that the host
// never takes it for its operator, whatever its uid and whatever
// credential it found (docs/security.md, "The operator's door";
// docs/design.md §18).
//
// A process is a server's when, on Linux:
//
//   - it, or its process group's leader, or its session's leader, has a
//     host among its ancestors (the /proc/<pid>/stat ppid chain): a server
//     that forks stays in its keeper's process group, so a grandchild
//     whose parent exited is still found through the group;
//   - or it is in a server's cgroup (a cgroup named mcpvisor/<name>,
//     host/internal/resources), which no process can leave.
//
// A server without a cgroup that daemonizes (forks twice and calls
// setsid) leaves both its tree and its group; the operator credential
// (a file no sandboxed server can read) is then the door's only lock. The
// docs say so.
//
// Elsewhere the platform tells no peer's pid, and Server returns
// ErrUnsupported.
package proctree

import "errors"

// ErrUnsupported is returned where this package cannot tell.
var ErrUnsupported = errors.New("this platform does not tell a process's ancestors")
