//go:build !linux

package sandbox

import (
	"fmt"
	"os/exec"
	"syscall"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// Command fails: the launcher needs Linux.
func Command(spec *Spec) (*exec.Cmd, error) { return nil, ErrUnsupported }

// ProcAttr does nothing: there are no namespaces here.
func ProcAttr(spec *Spec, attr *syscall.SysProcAttr) {}

// Prepare refuses a sandbox block (config validation refuses it first);
// without one it returns the plain Spec.
func Prepare(sb *config.Sandbox, server, command, path string, args, env []string, cwd string) (spec *Spec, tmp, warning string, err error) {
	if sb != nil {
		return nil, "", "", fmt.Errorf("the sandbox of %q: %w", server, ErrUnsupported)
	}
	return &Spec{Path: path, Args: append([]string{command}, args...), Env: env}, "", "", nil
}

// ABI is 0: there is no Landlock here.
func ABI() int { return 0 }
