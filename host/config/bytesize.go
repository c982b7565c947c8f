package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// byteUnits are the units a size may be written in: binary (KiB, MiB,
// GiB) and decimal (kB, MB, GB) multiples, and B.
var byteUnits = []struct {
	suffix string
	factor int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"kB", 1000}, {"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000},
	{"B", 1},
}

// parseByteSize reads a size such as "64MiB", "512kB" or "1048576" (bytes).
func parseByteSize(s string) (int64, error) {
	num, factor := strings.TrimSpace(s), int64(1)
	for _, u := range byteUnits {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, factor = strings.TrimSpace(n), u.factor
			break
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("not a size")
	}
	if v > math.MaxInt64/factor {
		return 0, fmt.Errorf("too large")
	}
	return v * factor, nil
}

// byteSize evaluates a size attribute: a whole number of bytes, or a
// string with a unit ("64MiB").
func (d *decoder) byteSize(expr hcl.Expression, name, where string) (int64, bool) {
	v, ok := d.eval(expr, name, cty.DynamicPseudoType)
	if !ok {
		return 0, false
	}
	if v.Type() == cty.Number {
		n, ok := d.integer(expr, name)
		return int64(n), ok
	}
	s, ok := d.str(expr, name)
	if !ok {
		return 0, false
	}
	n, err := parseByteSize(s)
	if err != nil {
		d.diags = append(d.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid size",
			Detail: fmt.Sprintf("%s in %s is %q, which is not a size. Write a whole number with a unit (B, KiB, MiB, GiB, kB, MB, GB), such as \"64MiB\", or a number of bytes.",
				name, where, s),
			Subject: expr.Range().Ptr(),
		})
		return 0, false
	}
	return n, true
}
