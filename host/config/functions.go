package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"

	"github.com/mcpvisor/mcpvisor/host/internal/secrets"
	"github.com/mcpvisor/mcpvisor/host/internal/statedir"
)

// maxFileSize bounds what file() reads. Secrets and certificates are small;
// the bound keeps a mistyped path such as a log file, or a device such as
// /dev/zero, from exhausting memory while the configuration loads.
const maxFileSize = 1 << 20

// evalContext is the scope every expression in a configuration file is
// evaluated in: no variables, and the functions env, file and trimspace.
// baseDir is where file() resolves relative paths; secrets is what env()
// falls back to (nil: nothing).
func evalContext(baseDir string, secrets SecretLookup) *hcl.EvalContext {
	return &hcl.EvalContext{
		Functions: map[string]function.Function{
			"env":       envFunc(secrets),
			"file":      fileFunc(baseDir),
			"trimspace": trimspaceFunc(),
		},
	}
}

// SecretLookup finds the value stored under name in the user's secret
// store (`mcpvisor secret set`), and whether there is one.
type SecretLookup func(name string) (value string, ok bool, err error)

// userSecrets is the user's secret store (host/internal/secrets), or nil
// when the user has no state directory.
func userSecrets() SecretLookup {
	dir, err := statedir.Dir()
	if err != nil {
		return nil
	}
	return secrets.Open(dir).Lookup
}

// envFunc is env("NAME") or env("NAME", "default"): the variable of
// mcpvisor's environment, else the secret stored under NAME (`mcpvisor
// secret set NAME`; docs/config.md, "Secrets"), else the default. A
// variable that is set to the empty string counts as set. A missing
// variable without a default is an error rather than "": an empty API
// key would otherwise surface much later as an opaque 401 from the
// upstream.
func envFunc(stored SecretLookup) function.Function {
	return function.New(&function.Spec{
		Description: "Returns the value of an environment variable of the mcpvisor process, or the default when it is not set.",
		Params: []function.Parameter{
			{Name: "name", Type: cty.String},
		},
		VarParam: &function.Parameter{Name: "default", Type: cty.String},
		Type:     function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			if len(args) > 2 {
				return cty.UnknownVal(cty.String), function.NewArgErrorf(2, "env takes a variable name and at most one default value")
			}
			name := args[0].AsString()
			if name == "" {
				return cty.UnknownVal(cty.String), function.NewArgErrorf(0, "the environment variable name must not be empty")
			}
			if v, ok := os.LookupEnv(name); ok {
				return cty.StringVal(v), nil
			}
			if stored != nil {
				v, ok, err := stored(name)
				if err != nil {
					return cty.UnknownVal(cty.String), function.NewArgErrorf(0, "environment variable %q is not set, and the secret store could not be read: %s", name, err)
				}
				if ok {
					return cty.StringVal(v), nil
				}
			}
			if len(args) == 2 {
				return args[1], nil
			}
			return cty.UnknownVal(cty.String), function.NewArgError(0, &unsetEnvError{name: name})
		},
	})
}

// unsetEnvError is env()'s error for a variable that is not set and has no
// default. LoadForRun tells it from every other error to hold only the
// server that needs it.
type unsetEnvError struct{ name string }

func (e *unsetEnvError) Error() string {
	return fmt.Sprintf("environment variable %q is not set; store it with `mcpvisor secret set %s`, set it in mcpvisor's environment, or write env(%q, \"default\") to supply a default", e.name, e.name, e.name)
}

// unsetEnvName returns the variable an env() diagnostic says is unset, or
// "" when diag is about anything else.
func unsetEnvName(diag *hcl.Diagnostic) string {
	extra, ok := diag.Extra.(hclsyntax.FunctionCallDiagExtra)
	if !ok || extra.CalledFunctionName() != "env" {
		return ""
	}
	// cty's function.ArgError hides the error it wraps (no Unwrap), so the
	// message is matched instead: exactly the one unsetEnvError makes for
	// the name it carries.
	msg := extra.FunctionCallError().Error()
	var name string
	if _, err := fmt.Sscanf(msg, "environment variable %q is not set", &name); err != nil {
		return ""
	}
	if msg != (&unsetEnvError{name: name}).Error() {
		return ""
	}
	return name
}

// fileFunc is file("path"): the contents of a UTF-8 text file, unchanged
// (wrap it in trimspace() to drop a trailing newline). A relative path is
// resolved against baseDir, the configuration file's directory, so the
// result does not depend on where mcpvisor was started.
func fileFunc(baseDir string) function.Function {
	return function.New(&function.Spec{
		Description: "Returns the contents of a text file; a relative path is resolved against the configuration file's directory.",
		Params: []function.Parameter{
			{Name: "path", Type: cty.String},
		},
		Type: function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			given := args[0].AsString()
			if given == "" {
				return cty.UnknownVal(cty.String), function.NewArgErrorf(0, "the path must not be empty")
			}
			resolved := given
			if !filepath.IsAbs(resolved) {
				resolved = filepath.Join(baseDir, resolved)
			}
			describe := fmt.Sprintf("%q", given)
			if resolved != given {
				describe = fmt.Sprintf("%q (resolved to %q)", given, resolved)
			}
			data, err := readSmallFile(resolved)
			if err != nil {
				return cty.UnknownVal(cty.String), function.NewArgErrorf(0, "cannot read file %s: %s", describe, err)
			}
			if !utf8.Valid(data) {
				return cty.UnknownVal(cty.String), function.NewArgErrorf(0, "file %s is not UTF-8 text", describe)
			}
			return cty.StringVal(string(data)), nil
		},
	})
}

// readSmallFile reads a regular file of at most maxFileSize bytes. It checks
// the file type before opening because opening a FIFO blocks.
func readSmallFile(path string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, plainPathError(err)
	}
	if info.IsDir() {
		return nil, errors.New("it is a directory")
	}
	if !info.Mode().IsRegular() {
		return nil, errors.New("it is not a regular file")
	}
	if info.Size() > maxFileSize {
		return nil, fmt.Errorf("it is larger than %d bytes", maxFileSize)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, plainPathError(err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, plainPathError(err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("it is larger than %d bytes", maxFileSize)
	}
	return data, nil
}

// plainPathError drops the "open <path>:" prefix of a *fs.PathError; the
// caller's message already names the path, once.
func plainPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// trimspaceFunc is trimspace(s): s without leading and trailing white space.
// It exists for file(): a token file almost always ends in a newline, which
// must not end up inside an Authorization header.
func trimspaceFunc() function.Function {
	return function.New(&function.Spec{
		Description: "Removes leading and trailing white space.",
		Params: []function.Parameter{
			{Name: "str", Type: cty.String},
		},
		Type: function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			return cty.StringVal(strings.TrimSpace(args[0].AsString())), nil
		},
	})
}
