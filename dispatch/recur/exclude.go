package recur

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// MaxExclude bounds the dates and ranges of one Delay-Exclude.
const MaxExclude = 100

// ExcludeForm describes the accepted form of Delay-Exclude, for errors.
const ExcludeForm = "want dates such as 2026-12-25, or ranges such as 2027-02-01..2027-02-07, separated by commas"

// Exclusions are the dates on which a schedule plans no occurrence, as
// sorted ranges of whole days that neither overlap nor touch. A day is
// counted from 1970-01-01 and read on the wall clock of the schedule's
// zone, so a date is excluded from its local midnight to the next, however
// long daylight saving makes that day.
type Exclusions []dayRange

// dayRange is the days from through to, both included.
type dayRange struct{ from, to int64 }

// ParseExclude reads a Delay-Exclude value: dates (2026-12-25) and
// ranges (2027-02-01..2027-02-07), separated by commas, at most
// MaxExclude of them. Errors wrap ErrInvalid and say what is accepted.
func ParseExclude(v string) (Exclusions, error) {
	parts := strings.Split(v, ",")
	if len(parts) > MaxExclude {
		return nil, fmt.Errorf("%w: %d dates and ranges: the limit is %d", ErrInvalid, len(parts), MaxExclude)
	}
	var ex Exclusions
	for _, p := range parts {
		p = strings.TrimSpace(p)
		lo, hi, isRange := strings.Cut(p, "..")
		from, err := parseDay(lo)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %s", ErrInvalid, p, ExcludeForm)
		}
		to := from
		if isRange {
			if to, err = parseDay(hi); err != nil {
				return nil, fmt.Errorf("%w: %q: %s", ErrInvalid, p, ExcludeForm)
			}
			if to < from {
				return nil, fmt.Errorf("%w: %q: the range ends before it starts: want the earlier date first", ErrInvalid, p)
			}
		}
		ex = append(ex, dayRange{from, to})
	}
	slices.SortFunc(ex, func(a, b dayRange) int { return cmp.Compare(a.from, b.from) })
	merged := ex[:1]
	for _, r := range ex[1:] {
		last := &merged[len(merged)-1]
		if r.from <= last.to+1 {
			last.to = max(last.to, r.to)
			continue
		}
		merged = append(merged, r)
	}
	return merged, nil
}

// parseDay reads a date such as 2026-12-25, from 1970 to 2261: the years
// in which a time can be stored.
func parseDay(s string) (int64, error) {
	t, err := time.Parse(time.DateOnly, strings.TrimSpace(s))
	if err != nil {
		return 0, err
	}
	if t.Year() < 1970 || t.Year() > 2261 {
		return 0, fmt.Errorf("year %d: want 1970 to 2261", t.Year())
	}
	return t.Unix() / 86400, nil
}

// String is the exclusions as stored and shown: sorted, merged, each a
// date or a range, separated by commas.
func (ex Exclusions) String() string {
	var b strings.Builder
	for i, r := range ex {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(dayString(r.from))
		if r.to != r.from {
			b.WriteString("..")
			b.WriteString(dayString(r.to))
		}
	}
	return b.String()
}

func dayString(d int64) string { return time.Unix(d*86400, 0).UTC().Format(time.DateOnly) }

// covering returns the last day of the range that holds the date of t on
// the wall clock of loc, and whether one does.
func (ex Exclusions) covering(t time.Time, loc *time.Location) (int64, bool) {
	y, m, d := t.In(loc).Date()
	day := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400
	i, _ := slices.BinarySearchFunc(ex, day, func(r dayRange, day int64) int {
		switch {
		case r.to < day:
			return -1
		case r.from > day:
			return 1
		}
		return 0
	})
	if i < len(ex) && ex[i].from <= day && day <= ex[i].to {
		return ex[i].to, true
	}
	return 0, false
}

// dayStart is the first instant of day on the wall clock of loc: its
// local midnight, or the first instant after the gap when daylight
// saving skips midnight.
func dayStart(day int64, loc *time.Location) time.Time {
	return instant(time.Unix(day*86400, 0).UTC(), loc)
}
