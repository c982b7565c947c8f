package config

import (
	"fmt"
	"runtime"
	"strings"
)

// The smallest limits a server could start under: below them every
// runtime fails at start, which reads as a crash loop rather than a
// configuration error.
const (
	minMemoryLimit    int64 = 8 << 20
	minOpenFilesLimit       = 16
)

// containment checks the sandbox and limits blocks, idle_timeout and
// max_lifetime (docs/sandbox.md). They contain a process mcpvisor runs,
// so they belong to stdio servers only.
func (k *checker) containment(s *Server, name string) {
	stdio := s.Command != "" && s.URL == "" && s.Plugin == nil
	notStdio := func(key, what string) {
		k.errorf(k.at(s, key), "Not a stdio server",
			"%s in %s applies to a server mcpvisor runs as a subprocess (command = …); %s is reached over %s. Remove it.", what, name, name, transportWord(s))
	}
	if s.Sandbox != nil && !stdio {
		notStdio("sandbox", "The sandbox block")
	}
	if !s.Limits.IsZero() && !stdio {
		notStdio("limits", "The limits block")
	}
	if s.IdleTimeout != 0 && !stdio {
		notStdio("idle_timeout", "idle_timeout")
	}
	if s.MaxLifetime != 0 && !stdio {
		notStdio("max_lifetime", "max_lifetime")
	}

	if sb := s.Sandbox; sb != nil {
		if runtime.GOOS != "linux" {
			k.errorf(k.at(s, "sandbox"), "Sandbox unsupported on "+runtime.GOOS,
				"The sandbox block in %s needs Linux (Landlock and namespaces), and this is %s. Remove the block to run the server unconfined, or run mcpvisor on Linux.", name, runtime.GOOS)
		}
		switch sb.Network {
		case NetworkAny, NetworkNone, "":
		default:
			k.errorf(k.at(s, "sandbox.network"), "Invalid network",
				"network in the sandbox of %s is %q; use %q (the server gets a network namespace of its own and reaches no host) or %q (the default).", name, sb.Network, NetworkNone, NetworkAny)
		}
		if sb.Network == NetworkNone && len(sb.Connect) > 0 {
			k.errorf(k.at(s, "sandbox.connect"), "Conflicting network rules",
				"The sandbox of %s sets network = %q and connect; with no network there is nothing to connect to. Remove connect, or set network = %q.", name, NetworkNone, NetworkAny)
		}
		for _, p := range sb.Connect {
			if p < 1 || p > 65535 {
				k.errorf(k.at(s, "sandbox.connect"), "Invalid port",
					"connect in the sandbox of %s lists %d; a TCP port is between 1 and 65535.", name, p)
			}
		}
		switch {
		case sb.UDP && sb.Network == NetworkNone:
			k.errorf(k.at(s, "sandbox.udp"), "Conflicting network rules",
				"The sandbox of %s sets network = %q and udp; with no network there is no host to send UDP to. Remove udp, or set network = %q with connect.", name, NetworkNone, NetworkAny)
		case sb.UDP && len(sb.Connect) == 0:
			k.errorf(k.at(s, "sandbox.udp"), "Needless udp",
				"udp = true in the sandbox of %s allows UDP under connect, and it has no connect: without connect every TCP and UDP port is reachable already. Remove udp, or add connect = [443] (the TCP ports it may reach).", name)
		}
		if sb.Group != "" && sb.User == "" {
			k.errorf(k.at(s, "sandbox.group"), "Group without user",
				"The sandbox of %s sets group and no user; group is the group of the user the server runs as. Add user = \"NAME\" (a name or a numeric uid), or remove group.", name)
		}
		for _, f := range []struct{ key, v string }{{"sandbox.user", sb.User}, {"sandbox.group", sb.Group}} {
			if (f.v == "" && k.written(s, f.key)) || strings.ContainsFunc(f.v, func(r rune) bool { return r <= ' ' || r == ':' || r == 0x7f }) {
				what := f.key[len("sandbox."):]
				k.errorf(k.at(s, f.key), "Invalid "+what,
					"%s in the sandbox of %s is %q; write a name from /etc/passwd (/etc/group for group), such as \"mcp-notes\", or a number, such as \"1001\".", what, name, f.v)
			}
		}
		for _, f := range []struct {
			key   string
			paths []string
		}{{"sandbox.read", sb.Read}, {"sandbox.write", sb.Write}, {"sandbox.connect_unix", sb.ConnectUnix}} {
			for _, p := range f.paths {
				if p == "" {
					k.errorf(k.at(s, f.key), "Empty path",
						"%s in the sandbox of %s lists an empty path; name a file or directory, such as \"/srv/notes\".", f.key[len("sandbox."):], name)
				}
			}
		}
	}

	l := s.Limits
	if runtime.GOOS != "linux" && !l.IsZero() {
		k.errorf(k.at(s, "limits"), "Limits unsupported on "+runtime.GOOS,
			"The limits block in %s needs Linux (cgroups, /proc and rlimits), and this is %s. Remove the block, or run mcpvisor on Linux.", name, runtime.GOOS)
	}
	if l.Memory < 0 || (l.Memory == 0 && k.written(s, "limits.memory")) || (l.Memory > 0 && l.Memory < minMemoryLimit) {
		k.errorf(k.at(s, "limits.memory"), "Invalid memory limit",
			"memory in the limits of %s is %s; it must be at least %s, such as \"512MiB\" (remove it for no limit).", name, FormatSize(l.Memory), FormatSize(minMemoryLimit))
	}
	if l.Processes < 0 || (l.Processes == 0 && k.written(s, "limits.processes")) {
		k.errorf(k.at(s, "limits.processes"), "Invalid processes limit",
			"processes in the limits of %s is %d; it must be 1 or more, such as 64 (remove it for no limit).", name, l.Processes)
	}
	if l.OpenFiles < 0 || (l.OpenFiles == 0 && k.written(s, "limits.open_files")) || (l.OpenFiles > 0 && l.OpenFiles < minOpenFilesLimit) {
		k.errorf(k.at(s, "limits.open_files"), "Invalid open_files limit",
			"open_files in the limits of %s is %d; it must be at least %d, such as 1024 (remove it for no limit).", name, l.OpenFiles, minOpenFilesLimit)
	}
	for _, f := range []struct {
		key string
		v   interface{ String() string }
		neg bool
	}{
		{"idle_timeout", s.IdleTimeout, s.IdleTimeout < 0 || (s.IdleTimeout == 0 && k.written(s, "idle_timeout"))},
		{"max_lifetime", s.MaxLifetime, s.MaxLifetime < 0 || (s.MaxLifetime == 0 && k.written(s, "max_lifetime"))},
	} {
		if f.neg {
			k.errorf(k.at(s, f.key), "Invalid "+f.key,
				"%s in %s is %s; it must be greater than zero, such as \"10m\" (remove it to never stop the server for it).", f.key, name, f.v)
		}
	}
}

// transportWord names how a server is reached, for errors.
func transportWord(s *Server) string {
	switch {
	case s.URL != "":
		return fmt.Sprintf("%s (%s)", s.Transport, s.URL)
	case s.Plugin != nil:
		return fmt.Sprintf("the %q plugin", s.Plugin.Name)
	}
	return string(s.Transport)
}
