package sandbox

import (
	"fmt"
	"os"
	"os/user"
	"strconv"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// Credential is the user and group a server runs as (the sandbox block's
// user and group): the launcher sets them, with no supplementary group,
// before the exec.
type Credential struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// User and Group are the names as the block wrote them, for
	// messages.
	User  string `json:"user"`
	Group string `json:"group,omitempty"`
}

// ResolveUser finds the uid and gid of the sandbox block's user and
// group on this machine (nil without user). A user switch needs
// mcpvisor to run as root: otherwise, and for a user or group this
// machine does not have, the error says what to do.
func ResolveUser(sb *config.Sandbox, server string) (*Credential, error) {
	if sb == nil || sb.User == "" {
		return nil, nil
	}
	c := &Credential{User: sb.User, Group: sb.Group}
	if euid := os.Geteuid(); euid != 0 {
		return nil, fmt.Errorf("the sandbox of %q runs it as user %q, and only mcpvisor running as root can switch users (it runs as uid %d): run mcpvisor as root, or remove user", server, sb.User, euid)
	}
	var primary string
	if u, err := user.Lookup(sb.User); err == nil {
		primary = u.Gid
		c.UID = parseID(u.Uid)
	} else if n, nerr := strconv.ParseUint(sb.User, 10, 32); nerr == nil {
		c.UID = uint32(n)
		if u, err := user.LookupId(sb.User); err == nil {
			primary = u.Gid
		}
	} else {
		return nil, fmt.Errorf("user in the sandbox of %q is %q, which is not a user on this machine (%v): create it (useradd --system %s), or write a numeric uid", server, sb.User, err, sb.User)
	}
	switch {
	case sb.Group != "":
		if g, err := user.LookupGroup(sb.Group); err == nil {
			c.GID = parseID(g.Gid)
		} else if n, nerr := strconv.ParseUint(sb.Group, 10, 32); nerr == nil {
			c.GID = uint32(n)
		} else {
			return nil, fmt.Errorf("group in the sandbox of %q is %q, which is not a group on this machine (%v): create it (groupadd --system %s), or write a numeric gid", server, sb.Group, err, sb.Group)
		}
	case primary != "":
		c.GID = parseID(primary)
	default:
		return nil, fmt.Errorf("user in the sandbox of %q is uid %s, which has no entry in /etc/passwd to take its group from: set group as well", server, sb.User)
	}
	return c, nil
}

// parseID reads an id that os/user found; such an id is a number.
func parseID(s string) uint32 {
	n, _ := strconv.ParseUint(s, 10, 32)
	return uint32(n)
}
