package config

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// sizeUnits are the units a size attribute may be written in. Only binary
// units: "16MB" would leave the reader guessing between 16,000,000 and
// 16,777,216 bytes.
var sizeUnits = []struct {
	suffix string
	bytes  int64
}{
	{"GiB", 1 << 30},
	{"MiB", 1 << 20},
	{"KiB", 1 << 10},
	{"B", 1},
}

// ParseSize parses a byte size written as a whole number with an optional
// binary unit: "16MiB", "512 KiB", "1GiB", "1048576", "100B". Units are
// case-insensitive.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if len(t) > len(u.suffix) && strings.EqualFold(t[len(t)-len(u.suffix):], u.suffix) {
			t, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.bytes
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size: write a whole number of bytes, or one with a unit (B, KiB, MiB, GiB), such as \"16MiB\"", s)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * mult, nil
}

// FormatSize writes n bytes the way a size attribute is written: in the
// largest binary unit that divides it, such as "16MiB".
func FormatSize(n int64) string {
	for _, u := range sizeUnits {
		if n != 0 && n%u.bytes == 0 && u.bytes > 1 {
			return strconv.FormatInt(n/u.bytes, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// size evaluates a size attribute: a number of bytes, or a string with a
// unit (ParseSize).
func (d *decoder) size(expr hcl.Expression, name, where string) (int64, bool) {
	v, ok := d.eval(expr, name, cty.DynamicPseudoType)
	if !ok {
		return 0, false
	}
	bad := func(detail string) (int64, bool) {
		d.diags = append(d.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid size",
			Detail:   fmt.Sprintf("%s in %s %s.", name, where, detail),
			Subject:  expr.Range().Ptr(),
		})
		return 0, false
	}
	switch v.Type() {
	case cty.Number:
		bf := v.AsBigFloat()
		i, acc := bf.Int64()
		if !bf.IsInt() || acc != big.Exact {
			return bad(fmt.Sprintf("is %s, which is not a whole number of bytes; write a whole number, or a string with a unit such as \"16MiB\"", bf.Text('g', 10)))
		}
		return i, true
	case cty.String:
		n, err := ParseSize(v.AsString())
		if err != nil {
			return bad(fmt.Sprintf("is %q, which is not a size: write a whole number of bytes, or one with a unit (B, KiB, MiB, GiB), such as \"16MiB\"", v.AsString()))
		}
		return n, true
	}
	return bad(fmt.Sprintf("is a %s; write a number of bytes, or a string with a unit such as \"16MiB\"", v.Type().FriendlyName()))
}
