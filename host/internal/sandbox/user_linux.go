package sandbox

import (
	"fmt"
	"syscall"
)

// becomeUser switches the launcher to c (nil: stays). setgroups first
// (no supplementary group of mcpvisor's, such as docker or disk, reaches
// the server), then the group, then the user, which gives up the right
// to switch again. Go's syscall functions change every thread of the
// process.
func becomeUser(c *Credential) error {
	if c == nil {
		return nil
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("clearing the supplementary groups for user %s: %w", c.User, err)
	}
	if err := syscall.Setresgid(int(c.GID), int(c.GID), int(c.GID)); err != nil {
		return fmt.Errorf("switching to group %d for user %s: %w", c.GID, c.User, err)
	}
	if err := syscall.Setresuid(int(c.UID), int(c.UID), int(c.UID)); err != nil {
		return fmt.Errorf("switching to user %s (uid %d): %w", c.User, c.UID, err)
	}
	return nil
}
