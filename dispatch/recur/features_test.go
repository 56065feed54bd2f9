package recur

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

func mustExclude(t *testing.T, v string) Exclusions {
	t.Helper()
	ex, err := ParseExclude(v)
	if err != nil {
		t.Fatal(err)
	}
	return ex
}

// TestPlan_After_ExcludeAcrossDST checks that an excluded date holds no
// occurrence from its local midnight to the next, on the days daylight
// saving starts (a 23-hour day, Europe/Berlin) and ends (a 25-hour day,
// America/New_York), and that the plan goes on, on its wall-clock times,
// the day after.
func TestPlan_After_ExcludeAcrossDST(t *testing.T) {
	tests := []struct {
		name, zone, spec, exclude string
		from                      string
		want                      []string
	}{
		// 02:30 does not exist on 2026-03-29 in Berlin; that day's
		// occurrence (03:00 CEST) is excluded.
		{"berlin spring forward", "Europe/Berlin", "30 2 * * *", "2026-03-29", "2026-03-27T12:00:00+01:00",
			[]string{"2026-03-28T02:30:00+01:00", "2026-03-30T02:30:00+02:00", "2026-03-31T02:30:00+02:00"}},
		{"berlin range over the change", "Europe/Berlin", "0 0 * * *", "2026-03-28..2026-03-30", "2026-03-27T12:00:00+01:00",
			[]string{"2026-03-31T00:00:00+02:00", "2026-04-01T00:00:00+02:00"}},
		// 01:30 exists twice on 2026-11-01 in New York; the day is
		// excluded, both halves of its fold with it.
		{"new york fall back", "America/New_York", "30 1 * * *", "2026-11-01", "2026-10-31T00:00:00-04:00",
			[]string{"2026-10-31T01:30:00-04:00", "2026-11-02T01:30:00-05:00"}},
		{"new york every 20 minutes", "America/New_York", "*/20 * * * *", "2026-11-01", "2026-10-31T23:20:00-04:00",
			[]string{"2026-10-31T23:40:00-04:00", "2026-11-02T00:00:00-05:00", "2026-11-02T00:20:00-05:00"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Plan{Spec: mustCron(t, tc.spec, tc.zone), Extra: &Extra{Exclude: mustExclude(t, tc.exclude)}}
			at := mustTime(t, tc.from)
			for i, w := range tc.want {
				at = p.After(at, at)
				if want := mustTime(t, w); !at.Equal(want) {
					t.Fatalf("occurrence %d: %v, want %v", i, at.In(p.Loc), want)
				}
				if p.Excluded(at) {
					t.Fatalf("occurrence %d at %v is on an excluded date", i, at.In(p.Loc))
				}
			}
		})
	}
}

// TestPlan_After_ExcludeEvery checks exclusions of an interval: in UTC,
// whole intervals from the first, none on an excluded date.
func TestPlan_After_ExcludeEvery(t *testing.T) {
	s, err := ParseEvery(7 * time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p := Plan{Spec: s, Extra: &Extra{Exclude: mustExclude(t, "2026-12-25")}}
	first := mustTime(t, "2026-12-24T20:00:00Z")
	got := p.Upcoming(first, 1, 3)
	want := []string{"2026-12-26T00:00:00Z", "2026-12-26T07:00:00Z", "2026-12-26T14:00:00Z"}
	for i, w := range want {
		if !got[i].Equal(mustTime(t, w)) {
			t.Fatalf("upcoming %d: %v, want %s", i, got[i], w)
		}
	}
	// A first occurrence given on an excluded date moves to the plan's
	// next time off it, counted from it.
	given := mustTime(t, "2026-12-25T03:00:00Z")
	if at, ok := p.First(given, given, true); !ok || !at.Equal(mustTime(t, "2026-12-26T00:00:00Z")) {
		t.Fatalf("First on an excluded date: %v %v, want 2026-12-26T00:00:00Z", at, ok)
	}
}

// TestParseExclude checks the accepted form, its canonical writing, and
// that each bad value is refused with what is accepted.
func TestParseExclude(t *testing.T) {
	ex, err := ParseExclude(" 2027-02-01..2027-02-07, 2026-12-25,2027-01-01,2027-02-05..2027-02-09 ,2026-12-26")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ex.String(), "2026-12-25..2026-12-26,2027-01-01,2027-02-01..2027-02-09"; got != want {
		t.Fatalf("String %q, want %q", got, want)
	}
	many := strings.Repeat("2026-01-01,", MaxExclude) + "2026-01-02"
	for _, bad := range []string{"", "2026-12-32", "25.12.2026", "2026-12-25..", "2027-01-02..2027-01-01", "1969-12-31", "2262-01-01", many} {
		if _, err := ParseExclude(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseExclude(%.30q): %v, want ErrInvalid", bad, err)
		}
	}
}

// TestPlan_FireAt_Jitter checks that each occurrence goes out within
// [t, t+jitter), never early, at an offset fixed by the seed and t, and
// that the offsets spread over the window.
func TestPlan_FireAt_Jitter(t *testing.T) {
	const jitter = 30 * time.Second
	p := Plan{Extra: &Extra{Jitter: jitter, Seed: Seed("reports.daily", "r", 42)}}
	other := Plan{Extra: &Extra{Jitter: jitter, Seed: Seed("reports.daily", "s", 42)}}
	at := mustTime(t, "2026-12-03T09:00:00Z")
	var low, high, differ int
	for i := range 1000 {
		tm := at.Add(time.Duration(i) * time.Minute)
		f := p.FireAt(tm)
		if f.Before(tm) || !f.Before(tm.Add(jitter)) {
			t.Fatalf("FireAt(%v) = %v: outside [t, t+%v)", tm, f, jitter)
		}
		if again := (Plan{Extra: &Extra{Jitter: jitter, Seed: p.Seed}}).FireAt(tm); !again.Equal(f) {
			t.Fatalf("FireAt(%v) once %v, then %v", tm, f, again)
		}
		if f.Sub(tm) < jitter/2 {
			low++
		} else {
			high++
		}
		if !other.FireAt(tm).Equal(f) {
			differ++
		}
	}
	// Uniform: each half gets about 500 of 1000; a bound far from it
	// fails only for a broken hash.
	if low < 400 || high < 400 || differ < 900 {
		t.Fatalf("offsets not spread: %d in the first half, %d in the second, %d of 1000 differ from another seed's", low, high, differ)
	}
	if f := (Plan{}).FireAt(at); !f.Equal(at) {
		t.Fatalf("FireAt without jitter %v, want %v", f, at)
	}
}

// TestPlan_Next_JitterNotMissed checks that an occurrence going out at
// its jittered time is no catch-up: its successor is the next planned
// time, not the first after now.
func TestPlan_Next_JitterNotMissed(t *testing.T) {
	s, err := ParseEvery(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	p := Plan{Spec: s, Extra: &Extra{Jitter: 59 * time.Second, Seed: 7}, CatchUp: None}
	occ := mustTime(t, "2026-12-03T09:00:00Z")
	for i := range 200 {
		now := p.FireAt(occ)
		if p.Skip(occ, now) {
			t.Fatalf("occurrence %d at %v going out at %v: skipped as missed", i, occ, now)
		}
		next, _, ok := p.Next(occ, uint64(i+1), 0, now)
		if !ok || !next.Equal(occ.Add(time.Minute)) {
			t.Fatalf("Next of %v at %v: %v %v, want %v", occ, now, next, ok, occ.Add(time.Minute))
		}
		occ = next
	}
}

// TestPlan_Preview checks the next times GET shows: skipped occurrences
// and excluded dates left out, the limit counted on delivered ones only,
// the jitter applied.
func TestPlan_Preview(t *testing.T) {
	p := Plan{Spec: mustCron(t, "0 9 * * *", "Europe/Berlin"), Extra: &Extra{Exclude: mustExclude(t, "2026-12-05")}, Limit: 4}
	occ := mustTime(t, "2026-12-03T09:00:00+01:00")
	got := p.Preview(occ, 2, 1, 10)
	// The 3rd is skipped, the 5th excluded; numbers 2, 3 and 4 go out.
	want := []string{"2026-12-04T09:00:00+01:00", "2026-12-06T09:00:00+01:00", "2026-12-07T09:00:00+01:00"}
	if len(got) != len(want) {
		t.Fatalf("Preview %v, want %v", got, want)
	}
	for i, w := range want {
		if !got[i].Equal(mustTime(t, w)) {
			t.Fatalf("Preview %d: %v, want %s", i, got[i], w)
		}
	}
	p.Limit, p.Jitter, p.Seed = 0, time.Minute, 3
	got = p.Preview(occ, 1, 0, 100)
	if len(got) != 100 {
		t.Fatalf("Preview of 100: %d times", len(got))
	}
	for i, f := range got {
		if f.Sub(got[0]) < 0 || p.Excluded(f) {
			t.Fatalf("Preview %d: %v out of order or excluded", i, f)
		}
	}
}

// TestPlan_MinGap checks the gap a jitter must stay under.
func TestPlan_MinGap(t *testing.T) {
	from := mustTime(t, "2026-12-03T08:59:59Z")
	if g := (Plan{Spec: mustCron(t, "*/15 9-17 * * MON-FRI", "")}).MinGap(from); g != 15*time.Minute {
		t.Fatalf("MinGap of */15: %v", g)
	}
	every, _ := ParseEvery(90 * time.Second)
	if g := (Plan{Spec: every}).MinGap(from); g != 90*time.Second {
		t.Fatalf("MinGap of every 90s: %v", g)
	}
}
