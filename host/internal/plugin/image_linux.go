package plugin

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// errNoMemfd says the sealed image cannot be made here; the caller falls
// back to a private copy.
var errNoMemfd = errors.New("no memfd image")

func errFallback(err error) bool { return errors.Is(err, errNoMemfd) }

// sealedImage copies src into a memfd, checks its hash and seals it; the
// child executes it as /proc/self/fd/3.
func sealedImage(src *os.File, path, want string) (*image, error) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		return nil, errNoMemfd
	}
	// MFD_EXEC: kernels with vm.memfd_noexec=1 make a memfd without it
	// non-executable; kernels before 6.3 do not know the flag.
	fd, err := unix.MemfdCreate("mcpvisor-plugin", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) {
		fd, err = unix.MemfdCreate("mcpvisor-plugin", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoMemfd, err)
	}
	f := os.NewFile(uintptr(fd), "memfd:mcpvisor-plugin")
	if err := copyHashed(f, src, path, want); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE|unix.F_SEAL_SEAL); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: sealing: %v", errNoMemfd, err)
	}
	return &image{execPath: "/proc/self/fd/3", files: []*os.File{f}, sealed: f}, nil
}
