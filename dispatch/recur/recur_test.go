package recur

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
)

func mustCron(t *testing.T, spec, tz string) Spec {
	t.Helper()
	s, err := ParseCron(spec, tz)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSpec_After_SpringForward checks the DST rule for a wall time that
// does not exist: it fires at the first instant after the gap, once.
func TestSpec_After_SpringForward(t *testing.T) {
	tests := []struct {
		name, zone, spec string
		from             string // RFC 3339
		want             []string
	}{
		{"berlin daily 02:30", "Europe/Berlin", "30 2 * * *", "2026-03-28T12:00:00+01:00",
			[]string{"2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"}},
		{"new york daily 02:30", "America/New_York", "30 2 * * *", "2026-03-07T12:00:00-05:00",
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"}},
		{"berlin every 30 minutes", "Europe/Berlin", "*/30 * * * *", "2026-03-29T01:40:00+01:00",
			[]string{"2026-03-29T03:00:00+02:00", "2026-03-29T03:30:00+02:00"}},
		{"new york seconds in the gap", "America/New_York", "15 59 2 * * *", "2026-03-08T01:59:00-05:00",
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:59:15-04:00"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustCron(t, tt.spec, tt.zone)
			at, _ := time.Parse(time.RFC3339, tt.from)
			for _, w := range tt.want {
				at = s.After(at, at)
				want, _ := time.Parse(time.RFC3339, w)
				if !at.Equal(want) {
					t.Fatalf("got %v, want %v", at, want)
				}
			}
		})
	}
}

// TestSpec_After_FallBack checks the DST rule for a wall time that exists
// twice: it fires once, at its first instance.
func TestSpec_After_FallBack(t *testing.T) {
	tests := []struct {
		name, zone, spec string
		from             string
		want             []string
	}{
		{"berlin daily 02:30", "Europe/Berlin", "30 2 * * *", "2026-10-24T12:00:00+02:00",
			[]string{"2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"}},
		{"new york daily 01:30", "America/New_York", "30 1 * * *", "2026-10-31T12:00:00-04:00",
			[]string{"2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"}},
		{"new york every 20 minutes", "America/New_York", "*/20 * * * *", "2026-11-01T01:30:00-04:00",
			[]string{"2026-11-01T01:40:00-04:00", "2026-11-01T02:00:00-05:00", "2026-11-01T02:20:00-05:00"}},
		{"berlin hourly", "Europe/Berlin", "@hourly", "2026-10-25T01:30:00+02:00",
			[]string{"2026-10-25T02:00:00+02:00", "2026-10-25T03:00:00+01:00"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustCron(t, tt.spec, tt.zone)
			at, _ := time.Parse(time.RFC3339, tt.from)
			for _, w := range tt.want {
				at = s.After(at, at)
				want, _ := time.Parse(time.RFC3339, w)
				if !at.Equal(want) {
					t.Fatalf("got %v, want %v", at, want)
				}
			}
		})
	}
	// Starting inside the second instance of the fold skips to after it.
	s := mustCron(t, "*/20 * * * *", "America/New_York")
	from, _ := time.Parse(time.RFC3339, "2026-11-01T01:10:00-05:00")
	want, _ := time.Parse(time.RFC3339, "2026-11-01T02:00:00-05:00")
	if got := s.After(from, from); !got.Equal(want) {
		t.Fatalf("from the second 01:10: got %v, want %v", got, want)
	}
}

func TestParseCron_Forms(t *testing.T) {
	utc := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	tests := []struct{ spec, want string }{
		{"*/5 * * * *", "2026-12-03T10:05:00Z"},
		{"30 * * * * *", "2026-12-03T10:00:30Z"},
		{"@hourly", "2026-12-03T11:00:00Z"},
		{"@daily", "2026-12-04T00:00:00Z"},
		{"@weekly", "2026-12-06T00:00:00Z"},
		{"@monthly", "2027-01-01T00:00:00Z"},
		{"@yearly", "2027-01-01T00:00:00Z"},
		{"0 9 * * MON-FRI", "2026-12-04T09:00:00Z"},
	}
	for _, tt := range tests {
		s := mustCron(t, tt.spec, "")
		if got := s.After(utc, utc).UTC().Format(time.RFC3339); got != tt.want {
			t.Errorf("%q: got %s, want %s", tt.spec, got, tt.want)
		}
	}
	for _, bad := range []struct{ spec, tz string }{
		{"* * *", ""}, {"61 * * * *", ""}, {"* * * * * * *", ""}, {"@every 5m", ""}, {"@reboot", ""},
		{"0 0 30 2 *", ""}, {"CRON_TZ=UTC * * * * *", ""}, {"* * * * *", "Mars/Olympus"}, {"* * * * *", "Local"},
	} {
		if _, err := ParseCron(bad.spec, bad.tz); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseCron(%q, %q) = %v, want ErrInvalid", bad.spec, bad.tz, err)
		}
	}
	// A date that never comes is a spec well formed: the error says so
	// rather than how to write one.
	if _, err := ParseCron("0 0 30 2 *", ""); !errors.Is(err, ErrNeverFires) || strings.Contains(err.Error(), "want 5 fields") {
		t.Errorf("ParseCron(0 0 30 2 *) = %v, want ErrNeverFires without the forms", err)
	}
	if _, err := ParseEvery(99 * time.Millisecond); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseEvery(99ms) = %v, want ErrInvalid", err)
	}
}

// TestPlan_Next_CatchUp checks the three catch-up policies after an
// outage: the occurrence at 10:00 goes out at 10:05:30, every minute.
func TestPlan_Next_CatchUp(t *testing.T) {
	s, _ := ParseEvery(time.Minute)
	occ := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	now := occ.Add(5*time.Minute + 30*time.Second)
	future := occ.Add(6 * time.Minute)

	one := Plan{Spec: s, CatchUp: One}
	if one.Skip(occ, now) {
		t.Fatal("one skipped the late occurrence")
	}
	if n, _, ok := one.Next(occ, 1, 0, now); !ok || !n.Equal(future) {
		t.Fatalf("one: next %v, want %v", n, future)
	}

	all := Plan{Spec: s, CatchUp: All}
	at, behind := occ, uint32(0)
	var got []time.Time
	for seq := uint64(1); ; seq++ {
		n, b, ok := all.Next(at, seq, behind, now)
		if !ok {
			t.Fatal("all: ended")
		}
		got = append(got, n)
		at, behind = n, b
		if n.After(now) {
			break
		}
	}
	if len(got) != 6 || !got[5].Equal(future) {
		t.Fatalf("all: got %v, want each minute 10:01..10:06", got)
	}
	// Past MaxCatchUp in a row it goes back on the plan.
	if n, _, _ := all.Next(occ, 1, MaxCatchUp-1, now); !n.Equal(future) {
		t.Fatalf("all past the bound: next %v, want %v", n, future)
	}

	none := Plan{Spec: s, CatchUp: None}
	if !none.Skip(occ, now) {
		t.Fatal("none delivers the missed occurrence")
	}
	if none.Skip(future, future.Add(time.Second)) {
		t.Fatal("none skips an occurrence on time")
	}
	if n, _, ok := none.Next(occ, 1, 0, now); !ok || !n.Equal(future) {
		t.Fatalf("none: next %v, want %v", n, future)
	}
}

func TestPlan_Next_UntilAndLimit(t *testing.T) {
	s, _ := ParseEvery(time.Second)
	occ := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	p := Plan{Spec: s, Limit: 3}
	if _, _, ok := p.Next(occ, 2, 0, occ); !ok {
		t.Fatal("limit 3: no third occurrence")
	}
	if _, _, ok := p.Next(occ, 3, 0, occ); ok {
		t.Fatal("limit 3: a fourth occurrence")
	}
	p = Plan{Spec: s, Until: occ.Add(time.Second)}
	if n, _, ok := p.Next(occ, 1, 0, occ); !ok || !n.Equal(occ.Add(time.Second)) {
		t.Fatalf("until: next %v %v, want the end itself", n, ok)
	}
	if _, _, ok := p.Next(occ.Add(time.Second), 2, 0, occ); ok {
		t.Fatal("until: an occurrence after the end")
	}
	if got := (Plan{Spec: s, Limit: 4}).Upcoming(occ, 1, 5); len(got) != 3 {
		t.Fatalf("upcoming with limit 4 from the first: %v, want 3", got)
	}
}

// FuzzSpec_After checks that the next planned time is always strictly
// after the time asked about, in zones with daylight saving (one with a
// 30-minute shift among them), so a schedule never stands still or goes
// back.
func FuzzSpec_After(f *testing.F) {
	f.Add("30 2 * * *", uint8(0), int64(0))
	f.Add("*/20 * * * *", uint8(1), int64(26_000_000))
	f.Add("15 59 2 * * *", uint8(2), int64(5_000_000))
	f.Add("@hourly", uint8(3), int64(-1))
	zones := []string{"Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "UTC"}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, spec string, zone uint8, offsetSec int64) {
		s, err := ParseCron(spec, zones[int(zone)%len(zones)])
		if err != nil {
			return
		}
		from := base.Add(time.Duration(offsetSec%(2*366*86400)) * time.Second)
		at := from
		for range 5 {
			n := s.After(at, at)
			if n.IsZero() {
				return
			}
			if !n.After(at) {
				t.Fatalf("After(%v) = %v, not after it", at, n)
			}
			at = n
		}
	})
}

// TestSpec_After_EndsAtMaxTime checks that no planned time is ever after
// the last time that can be stored: the schedule ends there, as at a
// Delay-Until, rather than plan a time that wraps around to 1677 once
// stored as Unix nanoseconds.
func TestSpec_After_EndsAtMaxTime(t *testing.T) {
	every := func(d time.Duration) Spec {
		s, err := ParseEvery(d)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	yearly, err := ParseCron("@yearly", "")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	end := delaystore.MaxTime
	for _, tt := range []struct {
		name     string
		s        Spec
		prev, at time.Time
		want     time.Time
	}{
		{"every, the next past the end", every(2300000 * time.Hour), now, now, time.Time{}},
		{"every, two intervals overflow a duration", every(2300000 * time.Hour), now, now.Add(2400000 * time.Hour), time.Time{}},
		{"every, the next at the end", every(24 * time.Hour), end.Add(-24 * time.Hour), end.Add(-time.Hour), end},
		{"every, the next after the end", every(24 * time.Hour), end.Add(-23 * time.Hour), end.Add(-time.Hour), time.Time{}},
		{"cron, the next at the end", yearly, end.Add(-time.Hour), end.Add(-time.Hour), end},
		{"cron, the next after the end", yearly, end, end, time.Time{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.After(tt.prev, tt.at); !got.Equal(tt.want) {
				t.Fatalf("After(%v, %v) = %v, want %v", tt.prev, tt.at, got, tt.want)
			}
		})
	}
	if got := (Plan{Spec: yearly}).Upcoming(end.Add(-24*time.Hour), 1, 5); len(got) != 1 || !got[0].Equal(end) {
		t.Fatalf("upcoming from the day before the end: %v, want the end alone", got)
	}
}

// FuzzSpec_After_NeverPastMaxTime checks that a planned time is after the
// time asked about, never after delaystore.MaxTime, and survives the trip
// through Unix nanoseconds that storing it takes, for intervals and cron
// specs alike, asked about up to 290 years before the end.
func FuzzSpec_After_NeverPastMaxTime(f *testing.F) {
	f.Add("", int64(2300000*time.Hour), int64(262*365*86400))
	f.Add("", int64(100*time.Millisecond), int64(1))
	f.Add("", int64(math.MaxInt64), int64(0))
	f.Add("@yearly", int64(0), int64(86400))
	f.Add("0 0 * * *", int64(0), int64(3*86400))
	f.Add("*/20 * * * * *", int64(0), int64(50))
	f.Fuzz(func(t *testing.T, spec string, everyNs int64, beforeEndSec int64) {
		var s Spec
		var err error
		if spec == "" {
			s, err = ParseEvery(time.Duration(everyNs))
		} else {
			s, err = ParseCron(spec, "Europe/Berlin")
		}
		if err != nil {
			return
		}
		back := time.Duration(uint64(beforeEndSec)%(290*365*86400)) * time.Second
		prev := delaystore.MaxTime.Add(-back)
		at := prev
		for range 5 {
			n := s.After(prev, at)
			if n.IsZero() {
				return
			}
			if !n.After(at) || n.After(delaystore.MaxTime) || !time.Unix(0, n.UnixNano()).Equal(n) {
				t.Fatalf("%v: After(%v, %v) = %v: want after it, by %v, and storable", s, prev, at, n, delaystore.MaxTime)
			}
			at = n
		}
	})
}
