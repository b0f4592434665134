// Package units parses and formats byte sizes and rates the way ferry's
// flags and output show them (binary units: KiB, MiB, GiB, TiB).
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

var suffixes = []struct {
	name string
	mult int64
}{
	{"tib", 1 << 40}, {"gib", 1 << 30}, {"mib", 1 << 20}, {"kib", 1 << 10},
	{"tb", 1e12}, {"gb", 1e9}, {"mb", 1e6}, {"kb", 1e3},
	{"t", 1 << 40}, {"g", 1 << 30}, {"m", 1 << 20}, {"k", 1 << 10},
	{"b", 1},
}

// ParseBytes parses sizes such as "64MiB", "1.5GiB", "5242880" or "64M"
// (single letters are binary units).
func ParseBytes(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, suf := range suffixes {
		if strings.HasSuffix(t, suf.name) {
			t = strings.TrimSpace(strings.TrimSuffix(t, suf.name))
			mult = suf.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("%q is not a size (use e.g. 64MiB, 1GiB, 5242880)", s)
	}
	n := v * float64(mult)
	if n > math.MaxInt64/2 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(n), nil
}

// ParseRate parses a rate such as "800MiB/s" into bytes per second.
func ParseRate(s string) (int64, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimSuffix(strings.TrimSuffix(t, "/s"), "ps")
	n, err := ParseBytes(t)
	if err != nil {
		return 0, fmt.Errorf("%q is not a rate (use e.g. 800MiB/s)", s)
	}
	return n, nil
}

// FormatBytes formats n with a binary unit, e.g. "1.5 GiB".
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// FormatRate formats bytes over a duration as a rate, e.g. "210.3 MiB/s".
func FormatRate(n int64, d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return FormatBytes(int64(float64(n)/d.Seconds())) + "/s"
}
