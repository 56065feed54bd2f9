package integration_test

import (
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// lastStorable is the latest time a message can fire or expire at: times
// are stored as Unix nanoseconds, which end in April 2262.
var lastStorable = time.Date(2262, time.January, 1, 0, 0, 0, 0, time.UTC)

// wantPlannedTimes checks that every planned time GET lists is after the
// one before it and no later than the last storable time: none wrapped
// around to 1677 or 1704.
func wantPlannedTimes(tb testing.TB, what string, next []string) {
	tb.Helper()
	var prev time.Time
	for _, n := range next {
		at := parseTime(tb, n)
		if at.After(lastStorable) || !at.After(prev) {
			tb.Fatalf("%s: planned times %v: %s is past %v or not after the one before", what, next, n, lastStorable)
		}
		prev = at
	}
}

// TestRecurring_Every_PastLastStorableTime_Ends checks that a schedule
// whose next occurrence would come after the last time that can be stored
// ends there, as at a Delay-Until: its first occurrence is its last (no
// Delay-Next), nothing is delivered after it, and GET never lists a time
// that wrapped around to the past.
func TestRecurring_Every_PastLastStorableTime_Ends(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	got := subscribe(t, h.nc, "rec.end.every")
	rep := schedule(t, h.nc, newMsg("rec.end.every", "tick", "Delay-Every", "2300000h", "Delay", "300ms", "Delay-Id", "far"))

	var mi wire.MessageInfo
	apiCall(t, h.nc, "GET", map[string]string{"subject": "rec.end.every", "id": "far"}, &mi)
	if mi.Schedule == nil || len(mi.Schedule.Next) != 1 {
		t.Fatalf("GET: %+v, want the first occurrence as the only planned time", mi.Schedule)
	}
	wantPlannedTimes(t, "GET", mi.Schedule.Next)

	r := next(t, got, "the first occurrence")
	notEarly(t, r, rep.FireAt)
	if v, ok := r.Header[wire.HeaderNext]; ok {
		t.Fatalf("the first occurrence has Delay-Next %v: want none, the next would be after %v", v, lastStorable)
	}
	ackSync(t, h.nc, r.Msg, "")
	waitPending(t, h.nc, 0)
	quiet(t, got, 300*time.Millisecond, "an occurrence past the last storable time")
	if n := info(t, h.nc).Counts.Schedules; n != 0 {
		t.Fatalf("INFO schedules %d after the last occurrence, want 0", n)
	}
}

// TestRecurring_Cron_NearLastStorableTime_ListsNoWrappedTime checks that
// a cron schedule starting just before the last time that can be stored
// lists only the planned times up to it, never one wrapped to 1677, and
// that an interval one lists its times up to it in order.
func TestRecurring_Cron_NearLastStorableTime_ListsNoWrappedTime(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	schedule(t, h.nc, newMsg("rec.end.cron", "x", "Delay-Cron", "@yearly", "Delay-At", "2261-12-31T00:00:00Z", "Delay-Id", "yearly"))
	schedule(t, h.nc, newMsg("rec.end.cron", "x", "Delay-Every", "2400h", "Delay-At", "2261-06-01T00:00:00Z", "Delay-Id", "every"))
	for _, tt := range []struct {
		id   string
		want int
	}{
		{"yearly", 2}, // 2261-12-31 and 2262-01-01, the last storable time itself
		{"every", 3},  // 2261-06-01, 2261-09-09, 2261-12-18
	} {
		var mi wire.MessageInfo
		apiCall(t, h.nc, "GET", map[string]string{"subject": "rec.end.cron", "id": tt.id}, &mi)
		if mi.Schedule == nil || len(mi.Schedule.Next) != tt.want {
			t.Fatalf("GET %s: %+v, want %d planned times", tt.id, mi.Schedule, tt.want)
		}
		wantPlannedTimes(t, "GET "+tt.id, mi.Schedule.Next)
	}
}
