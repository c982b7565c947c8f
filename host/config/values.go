package config

// Evaluating one attribute into a Go value: the typed decoders the blocks
// of load.go share, and the errors they report.

import (
	"errors"
	"fmt"
	"math/big"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	ctyjson "github.com/zclconf/go-cty/cty/json"
)

// resolve makes a relative path relative to the configuration's directory.
func (d *decoder) resolve(path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(d.baseDir, path)
}

// resolveAll resolves every path of a list (resolve).
func (d *decoder) resolveAll(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		if p != "" { // left empty for validate to refuse
			out[i] = d.resolve(p)
		}
	}
	return out
}

func (d *decoder) errorf(subject *hcl.Range, summary, detail string) {
	d.diags = append(d.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   detail,
		Subject:  subject,
	})
}

// eval evaluates an attribute and converts it to ty. ok is false when the
// attribute is unset (absent or null) or when it failed, in which case the
// failure has been recorded.
func (d *decoder) eval(expr hcl.Expression, name string, ty cty.Type) (cty.Value, bool) {
	if expr == nil {
		return cty.NilVal, false
	}
	v, diags := expr.Value(d.ctx)
	d.diags = append(d.diags, diags...)
	if diags.HasErrors() || v.IsNull() || !v.IsWhollyKnown() || v.ContainsMarked() {
		return cty.NilVal, false
	}
	cv, err := convert.Convert(v, ty)
	if err != nil {
		d.typeError(expr, name, err)
		return cty.NilVal, false
	}
	// Null elements survive conversion ("args = [null]") but have no Go
	// string to become.
	if ty.IsCollectionType() {
		for it := cv.ElementIterator(); it.Next(); {
			k, ev := it.Element()
			if ev.IsNull() {
				d.typeError(expr, name, cty.Path{cty.IndexStep{Key: k}}.NewErrorf("element must not be null"))
				return cty.NilVal, false
			}
		}
	}
	return cv, true
}

func (d *decoder) typeError(expr hcl.Expression, name string, err error) {
	msg := err.Error()
	var pe cty.PathError
	if errors.As(err, &pe) && len(pe.Path) > 0 {
		msg = formatPath(pe.Path) + ": " + msg
	}
	d.diags = append(d.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Incorrect attribute value type",
		Detail:   fmt.Sprintf("Inappropriate value for attribute %q: %s.", name, msg),
		Subject:  expr.Range().Ptr(),
	})
}

// formatPath renders a cty path the way it is written in HCL: [0]["key"].
func formatPath(path cty.Path) string {
	var b strings.Builder
	b.WriteString("element ")
	for _, step := range path {
		switch s := step.(type) {
		case cty.IndexStep:
			switch {
			case s.Key.Type() == cty.String:
				fmt.Fprintf(&b, "[%q]", s.Key.AsString())
			case s.Key.Type() == cty.Number:
				fmt.Fprintf(&b, "[%s]", s.Key.AsBigFloat().Text('f', -1))
			default:
				b.WriteString("[…]")
			}
		case cty.GetAttrStep:
			fmt.Fprintf(&b, ".%s", s.Name)
		}
	}
	return b.String()
}

func (d *decoder) str(expr hcl.Expression, name string) (string, bool) {
	v, ok := d.eval(expr, name, cty.String)
	if !ok {
		return "", false
	}
	return v.AsString(), true
}

func (d *decoder) strList(expr hcl.Expression, name string) ([]string, bool) {
	v, ok := d.eval(expr, name, cty.List(cty.String))
	if !ok {
		return nil, false
	}
	out := make([]string, 0, v.LengthInt())
	for it := v.ElementIterator(); it.Next(); {
		_, ev := it.Element()
		out = append(out, ev.AsString())
	}
	return out, true
}

func (d *decoder) intList(expr hcl.Expression, name string) ([]int, bool) {
	v, ok := d.eval(expr, name, cty.List(cty.Number))
	if !ok {
		return nil, false
	}
	out := make([]int, 0, v.LengthInt())
	for it := v.ElementIterator(); it.Next(); {
		_, ev := it.Element()
		bf := ev.AsBigFloat()
		i, acc := bf.Int64()
		if !bf.IsInt() || acc != big.Exact || int64(int(i)) != i {
			d.diags = append(d.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Incorrect attribute value type",
				Detail:   fmt.Sprintf("Inappropriate value for attribute %q: a list of whole numbers is required, and %s is not one.", name, bf.Text('g', 10)),
				Subject:  expr.Range().Ptr(),
			})
			return nil, false
		}
		out = append(out, int(i))
	}
	return out, true
}

func (d *decoder) strMap(expr hcl.Expression, name string) (map[string]string, bool) {
	v, ok := d.eval(expr, name, cty.Map(cty.String))
	if !ok {
		return nil, false
	}
	out := make(map[string]string, v.LengthInt())
	for it := v.ElementIterator(); it.Next(); {
		k, ev := it.Element()
		out[k.AsString()] = ev.AsString()
	}
	return out, true
}

func (d *decoder) boolean(expr hcl.Expression, name string) (bool, bool) {
	v, ok := d.eval(expr, name, cty.Bool)
	if !ok {
		return false, false
	}
	return v.True(), true
}

func (d *decoder) integer(expr hcl.Expression, name string) (int, bool) {
	v, ok := d.eval(expr, name, cty.Number)
	if !ok {
		return 0, false
	}
	bf := v.AsBigFloat()
	i, acc := bf.Int64()
	if !bf.IsInt() || acc != big.Exact || int64(int(i)) != i {
		d.diags = append(d.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Incorrect attribute value type",
			Detail:   fmt.Sprintf("Inappropriate value for attribute %q: a whole number is required, not %s.", name, bf.Text('g', 10)),
			Subject:  expr.Range().Ptr(),
		})
		return 0, false
	}
	return int(i), true
}

func (d *decoder) duration(expr hcl.Expression, name, where string) (time.Duration, bool) {
	s, ok := d.str(expr, name)
	if !ok {
		return 0, false
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		d.diags = append(d.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid duration",
			Detail: fmt.Sprintf("%s in %s is %q, which is not a duration. Write a number with a unit (ns, us, ms, s, m, h), such as \"30s\", \"5m\" or \"1h30m\".",
				name, where, s),
			Subject: expr.Range().Ptr(),
		})
		return 0, false
	}
	return v, true
}

// jsonObject evaluates an object (or map) attribute and encodes it as JSON.
func (d *decoder) jsonObject(expr hcl.Expression, name string) ([]byte, bool) {
	v, ok := d.eval(expr, name, cty.DynamicPseudoType)
	if !ok {
		return nil, false
	}
	if ty := v.Type(); !ty.IsObjectType() && !ty.IsMapType() {
		d.diags = append(d.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Incorrect attribute value type",
			Detail:   fmt.Sprintf("Inappropriate value for attribute %q: an object is required, such as { socket = \"/run/x.sock\" }, not %s.", name, ty.FriendlyName()),
			Subject:  expr.Range().Ptr(),
		})
		return nil, false
	}
	data, err := ctyjson.Marshal(v, v.Type())
	if err != nil {
		d.typeError(expr, name, err)
		return nil, false
	}
	return data, true
}

// exprIsNull reports whether an optional attribute was left out (gohcl
// gives an absent one an expression that evaluates to null).
func exprIsNull(expr hcl.Expression) bool {
	if expr == nil {
		return true
	}
	v, diags := expr.Value(nil)
	return !diags.HasErrors() && v.IsNull()
}
