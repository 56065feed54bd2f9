package wire

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ErrDurationTooLong is returned by ParseDays for a duration written as
// the grammar wants but too large for a time.Duration.
var ErrDurationTooLong = errors.New("wire: duration too large")

// ParseDays is time.ParseDuration that also takes whole days first, as
// people write them: 7d, 1d12h, 30d. A day is 24 hours, whatever the
// calendar does.
func ParseDays(v string) (time.Duration, error) {
	i := strings.IndexByte(v, 'd')
	if i <= 0 || !isDigits(v[:i]) {
		d, err := time.ParseDuration(v)
		if err != nil && durationSyntax(v) {
			return 0, ErrDurationTooLong
		}
		return d, err
	}
	const day = 24 * time.Hour
	n, err := strconv.ParseInt(v[:i], 10, 64)
	if err != nil || n > math.MaxInt64/int64(day) {
		return 0, ErrDurationTooLong
	}
	d := time.Duration(n) * day
	rest := v[i+1:]
	if rest == "" {
		return d, nil
	}
	if rest[0] == '-' || rest[0] == '+' {
		return 0, fmt.Errorf("time: invalid duration %q", v)
	}
	r, err := time.ParseDuration(rest)
	if err != nil {
		if durationSyntax(rest) {
			return 0, ErrDurationTooLong
		}
		return 0, err
	}
	if r > math.MaxInt64-d {
		return 0, ErrDurationTooLong
	}
	return d + r, nil
}

// durationSyntax reports whether v is written as time.ParseDuration
// expects, [-+]?([0-9]*(\.[0-9]*)?unit)+ or 0, so that a value it still
// refuses is one too large for a time.Duration.
func durationSyntax(v string) bool {
	if v != "" && (v[0] == '-' || v[0] == '+') {
		v = v[1:]
	}
	if v == "" {
		return false
	}
	for v != "" {
		i := 0
		for i < len(v) && (v[i] >= '0' && v[i] <= '9' || v[i] == '.') {
			i++
		}
		if i == 0 || strings.Count(v[:i], ".") > 1 || v[:i] == "." {
			return false
		}
		v = v[i:]
		j := 0
		for j < len(v) && !(v[j] >= '0' && v[j] <= '9' || v[j] == '.') {
			j++
		}
		switch v[:j] {
		case "ns", "us", "\u00b5s", "\u03bcs", "ms", "s", "m", "h":
		default:
			return false
		}
		v = v[j:]
	}
	return true
}

// isDigits reports whether s is one or more ASCII digits.
func isDigits(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }
