package recur

import (
	"fmt"
	"strings"
	"sync"
	"time"
	// The zone database goes into the binary, so Delay-TZ works on hosts
	// without one.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"

	"github.com/natsdelay/natsdelay/delaystore"
)

// MinEvery is the shortest Delay-Every interval.
const MinEvery = 100 * time.Millisecond

// MaxCatchUp bounds the catch-up policy all: at most this many missed
// occurrences in a row are delivered one by one; past it, the schedule
// goes back on its plan as with policy one.
const MaxCatchUp = 1000

// parser reads 5 fields (minute first), 6 fields (second first), and the
// descriptors @yearly, @monthly, @weekly, @daily and @hourly. With an
// optional seconds field a 5-field spec means minutes, as in crontab.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// CronForm and EveryForm describe the accepted forms, for error messages.
const (
	CronForm  = "want 5 fields (minute hour day-of-month month day-of-week, such as */15 9-17 * * MON-FRI), 6 with seconds first (such as 30 0 * * * *), or one of @yearly @monthly @weekly @daily @hourly"
	EveryForm = "want a Go duration of at least 100ms, such as 90s, 1h30m or 7d"
)

// Spec is a parsed recurrence: a cron spec in a zone, or a fixed interval.
// It is a value, safe for concurrent use.
type Spec struct {
	// Cron is the spec as given, empty for an interval.
	Cron string
	// Every is the interval, zero for a cron spec.
	Every time.Duration
	// Loc is the zone of Cron; UTC when none was given.
	Loc *time.Location

	// wall matches the spec on wall-clock times written as UTC: a zone
	// without daylight saving, so the search never meets a gap or a fold.
	wall *cron.SpecSchedule
}

// ParseCron parses a Delay-Cron spec for the IANA zone tz (UTC when empty).
// Errors wrap ErrInvalid and say what is accepted. It is safe for
// concurrent use; specs it parsed are kept (see parsed).
func ParseCron(spec, tz string) (Spec, error) {
	key := tz + "\x00" + spec
	if s, ok := parsed.get(key); ok {
		return s, nil
	}
	s, err := parseCron(spec, tz)
	if err == nil {
		parsed.put(key, s)
	}
	return s, err
}

// parsed keeps the cron specs ParseCron parsed, by zone and spec. NB: the
// dispatcher reads the schedule from every occurrence it plans, and
// parsing a spec and loading its zone costs tens of microseconds
// (BenchmarkPlan_Next), paid again for every schedule due at the same
// minute; a kept Spec costs a map lookup. A Spec is never changed once
// parsed, so one may be shared.
var parsed = specCache{max: 4096}

// specCache is a map bounded by max entries: when full, it starts over,
// which costs one parse per spec in use, and keeps memory bounded however
// many distinct specs arrive.
type specCache struct {
	max int
	mu  sync.Mutex
	m   map[string]Spec
}

func (c *specCache) get(key string) (Spec, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.m[key]
	return s, ok
}

func (c *specCache) put(key string, s Spec) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= c.max {
		c.m = make(map[string]Spec)
	}
	c.m[key] = s
}

func (c *specCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

func parseCron(spec, tz string) (Spec, error) {
	loc := time.UTC
	if tz != "" {
		var err error
		if loc, err = time.LoadLocation(tz); err != nil || strings.EqualFold(tz, "local") {
			return Spec{}, fmt.Errorf("%w: zone %q: want an IANA zone name such as Europe/Berlin or America/New_York", ErrInvalid, tz)
		}
	}
	if strings.HasPrefix(spec, "@every") || strings.HasPrefix(strings.ToUpper(spec), "TZ=") || strings.HasPrefix(strings.ToUpper(spec), "CRON_TZ=") {
		return Spec{}, fmt.Errorf("%w: cron %q: %s (intervals go in Delay-Every, zones in Delay-TZ)", ErrInvalid, spec, CronForm)
	}
	s, err := parser.Parse(spec)
	if err != nil {
		return Spec{}, fmt.Errorf("%w: cron %q: %s", ErrInvalid, spec, CronForm)
	}
	ss, ok := s.(*cron.SpecSchedule)
	if !ok {
		return Spec{}, fmt.Errorf("%w: cron %q: %s", ErrInvalid, spec, CronForm)
	}
	wall := *ss
	wall.Location = time.UTC
	if wall.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return Spec{}, fmt.Errorf("%w: %w: cron %q matches no date (such as 30 February)", ErrInvalid, ErrNeverFires, spec)
	}
	return Spec{Cron: spec, Loc: loc, wall: &wall}, nil
}

// ParseEvery makes an interval Spec. Errors wrap ErrInvalid.
func ParseEvery(d time.Duration) (Spec, error) {
	if d < MinEvery {
		return Spec{}, fmt.Errorf("%w: every %v: %s", ErrInvalid, d, EveryForm)
	}
	return Spec{Every: d, Loc: time.UTC}, nil
}

// String is the spec as delivered in Delay-Schedule: the cron spec as
// given, or @every and the interval.
func (s Spec) String() string {
	if s.Cron == "" {
		return "@every " + s.Every.String()
	}
	return s.Cron
}

// After returns the first planned time strictly after t, for a schedule
// whose occurrence at prev is planned (prev matters for an interval only:
// the plan is prev + k*Every). It returns the zero time if the cron spec
// matches nothing within five years of t, or if that time would be after
// delaystore.MaxTime, the last that can be stored: a schedule ends there,
// as at a Delay-Until.
//
// A cron spec is matched on wall-clock time in Loc, and each matching wall
// time fires once: a wall time that does not exist (daylight saving starts)
// fires at the first instant after the gap, and one that exists twice
// (daylight saving ends) fires at its first instance only.
func (s Spec) After(prev, t time.Time) time.Time {
	if s.Cron == "" {
		return s.every(prev, t)
	}
	w := wallOf(t.In(s.Loc))
	// Bounded: repeated wall times (a fold) can map before t; a second
	// cron in an hour-long fold needs 3600 steps, so allow a day of them.
	for range 86400 + 2 {
		w = s.wall.Next(w)
		if w.IsZero() {
			return time.Time{}
		}
		if at := instant(w, s.Loc); at.After(t) {
			return storable(at)
		}
	}
	return time.Time{}
}

// every is After for an interval: prev plus the fewest whole intervals
// that pass t. The count is checked against the room left before
// MaxTime first, because k*Every overflows a Duration, and UnixNano
// wraps, long before a time.Time does.
func (s Spec) every(prev, t time.Time) time.Time {
	if t.Before(prev) {
		return storable(prev)
	}
	room := delaystore.MaxTime.Sub(prev)
	n := t.Sub(prev)/s.Every + 1
	if room < 0 || n > room/s.Every {
		return time.Time{}
	}
	return prev.Add(n * s.Every)
}

// storable is t, or the zero time (no next occurrence) when t is after
// delaystore.MaxTime.
func storable(t time.Time) time.Time {
	if t.After(delaystore.MaxTime) {
		return time.Time{}
	}
	return t
}

// wallOf is the wall-clock reading of t written as a UTC time.
func wallOf(t time.Time) time.Time {
	y, mo, d := t.Date()
	h, mi, sec := t.Clock()
	return time.Date(y, mo, d, h, mi, sec, t.Nanosecond(), time.UTC)
}

// instant is the first instant whose wall-clock reading in loc is w (given
// as UTC), or, when no instant has it (a gap), the first instant after the
// gap.
func instant(w time.Time, loc *time.Location) time.Time {
	// Every instant reading w is w minus one of the zone's offsets near it.
	guess := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), loc)
	var best time.Time
	for _, probe := range []time.Time{guess.Add(-26 * time.Hour), guess, guess.Add(26 * time.Hour)} {
		_, off := probe.Zone()
		c := w.Add(-time.Duration(off) * time.Second).In(loc)
		if wallOf(c).Equal(w) && (best.IsZero() || c.Before(best)) {
			best = c
		}
	}
	if !best.IsZero() {
		return best
	}
	// A gap: the offset after it is larger than the one before. w minus
	// the offset before lies after the transition, w minus the offset
	// after lies before it; the transition is the first instant with the
	// later offset. Transitions fall on whole seconds.
	_, offBefore := guess.Add(-26 * time.Hour).Zone()
	_, offAfter := guess.Add(26 * time.Hour).Zone()
	lo := w.Add(-time.Duration(offAfter) * time.Second).Unix()
	hi := w.Add(-time.Duration(offBefore) * time.Second).Unix()
	for lo+1 < hi {
		mid := lo + (hi-lo)/2
		if _, off := time.Unix(mid, 0).In(loc).Zone(); off == offBefore {
			lo = mid
		} else {
			hi = mid
		}
	}
	return time.Unix(hi, 0).In(loc)
}
