package integration_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/client"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
)

// drainAcked ACKs what arrives on got until only want messages are
// pending: the occurrence a pause finds planned already (in the second
// before its time) still goes out.
func drainAcked(tb testing.TB, got <-chan received, ack func(received), pendingNow func() uint64, want uint64) {
	tb.Helper()
	checkFor(tb, wait, 10*time.Millisecond, func() error {
		for len(got) > 0 {
			ack(<-got)
		}
		if n := pendingNow(); n != want {
			return fmt.Errorf("%d pending, want %d", n, want)
		}
		return nil
	})
}

// TestSchedule_PauseAcrossRestart_ResumeCatchesUp pauses two schedules
// (Delay-Catch-Up one and none) by subject and id, checks that GET and
// SCHEDULES show them paused with no next times, restarts the service on
// its store on disk, checks that nothing is delivered for several
// intervals, then resumes them: one delivers the occurrence the pause
// held once, as a catch-up, then goes back on the plan after the resume;
// none skips it (counted) and delivers the first planned time after the
// resume. A pause of a paused schedule and a pause of what is no schedule
// change nothing.
func TestSchedule_PauseAcrossRestart_ResumeCatchesUp(t *testing.T) {
	t.Parallel()
	const every = 200 * time.Millisecond
	dir := t.TempDir()
	srv := startServer(t)
	nc := connect(t, srv)
	open := func() *bridge.Service { return startService(t, srv, openPebble(t, pebblestore.Config{Dir: dir}), nil) }
	svc := open()
	ctx := context.Background()
	cl := api(nc)
	policies := []string{"one", "none"}
	subs := map[string]<-chan received{}
	for _, p := range policies {
		subj := "sched.pause." + p
		subs[p] = subscribe(t, nc, subj)
		schedule(t, nc, newMsg(subj, "x", "Delay-Every", every.String(), "Delay-Id", "beat", "Delay-Catch-Up", p))
		ackSync(t, nc, next(t, subs[p], "first occurrence").Msg, "")
		mi, err := cl.PauseSchedule(ctx, wire.MessageRef{Subject: subj, ID: "beat"})
		if err != nil {
			t.Fatalf("pause %s: %v", subj, err)
		}
		if mi.Schedule == nil || !mi.Schedule.Paused || len(mi.Schedule.Next) != 0 {
			t.Fatalf("pause %s answered %+v, want the schedule paused with no next times", subj, mi.Schedule)
		}
		again, err := cl.PauseSchedule(ctx, wire.MessageRef{Subject: subj, ID: "beat"})
		if err != nil || again.Tag != mi.Tag || !again.Schedule.Paused {
			t.Fatalf("pause again: %+v %v, want the same paused occurrence %s", again, err, mi.Tag)
		}
	}
	if _, err := cl.PauseSchedule(ctx, wire.MessageRef{Subject: "sched.pause.one", ID: "nothing"}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("pause of no schedule: %v, want a 404", err)
	}
	plain := schedule(t, nc, newMsg("sched.pause.plain", "p", "Delay", "1h"))
	if _, err := cl.PauseSchedule(ctx, wire.MessageRef{Tag: plain.Tag}); !errors.Is(err, wire.ErrConflict) {
		t.Fatalf("pause of a one-off message: %v, want a 409", err)
	}
	for _, p := range policies {
		drainAcked(t, subs[p], func(r received) { ackSync(t, nc, r.Msg, "") }, func() uint64 { return pendingFor(t, nc, "sched.pause."+p) }, 1)
	}
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	svc = open()
	page, err := cl.SchedulesPage(ctx, wire.SchedulesRequest{})
	if err != nil || len(page.Messages) != 2 {
		t.Fatalf("SCHEDULES after the restart: %+v %v, want the two schedules", page, err)
	}
	held := map[string]time.Time{}
	for _, s := range page.Messages {
		if !s.Schedule.Paused || len(s.Schedule.Next) != 0 {
			t.Fatalf("after the restart %s shows %+v, want it paused", s.Subject, s.Schedule)
		}
		held[s.Subject] = s.Schedule.Occurrence
	}
	for _, p := range policies {
		quiet(t, subs[p], 3*every, "an occurrence of a paused schedule")
	}

	resumed := time.Now()
	for _, p := range policies {
		subj := "sched.pause." + p
		mi, err := cl.ResumeSchedule(ctx, wire.MessageRef{Subject: subj, ID: "beat"})
		if err != nil || mi.Schedule.Paused || len(mi.Schedule.Next) == 0 {
			t.Fatalf("resume %s: %+v %v, want it running", subj, mi, err)
		}
	}
	r := next(t, subs["one"], "the catch-up after the resume")
	if occ := occurrenceOf(t, r); !occ.Equal(held["sched.pause.one"]) {
		t.Fatalf("policy one delivered the occurrence of %v first, want the one the pause held, %v", occ, held["sched.pause.one"])
	}
	ackSync(t, nc, r.Msg, "")
	for _, p := range policies {
		r := next(t, subs[p], "the first occurrence on the plan after the resume")
		if occ := occurrenceOf(t, r); !occ.After(resumed) {
			t.Fatalf("policy %s: occurrence of %v after the resume at %v, want the first planned after it", p, occ, resumed)
		}
		ackSync(t, nc, r.Msg, "")
	}
	mi, err := cl.Get(ctx, wire.MessageRef{Subject: "sched.pause.none", ID: "beat"})
	if err != nil || mi.Schedule.Skipped == 0 {
		t.Fatalf("GET after policy none resumed: %+v %v, want the held occurrence counted as skipped", mi, err)
	}
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSchedule_Trigger checks that SCHEDULE.TRIGGER delivers one extra
// occurrence now, under its own tag, with the schedule's payload and
// headers and no Delay-Next, while the schedule's next time and count
// stay, and that canceling the extra one by its tag leaves the schedule.
func TestSchedule_Trigger(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ctx := context.Background()
	cl := api(h.nc)
	got := subscribe(t, h.nc, "sched.trigger")
	schedule(t, h.nc, newMsg("sched.trigger", "tick", "Delay-Cron", "0 0 1 1 *", "Delay-Id", "yearly", "X-Trace", "t1"))
	before, err := cl.Get(ctx, wire.MessageRef{Subject: "sched.trigger", ID: "yearly"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tr, err := cl.TriggerSchedule(ctx, wire.MessageRef{Subject: "sched.trigger", ID: "yearly"})
	if err != nil || tr.Name != "yearly" || tr.Tag == before.Tag {
		t.Fatalf("trigger: %+v %v", tr, err)
	}
	r := next(t, got, "the triggered occurrence")
	if r.Header.Get(wire.HeaderTag) != tr.Tag || string(r.Data) != "tick" || r.Header.Get("X-Trace") != "t1" ||
		r.Header.Get(wire.HeaderID) != "yearly" || r.Header.Get(wire.HeaderSchedule) != "0 0 1 1 *" || r.Header.Get(wire.HeaderNext) != "" {
		t.Fatalf("triggered delivery %q with headers %v", r.Data, r.Header)
	}
	if occ := occurrenceOf(t, r); occ.Before(now.Truncate(time.Millisecond)) {
		t.Fatalf("triggered occurrence of %v, before the trigger at %v", occ, now)
	}
	after, err := cl.Get(ctx, wire.MessageRef{Subject: "sched.trigger", ID: "yearly"})
	if err != nil || after.Tag != before.Tag || after.FireAt != before.FireAt || after.Schedule.Fired != 0 || after.Schedule.Next[0] != before.Schedule.Next[0] {
		t.Fatalf("after the trigger the schedule is %+v %v, want it as before: %+v", after, err, before)
	}
	tr2, err := cl.TriggerSchedule(ctx, wire.MessageRef{Tag: before.Tag})
	if err != nil {
		t.Fatalf("trigger by tag: %v", err)
	}
	if err := cl.Cancel(ctx, wire.MessageRef{Tag: tr2.Tag}); err != nil && !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("cancel the extra occurrence: %v", err)
	}
	ackSync(t, h.nc, r.Msg, "")
	for len(got) > 0 {
		ackSync(t, h.nc, (<-got).Msg, "")
	}
	if _, err := cl.Get(ctx, wire.MessageRef{Subject: "sched.trigger", ID: "yearly"}); err != nil {
		t.Fatalf("the schedule after its extra occurrence was canceled: %v", err)
	}
}

// TestCluster_InProcess_SchedulePause_SurvivesLeaderChange pauses a
// schedule through the leader of a 3-node cluster, kills the leader, and
// checks that the new leader shows it paused and delivers nothing of it
// for several intervals, then that a resume through the new leader
// starts it again.
func TestCluster_InProcess_SchedulePause_SurvivesLeaderChange(t *testing.T) {
	const every = 200 * time.Millisecond
	srv := startServer(t)
	nodes := startInProcessCluster(t, srv, 3)
	serving(t, nodes)
	nc := connect(t, srv)
	cl := api(nc)
	ctx := context.Background()
	got := subscribe(t, nc, "sched.cluster")
	ref := wire.MessageRef{Subject: "sched.cluster", ID: "beat"}
	// Delay-Ack none: each occurrence is gone once published, so what
	// stays pending is the schedule's own occurrence still to plan.
	scheduleInCluster(t, nc, newMsg("sched.cluster", "x", "Delay-Every", every.String(), "Delay-Id", "beat", "Delay-Ack", "none"))
	next(t, got, "first occurrence")
	checkFor(t, time.Minute, 20*time.Millisecond, func() error {
		_, err := cl.PauseSchedule(ctx, ref)
		return err
	})
	drainAcked(t, got, func(received) {}, func() uint64 { return pendingFor(t, nc, "sched.cluster") }, 1)

	leader := serving(t, nodes)
	leader.kill(t)
	serving(t, nodes)
	var mi *client.MessageInfo
	checkFor(t, time.Minute, 20*time.Millisecond, func() error {
		var err error
		mi, err = cl.Get(ctx, ref)
		return err
	})
	if mi.Schedule == nil || !mi.Schedule.Paused {
		t.Fatalf("after the leader change GET shows %+v, want the schedule paused", mi.Schedule)
	}
	quiet(t, got, 3*every, "an occurrence of a paused schedule after the leader change")
	checkFor(t, time.Minute, 20*time.Millisecond, func() error {
		_, err := cl.ResumeSchedule(ctx, ref)
		return err
	})
	next(t, got, "an occurrence after the resume")
}

// TestSchedule_EditInPlace checks SCHEDULE.EDIT through the real service:
// a new interval, payload, header and limit take effect on the next
// occurrence planned after the edit, never before the edit and never at a
// time delivered already, with the schedule's name, Delay-Id and count
// kept; a payload-only edit keeps the next time; bad values are 400s that
// change nothing.
func TestSchedule_EditInPlace(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ctx := context.Background()
	cl := api(h.nc)
	got := subscribe(t, h.nc, "sched.edit")
	ref := wire.MessageRef{Subject: "sched.edit", ID: "e"}
	schedule(t, h.nc, newMsg("sched.edit", "v1", "Delay-Every", "200ms", "Delay-Id", "e", "Delay-Limit", "100", "Delay-Catch-Up", "all", "X-V", "1"))
	seen := map[time.Time]bool{}
	first := next(t, got, "first occurrence")
	seen[occurrenceOf(t, first)] = true
	ackSync(t, h.nc, first.Msg, "")

	limit := uint64(50)
	edited := time.Now()
	mi, err := cl.EditSchedule(ctx, wire.ScheduleEditRequest{Subject: "sched.edit", ID: "e", Every: "300ms", Payload: []byte("v2"),
		Headers: map[string][]string{"X-V": {"2"}}, Limit: &limit})
	if err != nil {
		t.Fatalf("edit: %v", err)
	}
	if s := mi.Schedule; s == nil || s.Spec != "@every 300ms" || s.Limit != 50 || s.Name != "e" || mi.ID != "e" || s.Seq < 2 || s.CatchUp != "all" {
		t.Fatalf("edit answered %+v %+v", mi, mi.Schedule)
	}
	var v2 []time.Time
	for len(v2) < 2 {
		r := next(t, got, "an occurrence after the edit")
		occ := occurrenceOf(t, r)
		notEarly(t, r, occ)
		if seen[occ] {
			t.Fatalf("occurrence of %v delivered twice", occ)
		}
		seen[occ] = true
		if r.Header.Get(wire.HeaderID) != "e" {
			t.Fatalf("occurrence with Delay-Id %q", r.Header.Get(wire.HeaderID))
		}
		if string(r.Data) == "v2" {
			if r.Header.Get("X-V") != "2" || r.Header.Get(wire.HeaderSchedule) != "@every 300ms" || occ.Before(edited) {
				t.Fatalf("edited occurrence of %v (edit at %v) with headers %v", occ, edited, r.Header)
			}
			v2 = append(v2, occ)
		} else if len(v2) > 0 {
			t.Fatalf("an occurrence of the old schedule (%q) after one of the edited", r.Data)
		}
		ackSync(t, h.nc, r.Msg, "")
	}
	if d := v2[1].Sub(v2[0]); d != 300*time.Millisecond {
		t.Fatalf("edited occurrences %v apart, want 300ms", d)
	}

	before, err := cl.Get(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []wire.ScheduleEditRequest{
		{Subject: "sched.edit", ID: "e", Cron: "* * *"},
		{Subject: "sched.edit", ID: "e", Every: "1s", Cron: "@daily"},
		{Subject: "sched.edit", ID: "e", Zone: "Europe/Berlin"},
		{Subject: "sched.edit", ID: "e", Limit: func() *uint64 { n := uint64(1); return &n }()},
		{Subject: "sched.edit", ID: "e", Until: "2001-01-01T00:00:00Z"},
		{Subject: "sched.edit", ID: "e", CatchUp: "some"},
		{Subject: "sched.edit", ID: "e", Headers: map[string][]string{"Delay-Foo": {"x"}}},
	} {
		if _, err := cl.EditSchedule(ctx, bad); !errors.Is(err, wire.ErrBadRequest) {
			t.Errorf("edit %+v: %v, want a 400", bad, err)
		}
	}
	after, err := cl.Get(ctx, ref)
	if err != nil || after.Schedule.Spec != before.Schedule.Spec || after.Schedule.Limit != 50 || after.Schedule.CatchUp != "all" {
		t.Fatalf("after refused edits: %+v %v, want %+v", after, err, before)
	}

	// Pause, then a payload-only edit: the planned time stays, the pause
	// too.
	if _, err := cl.PauseSchedule(ctx, ref); err != nil {
		t.Fatal(err)
	}
	p, _ := cl.Get(ctx, ref)
	mi, err = cl.EditSchedule(ctx, wire.ScheduleEditRequest{Subject: "sched.edit", ID: "e", Payload: []byte{}})
	if err != nil || !mi.Schedule.Paused || mi.Schedule.Occurrence != p.Schedule.Occurrence || mi.Size != 0 {
		t.Fatalf("payload edit of a paused schedule: %+v %v, want it paused at %s with an empty payload", mi, err, p.Schedule.Occurrence)
	}
}
