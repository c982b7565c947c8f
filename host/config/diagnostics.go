package config

import (
	"cmp"
	"io"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// DiagnosticsError is the error Load, Parse and Validate return. It carries
// HCL diagnostics, each pointing at the file, line and block at fault, and
// the parsed files, so that the diagnostics can be printed with a snippet of
// the offending source, the way `terraform validate` prints them.
type DiagnosticsError struct {
	// Diags are the error diagnostics, ordered by position in the file.
	// Diagnostics from Validate on a Config built in Go have no Subject.
	Diags hcl.Diagnostics

	// Files are the parsed sources by file name, used to print snippets.
	// Nil when there is no source (Validate on a Config built in Go, or a
	// file that could not be read).
	Files map[string]*hcl.File

	// cause is the underlying error when the file could not be read.
	cause error
}

// Error returns the diagnostics as plain text: for each one the summary, the
// file and line with the enclosing block, a source snippet and the detail.
func (e *DiagnosticsError) Error() string {
	var b strings.Builder
	_ = e.WriteDiagnostics(&b, 0, false)
	s := strings.TrimRight(b.String(), "\n")
	if s == "" {
		return "invalid configuration"
	}
	return s
}

// WriteDiagnostics writes the diagnostics to w with HCL's diagnostic text
// writer. width wraps the detail text and truncates snippets (0: no limit);
// color adds VT100 escapes and suits only a terminal.
func (e *DiagnosticsError) WriteDiagnostics(w io.Writer, width uint, color bool) error {
	return hcl.NewDiagnosticTextWriter(w, e.Files, width, color).WriteDiagnostics(e.Diags)
}

// Unwrap returns the I/O error when the configuration file could not be
// read, so that errors.Is(err, fs.ErrNotExist) works; nil otherwise.
func (e *DiagnosticsError) Unwrap() error {
	return e.cause
}

// newDiagnosticsError keeps the error diagnostics of diags in source order.
// The order must be stable: hclsyntax reports unknown attributes in map
// order, and a user fixing errors top to bottom expects them sorted.
func newDiagnosticsError(diags hcl.Diagnostics, files map[string]*hcl.File) *DiagnosticsError {
	errs := make(hcl.Diagnostics, 0, len(diags))
	for _, d := range diags {
		if d.Severity == hcl.DiagError {
			errs = append(errs, d)
		}
	}
	sortDiagnostics(errs)
	return &DiagnosticsError{Diags: errs, Files: files}
}

// sortDiagnostics orders diagnostics by file and position; those without a
// position come first.
func sortDiagnostics(diags hcl.Diagnostics) {
	slices.SortStableFunc(diags, func(a, b *hcl.Diagnostic) int {
		switch {
		case a.Subject == nil && b.Subject == nil:
			return 0
		case a.Subject == nil:
			return -1
		case b.Subject == nil:
			return 1
		}
		return cmp.Or(
			cmp.Compare(a.Subject.Filename, b.Subject.Filename),
			cmp.Compare(a.Subject.Start.Byte, b.Subject.Start.Byte),
			cmp.Compare(a.Summary, b.Summary),
			cmp.Compare(a.Detail, b.Detail),
		)
	})
}
