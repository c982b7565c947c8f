package config

// The plugin lock file, after Terraform's dependency lock file
// (.terraform.lock.hcl): `mcpvisor plugins lock` records the SHA-256 of every
// plugin binary the configuration runs in mcpvisor.lock.hcl beside the
// configuration file; Load reads it and hands each plugin block its entry,
// and the plugin launcher refuses a binary whose hash differs. The file is
// generated, but meant to be read in review and committed:
//
//	server "over-unix" {
//	  plugin "unix" {
//	    path   = "bin/mcpvisor-transport-unix"
//	    sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
//	  }
//	}
//
// Entries mirror the configuration's blocks and are sorted by server name,
// so that relocking an unchanged configuration rewrites the same bytes and
// a diff shows exactly which binaries changed. A path below the lock file's
// directory is written relative to it, so that a checkout elsewhere reads
// the same file.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
)

// LockFileName is the name of the plugin lock file, which lives in the
// same directory as the configuration file.
const LockFileName = "mcpvisor.lock.hcl"

// lockHeader opens every lock file mcpvisor writes.
const lockHeader = `# This file is maintained automatically by "mcpvisor plugins lock".
# It records the SHA-256 of each plugin binary the configuration beside it
# runs; mcpvisor refuses to start a plugin whose binary has another hash.
# Commit it together with the configuration. After a deliberate upgrade or
# rebuild of a plugin, run "mcpvisor plugins lock" again.
`

// LockPath is the lock file's path for the configuration file at
// configPath: LockFileName in the same directory.
func LockPath(configPath string) string {
	return filepath.Join(filepath.Dir(configPath), LockFileName)
}

// Lock is a plugin lock file.
type Lock struct {
	// Filename is where the lock file was read from or will be written.
	Filename string

	// Plugins has one entry per server block with a plugin block, sorted
	// by server name.
	Plugins []*LockedPlugin
}

// LockedPlugin is one entry of a lock file.
type LockedPlugin struct {
	// Server is the server block's name.
	Server string
	// Plugin is the plugin block's label.
	Plugin string
	// Path is the binary that was hashed, absolute. In the file it is
	// relative to the lock file's directory when it lies below it.
	Path string
	// SHA256 is the binary's hash: 64 lowercase hexadecimal digits.
	SHA256 string
	// DeclRange is where the entry's server block is in the lock file;
	// zero for an entry made in Go.
	DeclRange hcl.Range
}

// Entry returns the entry for the named server, or nil.
func (l *Lock) Entry(server string) *LockedPlugin {
	if l == nil {
		return nil
	}
	for _, e := range l.Plugins {
		if e.Server == server {
			return e
		}
	}
	return nil
}

// lockFileSchema is the top level of a lock file.
type lockFileSchema struct {
	Servers []*lockServerSchema `hcl:"server,block"`
}

type lockServerSchema struct {
	Name      string            `hcl:"name,label"`
	NameRange hcl.Range         `hcl:"name,label_range"`
	Plugin    *lockPluginSchema `hcl:"plugin,block"`
	DefRange  hcl.Range         `hcl:",def_range"`
}

type lockPluginSchema struct {
	Name   string         `hcl:"name,label"`
	Path   hcl.Expression `hcl:"path"`
	SHA256 hcl.Expression `hcl:"sha256"`
}

// LoadLock reads the lock file at path. Any error is a *DiagnosticsError;
// when the file cannot be read it wraps the I/O error, so that
// errors.Is(err, fs.ErrNotExist) tells a missing lock file apart.
func LoadLock(path string) (*Lock, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, &DiagnosticsError{Diags: hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Cannot read lock file",
			Detail:   fmt.Sprintf("mcpvisor could not read the plugin lock file %q: %s.", path, plainPathError(err)),
		}}, cause: err}
	}
	p := hclparse.NewParser()
	file, diags := p.ParseHCL(src, path)
	if !diags.HasErrors() {
		var raw lockFileSchema
		diags = append(diags, gohcl.DecodeBody(file.Body, nil, &raw)...)
		if !diags.HasErrors() {
			l, more := decodeLock(&raw, path)
			if diags = append(diags, more...); !diags.HasErrors() {
				return l, nil
			}
		}
	}
	// Every error about the lock file ends with the way out.
	for _, d := range diags {
		if d.Severity == hcl.DiagError && !strings.Contains(d.Detail, "plugins lock") {
			d.Detail = strings.TrimSpace(d.Detail + " " + lockFixHint)
		}
	}
	return nil, newDiagnosticsError(diags, p.Files())
}

// lockFixHint ends every diagnostic about a malformed lock file.
const lockFixHint = "The lock file is written by `mcpvisor plugins lock`; fix the line, or delete the file and run `mcpvisor plugins lock` to write it anew."

func decodeLock(raw *lockFileSchema, path string) (*Lock, hcl.Diagnostics) {
	var diags hcl.Diagnostics
	errorf := func(subject hcl.Range, summary, format string, args ...any) {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  summary,
			Detail:   fmt.Sprintf(format, args...),
			Subject:  subject.Ptr(),
		})
	}
	str := func(expr hcl.Expression, server, name string) (string, bool) {
		v, d := expr.Value(nil)
		if diags = append(diags, d...); d.HasErrors() {
			return "", false
		}
		switch {
		case v.IsNull():
			errorf(expr.Range(), "Invalid lock file entry", "The entry for server %q has no %s; each entry is server \"name\" { plugin \"label\" { path = \"…\" sha256 = \"…\" } }.", server, name)
			return "", false
		case v.Type() != cty.String:
			errorf(expr.Range(), "Invalid lock file entry", "%s of server %q must be a quoted string.", name, server)
			return "", false
		}
		return v.AsString(), true
	}

	dir := filepath.Dir(path)
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	l := &Lock{Filename: path}
	seen := map[string]hcl.Range{}
	for _, rs := range raw.Servers {
		if prev, dup := seen[rs.Name]; dup {
			errorf(rs.NameRange, "Duplicate lock file entry",
				"The lock file has two entries for server %q; the first is at line %d.", rs.Name, prev.Start.Line)
			continue
		}
		seen[rs.Name] = rs.DefRange
		if rs.Plugin == nil {
			errorf(rs.DefRange, "Invalid lock file entry",
				"The entry for server %q has no plugin block; each entry is server \"name\" { plugin \"label\" { path = \"…\" sha256 = \"…\" } }.", rs.Name)
			continue
		}
		e := &LockedPlugin{Server: rs.Name, Plugin: rs.Plugin.Name, DeclRange: rs.DefRange}
		if v, ok := str(rs.Plugin.Path, rs.Name, "path"); ok {
			if v == "" {
				errorf(rs.Plugin.Path.Range(), "Invalid lock file entry", "path of server %q is empty.", rs.Name)
			}
			v = filepath.FromSlash(v)
			if !filepath.IsAbs(v) {
				v = filepath.Join(dir, v)
			}
			e.Path = v
		}
		if v, ok := str(rs.Plugin.SHA256, rs.Name, "sha256"); ok {
			if !isHexSHA256(v) {
				errorf(rs.Plugin.SHA256.Range(), "Invalid lock file entry",
					"sha256 of server %q is %q; it must be 64 hexadecimal digits.", rs.Name, v)
			}
			e.SHA256 = strings.ToLower(v)
		}
		l.Plugins = append(l.Plugins, e)
	}
	slices.SortFunc(l.Plugins, func(a, b *LockedPlugin) int { return strings.Compare(a.Server, b.Server) })
	return l, diags
}

// Bytes renders the lock file: the header comment, then one entry per
// plugin, sorted by server name.
func (l *Lock) Bytes() []byte {
	entries := slices.Clone(l.Plugins)
	slices.SortFunc(entries, func(a, b *LockedPlugin) int { return strings.Compare(a.Server, b.Server) })
	f := hclwrite.NewEmptyFile()
	body := f.Body()
	dir := filepath.Dir(l.Filename)
	for _, e := range entries {
		body.AppendNewline()
		sb := body.AppendNewBlock("server", []string{e.Server}).Body()
		pb := sb.AppendNewBlock("plugin", []string{e.Plugin}).Body()
		pb.SetAttributeValue("path", cty.StringVal(lockFilePath(dir, e.Path)))
		pb.SetAttributeValue("sha256", cty.StringVal(e.SHA256))
	}
	return append([]byte(lockHeader), hclwrite.Format(f.Bytes())...)
}

// lockFilePath is how a binary's path is written in a lock file in dir:
// relative, with forward slashes, when it lies below dir; else absolute.
func lockFilePath(dir, path string) string {
	if absDir, err := filepath.Abs(dir); err == nil {
		if rel, err := filepath.Rel(absDir, path); err == nil && filepath.IsLocal(rel) {
			return filepath.ToSlash(rel)
		}
	}
	return path
}

// Write writes the lock file to l.Filename, replacing it atomically: a
// reader (a host reloading) sees the old file or the new one, never half.
func (l *Lock) Write() error {
	if l.Filename == "" {
		return errors.New("lock file: no file name")
	}
	dir := filepath.Dir(l.Filename)
	tmp, err := os.CreateTemp(dir, "."+LockFileName+".*")
	if err != nil {
		return fmt.Errorf("writing the lock file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(l.Bytes()); err != nil {
		tmp.Close()
		return fmt.Errorf("writing the lock file %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("writing the lock file %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing the lock file %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), l.Filename); err != nil {
		return fmt.Errorf("writing the lock file: %w", err)
	}
	return nil
}

// loadLockFor reads the lock file beside the configuration file at
// configPath and hands every plugin block of c its entry. A missing lock
// file is no error: every plugin is then unlocked.
func (c *Config) loadLockFor(configPath string) error {
	lockPath := LockPath(configPath)
	lock, err := LoadLock(lockPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		lock = nil
	case err != nil:
		return err
	}
	c.Lock = lock
	for _, s := range c.Servers {
		p := s.Plugin
		if p == nil {
			continue
		}
		p.Lock = &PluginLock{ConfigFile: configPath, File: lockPath}
		if e := lock.Entry(s.Name); e != nil && e.Plugin == p.Name {
			p.Lock.Path = e.Path
			p.Lock.SHA256 = e.SHA256
		}
	}
	return nil
}
