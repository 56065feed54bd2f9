package fleet

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/natsdelay/natsdelay/keys"
)

// DefaultPartitions is the number of partitions of a fleet created without
// Config.Partitions.
const DefaultPartitions = 256

// MaxPartitions bounds the partitions of a fleet: the map is an array of
// that many entries on every node, and a record lists ranges of them.
const MaxPartitions = 65536

// Partition is the partition of subject in a fleet of n partitions.
func Partition(subject string, n int) int {
	return int(keys.TopicHash(subject) % uint64(n))
}

// TagPartition is the partition of the message whose delivery tag is tag:
// the tag's first 16 hex digits are its subject's hash.
func TagPartition(tag string, n int) (int, error) {
	if len(tag) != keys.TagLen {
		return 0, fmt.Errorf("tag %q: want %d hex digits", keys.Clip(tag), keys.TagLen)
	}
	var h [8]byte
	if _, err := hex.Decode(h[:], []byte(tag[:16])); err != nil {
		return 0, fmt.Errorf("tag %q: not hex", keys.Clip(tag))
	}
	var v uint64
	for _, b := range h {
		v = v<<8 | uint64(b)
	}
	return int(v % uint64(n)), nil
}

// Range is the partitions From to To, both included.
type Range struct {
	From int `json:"from"`
	To   int `json:"to"`
}

func (r Range) String() string {
	if r.From == r.To {
		return strconv.Itoa(r.From)
	}
	return fmt.Sprintf("%d-%d", r.From, r.To)
}

// FormatRanges writes rs as 0-84,170-255; "none" when empty.
func FormatRanges(rs []Range) string {
	if len(rs) == 0 {
		return "none"
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}

// Count is the number of partitions in rs.
func Count(rs []Range) int {
	n := 0
	for _, r := range rs {
		n += r.To - r.From + 1
	}
	return n
}

// Contains reports whether partition p is in rs.
func Contains(rs []Range, p int) bool {
	for _, r := range rs {
		if p >= r.From && p <= r.To {
			return true
		}
	}
	return false
}

// Split divides n partitions over cells in contiguous ranges of sizes
// that differ by at most one, in the order cells are given: what each
// founding cell of a fleet owns.
func Split(cells []string, n int) map[string][]Range {
	out := make(map[string][]Range, len(cells))
	from := 0
	for i, c := range cells {
		size := n / len(cells)
		if i < n%len(cells) {
			size++
		}
		if size > 0 {
			out[c] = []Range{{From: from, To: from + size - 1}}
		}
		from += size
	}
	return out
}

// set returns the partitions of rs, of a fleet of n, as a set.
func set(rs []Range, n int) []bool {
	s := make([]bool, n)
	for _, r := range rs {
		for p := max(r.From, 0); p <= min(r.To, n-1); p++ {
			s[p] = true
		}
	}
	return s
}

// ranges returns the partitions of the set s as ranges, in order.
func ranges(s []bool) []Range {
	var out []Range
	for p, in := range s {
		switch {
		case !in:
		case len(out) > 0 && out[len(out)-1].To == p-1:
			out[len(out)-1].To = p
		default:
			out = append(out, Range{From: p, To: p})
		}
	}
	return out
}

// Union is the partitions in a or b, as ranges in order, of a fleet of n.
func Union(a, b []Range, n int) []Range {
	s := set(a, n)
	for _, r := range b {
		for p := max(r.From, 0); p <= min(r.To, n-1); p++ {
			s[p] = true
		}
	}
	return ranges(s)
}

// Subtract is the partitions in a and not in b, as ranges in order, of a
// fleet of n.
func Subtract(a, b []Range, n int) []Range {
	s := set(a, n)
	for _, r := range b {
		for p := max(r.From, 0); p <= min(r.To, n-1); p++ {
			s[p] = false
		}
	}
	return ranges(s)
}

// ParseRanges reads partitions written as FormatRanges writes them, such
// as 0-84,170 (in any order, overlapping or not), of a fleet of n.
func ParseRanges(s string, n int) ([]Range, error) {
	var rs []Range
	for _, part := range strings.Split(s, ",") {
		from, to, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(from)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(to)
		}
		if err != nil || a < 0 || b < a || b >= n {
			return nil, fmt.Errorf("partitions %q: want numbers or ranges such as 3 or 10-20, from 0 to %d", part, n-1)
		}
		rs = append(rs, Range{From: a, To: b})
	}
	return ranges(set(rs, n)), nil
}
