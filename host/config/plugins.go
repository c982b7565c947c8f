package config

// What a plugin block's binary must hash to, and the two checks that read
// binaries from disk: CheckPlugins (for `mcpvisor validate`) and
// LockPlugins (for `mcpvisor plugins lock`). The plugin launcher refuses a
// mismatching binary on every start with the same advice text
// (UpgradeAdvice), so a person reads the same way out wherever they meet it.

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
)

// Binary resolves the plugin's command the way mcpvisor starts it: a path
// (Load has made a relative one absolute) must name an existing file; a
// bare name, possible only in a Config built in Go, is looked up in PATH.
// The error says what is wrong and what to do.
func (p *Plugin) Binary() (string, error) {
	if !strings.Contains(p.Command, string(filepath.Separator)) {
		path, err := exec.LookPath(p.Command)
		if err != nil {
			return "", fmt.Errorf("%s is not in PATH", p.Command)
		}
		return path, nil
	}
	fi, err := os.Stat(p.Command)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("%s does not exist (build it with `make plugins`?)", p.Command)
	case err != nil:
		return "", err
	case fi.IsDir():
		return "", fmt.Errorf("%s is a directory", p.Command)
	}
	return p.Command, nil
}

// FileSHA256 returns the SHA-256 of the file at path as 64 lowercase
// hexadecimal digits, as sha256sum prints it.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// WantSHA256 is the hash the plugin's binary must have, lowercase: the
// block's sha256, which wins when set, else the lock file's entry. It is
// empty when the plugin is unlocked: neither is set.
func (p *Plugin) WantSHA256() string {
	switch {
	case p.SHA256 != "":
		return strings.ToLower(p.SHA256)
	case p.Lock != nil:
		return p.Lock.SHA256
	}
	return ""
}

// Mismatch says, for messages, that the binary at path hashes to got
// where the block requires WantSHA256, and where that requirement is
// written.
func (p *Plugin) Mismatch(path, got string) string {
	want := p.WantSHA256()
	if p.SHA256 != "" || p.Lock == nil {
		return fmt.Sprintf("%s has SHA-256 %s, but the server block's sha256 is %s", path, got, want)
	}
	if p.Lock.Path != "" && p.Lock.Path != path {
		return fmt.Sprintf("%s has SHA-256 %s, but %s records %s (for %s)", path, got, p.Lock.File, want, p.Lock.Path)
	}
	return fmt.Sprintf("%s has SHA-256 %s, but %s records %s", path, got, p.Lock.File, want)
}

// LockCommand is the command that (re)writes this plugin's lock file.
func (p *Plugin) LockCommand() string {
	if p.Lock == nil || p.Lock.ConfigFile == "" {
		return "mcpvisor plugins lock"
	}
	return "mcpvisor plugins lock -config " + shellWord(p.Lock.ConfigFile)
}

// UpgradeAdvice tells a person what to do about a binary whose hash (got)
// is not the one WantSHA256 requires.
func (p *Plugin) UpgradeAdvice(got string) string {
	if p.SHA256 != "" {
		return fmt.Sprintf("If you upgraded or rebuilt the plugin on purpose, set sha256 = %q in the server block (or remove sha256 and run `%s`); if not, find out who replaced the binary.",
			got, p.LockCommand())
	}
	return fmt.Sprintf("If you upgraded or rebuilt the plugin on purpose, run `%s` to record the new hash, then reload (SIGHUP) or restart mcpvisor; if not, find out who replaced the binary.",
		p.LockCommand())
}

// shellWord quotes s for a shell command line when it needs quoting.
func shellWord(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`*?[]{}()<>|&;#~!") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Report holds what CheckPlugins and LockPlugins found on disk: errors and
// warnings, in file order, with the sources needed to quote them.
type Report struct {
	// Diags are the findings, errors and warnings, ordered by position.
	Diags hcl.Diagnostics
	// Files are the configuration and lock files by name, for snippets.
	Files map[string]*hcl.File
}

// HasErrors reports whether any finding is an error.
func (r *Report) HasErrors() bool { return r.Diags.HasErrors() }

// WriteDiagnostics writes the findings with HCL's diagnostic text writer,
// like DiagnosticsError.WriteDiagnostics.
func (r *Report) WriteDiagnostics(w io.Writer, width uint, color bool) error {
	return hcl.NewDiagnosticTextWriter(w, r.Files, width, color).WriteDiagnostics(r.Diags)
}

// report collects findings about a Config.
type report struct {
	c     *Config
	diags hcl.Diagnostics
}

func (r *report) add(sev hcl.DiagnosticSeverity, s *Server, summary, format string, args ...any) {
	d := &hcl.Diagnostic{Severity: sev, Summary: summary, Detail: fmt.Sprintf(format, args...)}
	if s != nil && s.DeclRange.Filename != "" {
		d.Subject = s.DeclRange.Ptr()
	}
	r.diags = append(r.diags, d)
}

func (r *report) done() *Report {
	files := map[string]*hcl.File{}
	p := hclparse.NewParser()
	for _, name := range []string{r.c.Filename, lockFilename(r.c)} {
		if name == "" {
			continue
		}
		if src, err := os.ReadFile(name); err == nil {
			if f, _ := p.ParseHCL(src, name); f != nil {
				files[name] = f
			}
		}
	}
	sortDiagnostics(r.diags)
	return &Report{Diags: r.diags, Files: files}
}

func lockFilename(c *Config) string {
	if c.Lock != nil {
		return c.Lock.Filename
	}
	return ""
}

// binaryHash resolves and hashes the plugin binary of s.
func binaryHash(p *Plugin) (path, sum string, err error) {
	if path, err = p.Binary(); err != nil {
		return "", "", err
	}
	if sum, err = FileSHA256(path); err != nil {
		return path, "", err
	}
	return path, sum, nil
}

// CheckPlugins hashes the binary of every plugin block and compares it
// with the hash the block requires (WantSHA256), without starting
// anything. It reports as errors the binaries mcpvisor would refuse to
// start; as warnings the plugins that are not locked, binaries it cannot
// read (a plugin not built yet), a lock entry that disagrees with a
// block's sha256, and lock entries no plugin block uses.
func (c *Config) CheckPlugins() *Report {
	r := &report{c: c}
	for _, s := range c.Servers {
		p := s.Plugin
		if p == nil {
			continue
		}
		what := fmt.Sprintf("The plugin %q of server %q", p.Name, s.Name)
		path, got, err := binaryHash(p)
		if err != nil {
			r.add(hcl.DiagWarning, s, "Cannot check plugin binary",
				"%s cannot be checked against its hash: %v. mcpvisor checks it again on every start.", what, err)
			continue
		}
		want := p.WantSHA256()
		switch {
		case want == "":
			lockFile := LockFileName
			if p.Lock != nil {
				lockFile = p.Lock.File
			}
			r.add(hcl.DiagWarning, s, "Plugin not locked",
				"%s (%s, sha256 %s) has no entry in %s and no sha256, so mcpvisor runs whatever binary is at that path. Run `%s` to record its hash, and commit %s with the configuration.",
				what, path, got, lockFile, p.LockCommand(), LockFileName)
		case got != want:
			summary := "Plugin binary does not match the lock file"
			if p.SHA256 != "" {
				summary = "Plugin binary does not match sha256"
			}
			r.add(hcl.DiagError, s, summary,
				"The binary of the plugin %q in server %q differs from the one recorded: %s, so mcpvisor refuses to start it. %s",
				p.Name, s.Name, p.Mismatch(path, got), p.UpgradeAdvice(got))
		case p.SHA256 != "" && p.Lock != nil && p.Lock.SHA256 != "" && p.Lock.SHA256 != want:
			r.add(hcl.DiagWarning, s, "Lock file disagrees with sha256",
				"%s matches its sha256, which wins, but %s records %s for it. Run `%s` to bring the lock file up to date.",
				what, p.Lock.File, p.Lock.SHA256, p.LockCommand())
		}
	}
	if c.Lock != nil {
		for _, e := range c.Lock.Plugins {
			if s := c.server(e.Server); s != nil && s.Plugin != nil && s.Plugin.Name == e.Plugin {
				continue
			}
			r.diags = append(r.diags, &hcl.Diagnostic{
				Severity: hcl.DiagWarning,
				Summary:  "Stale lock file entry",
				Detail: fmt.Sprintf("The lock file has an entry for the plugin %q of server %q, but the configuration has no such plugin block. Run `mcpvisor plugins lock -config %s` to remove it.",
					e.Plugin, e.Server, shellWord(c.Filename)),
				Subject: e.DeclRange.Ptr(),
			})
		}
	}
	return r.done()
}

// LockPlugins hashes the binary of every plugin block and returns the lock
// file that records them, to be written with Lock.Write. It needs a
// configuration loaded from a file (the lock file goes beside it). The
// report's errors are binaries that cannot be read, and binaries that
// differ from their block's sha256, which wins over the lock file: locking
// would not make them run. The lock is nil when there are errors.
func (c *Config) LockPlugins() (*Lock, *Report) {
	r := &report{c: c}
	if c.Filename == "" {
		r.add(hcl.DiagError, nil, "No configuration file",
			"The lock file is written beside the configuration file, and this configuration was not loaded from one.")
		return nil, r.done()
	}
	lock := &Lock{Filename: LockPath(c.Filename)}
	for _, s := range c.Servers {
		p := s.Plugin
		if p == nil {
			continue
		}
		path, got, err := binaryHash(p)
		if err != nil {
			r.add(hcl.DiagError, s, "Cannot read plugin binary",
				"The plugin %q of server %q cannot be locked: %v.", p.Name, s.Name, err)
			continue
		}
		if p.SHA256 != "" && !strings.EqualFold(p.SHA256, got) {
			r.add(hcl.DiagError, s, "Plugin binary does not match sha256",
				"The binary %s of the plugin %q in server %q has SHA-256 %s, but the server block's sha256 is %s, and sha256 wins over the lock file. If you upgraded or rebuilt the plugin on purpose, set sha256 = %q or remove sha256; if not, find out who replaced the binary.",
				path, p.Name, s.Name, got, strings.ToLower(p.SHA256), got)
			continue
		}
		lock.Plugins = append(lock.Plugins, &LockedPlugin{Server: s.Name, Plugin: p.Name, Path: path, SHA256: got})
	}
	rep := r.done()
	if rep.HasErrors() {
		return nil, rep
	}
	return lock, rep
}

// server returns the server block named name, or nil.
func (c *Config) server(name string) *Server {
	for _, s := range c.Servers {
		if s != nil && s.Name == name {
			return s
		}
	}
	return nil
}
