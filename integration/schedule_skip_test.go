package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/client"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
)

// untilOccurrence ACKs what arrives on got and returns the first delivery
// of an occurrence planned at from or later, failing tb if any before it
// is planned at from or later: occurrences planned before from (planned
// ahead when a skip came) may still go out.
func untilOccurrence(tb testing.TB, got <-chan received, ack func(received), from time.Time) received {
	tb.Helper()
	for {
		r := next(tb, got, fmt.Sprintf("an occurrence planned at %v or later", from))
		if occ := occurrenceOf(tb, r); !occ.Before(from) {
			return r
		}
		ack(r)
	}
}

// TestSchedule_Skip_NeverDeliveredCountedAndTold checks SCHEDULE.SKIP
// through the real service: the reply shows the skips waiting and next
// times without them; the skipped occurrences are never delivered, each
// is told as a skipped event with reason skip and counted in skipped; the
// schedule then goes on at the next time the reply showed. Bad counts,
// no schedule and a one-off message are refused and change nothing.
func TestSchedule_Skip_NeverDeliveredCountedAndTold(t *testing.T) {
	t.Parallel()
	const every = 300 * time.Millisecond
	h := newEventHarness(t, nil)
	ctx := context.Background()
	cl := api(h.nc)
	skipped := subscribe(t, h.nc, wire.DefaultEventPrefix+"."+wire.EventSkipped+".>")
	got := subscribe(t, h.nc, "sched.skip")
	schedule(t, h.nc, newMsg("sched.skip", "x", "Delay-Every", every.String(), "Delay-Id", "s"))
	ack := func(r received) { ackSync(t, h.nc, r.Msg, "") }
	ack(next(t, got, "first occurrence"))

	ref := wire.MessageRef{Subject: "sched.skip", ID: "s"}
	mi, err := cl.SkipSchedule(ctx, ref, 2)
	if err != nil {
		t.Fatal(err)
	}
	s := mi.Schedule
	if s.Skip != 2 || len(s.Next) != wire.DefaultUpcoming || !s.Next[0].Equal(s.Occurrence.Add(2*every)) {
		t.Fatalf("skip answered %+v, want 2 to skip and next times from %v", s, s.Occurrence.Add(2*every))
	}
	r := untilOccurrence(t, got, ack, s.Occurrence)
	if occ := occurrenceOf(t, r); !occ.Equal(s.Next[0]) {
		t.Fatalf("after the skip went the occurrence of %v, want %v: a skipped one was delivered", occ, s.Next[0])
	}
	ack(r)
	for i := range 2 {
		e := next(t, skipped, "a skipped event")
		var ev wire.Event
		if err := json.Unmarshal(e.Data, &ev); err != nil || ev.Subject != "sched.skip" || ev.ID != "s" || ev.Reason != "skip" {
			t.Fatalf("skipped event %d: %s (%v)", i+1, e.Data, err)
		}
	}
	after, err := cl.Get(ctx, ref)
	if err != nil || after.Schedule.Skipped != 2 || after.Schedule.Skip != 0 {
		t.Fatalf("GET after the skips: %+v %v, want 2 skipped and none waiting", after.Schedule, err)
	}

	for _, c := range []struct {
		ref   wire.MessageRef
		count uint64
		want  error
	}{
		{ref, 0, wire.ErrBadRequest},
		{ref, wire.MaxSkip + 1, wire.ErrBadRequest},
		{wire.MessageRef{Subject: "sched.skip", ID: "none"}, 1, wire.ErrNotFound},
		{wire.MessageRef{Tag: schedule(t, h.nc, newMsg("sched.skip.plain", "p", "Delay", "1h")).Tag}, 1, wire.ErrConflict},
	} {
		if _, err := cl.SkipSchedule(ctx, c.ref, c.count); !errors.Is(err, c.want) {
			t.Fatalf("skip %d of %+v: %v, want %v", c.count, c.ref, err, c.want)
		}
	}
	yearly := wire.MessageRef{Subject: "sched.skip.yearly", ID: "y"}
	schedule(t, h.nc, newMsg(yearly.Subject, "y", "Delay-Cron", "0 0 1 1 *", "Delay-Id", "y"))
	if _, err := cl.SkipSchedule(ctx, yearly, wire.MaxSkip-1); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.SkipSchedule(ctx, yearly, 2); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("skips over %d waiting: %v, want a 400", wire.MaxSkip, err)
	}
	if y, err := cl.Get(ctx, yearly); err != nil || y.Schedule.Skip != wire.MaxSkip-1 {
		t.Fatalf("GET after a refused skip: %+v %v, want %d waiting, unchanged", y, err, wire.MaxSkip-1)
	}
}

// TestSchedule_Skip_AcrossRestart checks that skips are stored with the
// schedule: asked for, then the service closed at once and started again
// on its store, exactly the skipped occurrences are left out, whether
// planned before the restart or after it, and the next delivered is the
// one the reply showed.
func TestSchedule_Skip_AcrossRestart(t *testing.T) {
	t.Parallel()
	const every = 300 * time.Millisecond
	dir := t.TempDir()
	srv := startServer(t)
	nc := connect(t, srv)
	open := func() *bridge.Service { return startService(t, srv, openPebble(t, pebblestore.Config{Dir: dir}), nil) }
	svc := open()
	ctx := context.Background()
	cl := api(nc)
	got := subscribe(t, nc, "sched.skip.restart")
	ack := func(r received) { ackSync(t, nc, r.Msg, "") }
	schedule(t, nc, newMsg("sched.skip.restart", "x", "Delay-Every", every.String(), "Delay-Id", "r"))
	ack(next(t, got, "first occurrence"))
	ref := wire.MessageRef{Subject: "sched.skip.restart", ID: "r"}
	mi, err := cl.SkipSchedule(ctx, ref, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	svc = open()
	s := mi.Schedule
	r := untilOccurrence(t, got, ack, s.Occurrence)
	if occ := occurrenceOf(t, r); !occ.Equal(s.Next[0]) || !occ.Equal(s.Occurrence.Add(3*every)) {
		t.Fatalf("after the skip and a restart went the occurrence of %v, want %v", occ, s.Next[0])
	}
	ack(r)
	after, err := cl.Get(ctx, ref)
	if err != nil || after.Schedule.Skipped != 3 || after.Schedule.Skip != 0 {
		t.Fatalf("GET: %+v %v, want exactly 3 skipped", after.Schedule, err)
	}
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSchedule_Exclude_AcrossDSTInTwoZones runs the service on a clock
// set to a minute before local midnight ahead of an excluded day on which
// daylight saving starts (Europe/Berlin, a 23-hour day) or ends
// (America/New_York, a 25-hour day), with a schedule every second: the
// occurrences before midnight are delivered, and the dispatcher plans the
// one after them on the next day's midnight in the new offset, as its
// Delay-Next and GET show; none falls on the excluded day.
func TestSchedule_Exclude_AcrossDSTInTwoZones(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ zone, start, exclude, want string }{
		{"Europe/Berlin", "2027-03-27T23:59:57+01:00", "2027-03-28", "2027-03-29T00:00:00+02:00"},
		{"America/New_York", "2027-11-06T23:59:57-04:00", "2027-11-07", "2027-11-08T00:00:00-05:00"},
	} {
		t.Run(c.zone, func(t *testing.T) {
			t.Parallel()
			start := parseTime(t, c.start)
			offset := time.Until(start)
			srv := startServer(t)
			startService(t, srv, openPebble(t, pebblestore.Config{Dir: t.TempDir()}), func(cfg *bridge.Config) {
				cfg.Now = func() time.Time { return time.Now().Add(offset) }
			})
			nc := connect(t, srv)
			got := subscribe(t, nc, "sched.exclude")
			schedule(t, nc, newMsg("sched.exclude", "x", "Delay-Cron", "* * * * * *", "Delay-TZ", c.zone, "Delay-Id", "e", "Delay-Exclude", c.exclude))
			want := parseTime(t, c.want)
			for {
				r := next(t, got, "an occurrence before midnight")
				ackSync(t, nc, r.Msg, "")
				occ := occurrenceOf(t, r)
				if !occ.Before(want) {
					t.Fatalf("occurrence of %v delivered, on or after the excluded day", occ)
				}
				if nx := r.Header.Get(wire.HeaderNext); nx != "" && !parseTime(t, nx).Before(start.Add(3*time.Second)) {
					if n := parseTime(t, nx); !n.Equal(want) {
						t.Fatalf("the last occurrence before the excluded day has %s %v, want %v", wire.HeaderNext, n, want)
					}
					break
				}
			}
			mi, err := api(nc).Get(context.Background(), wire.MessageRef{Subject: "sched.exclude", ID: "e"})
			if err != nil || len(mi.Schedule.Next) == 0 || !mi.Schedule.Next[0].Equal(want) || mi.Schedule.Exclude != c.exclude {
				t.Fatalf("GET: %+v %v, want the next at %v", mi.Schedule, err, want)
			}
			if !mi.Schedule.Next[1].Equal(want.Add(time.Second)) {
				t.Fatalf("GET: second next time %v, want %v", mi.Schedule.Next[1], want.Add(time.Second))
			}
		})
	}
}

// jitterPreview is the schedule's next n times by planned time, as GET
// shows them.
func jitterPreview(tb testing.TB, cl *client.Client, ref wire.MessageRef, n int) *client.ScheduleInfo {
	tb.Helper()
	mi, err := cl.GetUpcoming(context.Background(), wire.GetRequest{MessageRef: ref, Upcoming: n})
	if err != nil {
		tb.Fatal(err)
	}
	return mi.Schedule
}

// firstPlanned is the planned time of the first of si's next times, for
// a schedule of one occurrence every every: the occurrence GET found, or,
// once that one is out for delivery (counted as fired), its successor.
func firstPlanned(si *client.ScheduleInfo, every time.Duration) time.Time {
	if si.Fired >= si.Seq {
		return si.Occurrence.Add(every)
	}
	return si.Occurrence
}

// TestSchedule_Jitter_BoundsAndStableAcrossRestart checks Delay-Jitter
// through the real service: GET shows the next times within [t, t+jitter)
// of each planned time t, and not all at t; each occurrence goes out at
// the time GET showed (Delay-Fire-At), never early, with Delay-Occurrence
// its planned time; the service closed and started again on its store
// shows the same times and delivers at them.
func TestSchedule_Jitter_BoundsAndStableAcrossRestart(t *testing.T) {
	t.Parallel()
	const every, jitter = time.Second, 900 * time.Millisecond
	dir := t.TempDir()
	srv := startServer(t)
	nc := connect(t, srv)
	open := func() *bridge.Service { return startService(t, srv, openPebble(t, pebblestore.Config{Dir: dir}), nil) }
	svc := open()
	cl := api(nc)
	got := subscribe(t, nc, "sched.jitter")
	ref := wire.MessageRef{Subject: "sched.jitter", ID: "j"}
	schedule(t, nc, newMsg("sched.jitter", "x", "Delay-Every", every.String(), "Delay-Jitter", jitter.String(), "Delay-Id", "j", "Delay", "2s"))
	before := jitterPreview(t, cl, ref, 30)
	if before.Jitter != jitter || len(before.Next) != 30 {
		t.Fatalf("GET: %+v, want jitter %v and 30 next times", before, jitter)
	}
	shown := map[time.Time]time.Time{} // planned time -> fire time
	var spread bool
	for i, f := range before.Next {
		planned := firstPlanned(before, every).Add(time.Duration(i) * every)
		// NB: GET shows both times truncated to the millisecond, so a
		// fire time just under t+jitter shows as t+jitter.
		if f.Before(planned) || f.After(planned.Add(jitter)) {
			t.Fatalf("next time %d: %v, outside [%v, +%v] (the bound shown to the millisecond)", i, f, planned, jitter)
		}
		spread = spread || !f.Equal(planned)
		shown[planned] = f
	}
	if !spread {
		t.Fatal("every next time is its planned time: no jitter")
	}
	checkDelivery := func(r received) {
		t.Helper()
		occ := occurrenceOf(t, r)
		want, ok := shown[occ]
		if !ok {
			t.Fatalf("occurrence of %v was not shown", occ)
		}
		if fa := parseTime(t, r.Header.Get(wire.HeaderFireAt)); !fa.Equal(want.Truncate(time.Millisecond)) {
			t.Fatalf("occurrence of %v: %s %v, want %v as GET showed", occ, wire.HeaderFireAt, fa, want)
		}
		notEarly(t, r, want)
		ackSync(t, nc, r.Msg, "")
	}
	checkDelivery(next(t, got, "first occurrence"))
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	svc = open()
	after := jitterPreview(t, cl, ref, 20)
	for i, f := range after.Next {
		planned := firstPlanned(after, every).Add(time.Duration(i) * every)
		if want, ok := shown[planned]; ok && !f.Equal(want) {
			t.Fatalf("after the restart the occurrence of %v goes out at %v, before it %v", planned, f, want)
		}
	}
	for range 2 {
		checkDelivery(next(t, got, "an occurrence after the restart"))
	}
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSchedule_EditExcludeJitter_PreviewUpTo100 checks SCHEDULE.EDIT of
// the exclusions and jitter (a refused edit changes nothing) and the
// preview's size: GET and SCHEDULES show the next times asked for, up
// to 100.
func TestSchedule_EditExcludeJitter_PreviewUpTo100(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ctx := context.Background()
	cl := api(h.nc)
	ref := wire.MessageRef{Subject: "sched.preview", ID: "p"}
	schedule(t, h.nc, newMsg("sched.preview", "x", "Delay-Cron", "0 9 * * *", "Delay-TZ", "Europe/Berlin", "Delay-Id", "p",
		"Delay-At", "2027-12-20T09:00:00+01:00"))
	mi, err := cl.EditSchedule(ctx, wire.ScheduleEditRequest{Subject: ref.Subject, ID: ref.ID,
		Exclude: "2027-12-24..2027-12-26,2027-12-21", Jitter: "10m"})
	if err != nil {
		t.Fatal(err)
	}
	s := mi.Schedule
	if s.Exclude != "2027-12-21,2027-12-24..2027-12-26" || s.Jitter != 10*time.Minute {
		t.Fatalf("edit answered %+v, want the exclusions merged and the jitter", s)
	}
	days := map[int]bool{}
	for _, n := range s.Next {
		days[n.Day()] = true
	}
	for _, d := range []int{21, 24, 25, 26} {
		if days[d] {
			t.Fatalf("next times %v include excluded day %d", s.Next, d)
		}
	}
	for _, bad := range []wire.ScheduleEditRequest{{Exclude: "2027-12-32"}, {Jitter: "1d"}, {Jitter: "0"}} {
		bad.Subject, bad.ID = ref.Subject, ref.ID
		if _, err := cl.EditSchedule(ctx, bad); !errors.Is(err, wire.ErrBadRequest) {
			t.Fatalf("edit %+v: %v, want a 400", bad, err)
		}
	}
	again := jitterPreview(t, cl, ref, wire.MaxUpcoming)
	if len(again.Next) != wire.MaxUpcoming || again.Exclude != s.Exclude || !again.Next[0].Equal(s.Next[0]) {
		t.Fatalf("GET of %d after refused edits: %d times, exclude %q, first %v; want the edit's", wire.MaxUpcoming, len(again.Next), again.Exclude, again.Next[0])
	}
	if _, err := cl.GetUpcoming(ctx, wire.GetRequest{MessageRef: ref, Upcoming: wire.MaxUpcoming + 1}); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("GET of %d next times: %v, want a 400", wire.MaxUpcoming+1, err)
	}
	page, err := cl.SchedulesPage(ctx, wire.SchedulesRequest{Subject: ref.Subject, Upcoming: 7})
	if err != nil || len(page.Messages) != 1 || len(page.Messages[0].Schedule.Next) != 7 {
		t.Fatalf("SCHEDULES of 7 next times: %+v %v", page, err)
	}
	none, err := cl.EditSchedule(ctx, wire.ScheduleEditRequest{Subject: ref.Subject, ID: ref.ID, Exclude: "none", Jitter: "none"})
	if err != nil || none.Schedule.Exclude != "" || none.Schedule.Jitter != 0 || !none.Schedule.Next[1].Equal(parseTime(t, "2027-12-21T09:00:00+01:00")) {
		t.Fatalf("edit removing both: %+v %v", none.Schedule, err)
	}
}
