package integration_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// nextEvent reads the next lifecycle event of kind, skipping others.
func (h *eventHarness) nextEvent(t *testing.T, kind string) (string, wire.Event) {
	t.Helper()
	for {
		r := next(t, h.events, "event "+kind)
		var e wire.Event
		if err := json.Unmarshal(r.Data, &e); err != nil {
			t.Fatalf("event on %s: %s: %v", r.Subject, r.Data, err)
		}
		if e.Kind == kind {
			return r.Subject, e
		}
	}
}

// TestEvents_RescheduledAndReplayed checks the rescheduled event of
// RESCHEDULE, FIRE and BULK.FIRE (the new tag and fire time, the previous
// fire time) and the replayed event of BULK.REPLAY (the new tag, the
// attempts the dead letter had, and "to" when it went elsewhere), each on
// $DELAY.EVENT.<kind>.<subject> with the documented body.
func TestEvents_RescheduledAndReplayed(t *testing.T) {
	h := newEventHarness(t, nil)
	s := schedule(t, h.nc, newMsg("ev.move", "x", "Delay", "1h", "Delay-Id", "mv"))
	var moved wire.RescheduleReply
	apiCall(t, h.nc, wire.VerbReschedule, wire.RescheduleRequest{Tag: s.Tag, Shift: "1h"}, &moved)
	subj, e := h.nextEvent(t, wire.EventRescheduled)
	if subj != wire.DefaultEventPrefix+".rescheduled.ev.move" || e.Tag != moved.Tag || e.FireAt != moved.FireAt ||
		e.PreviousFireAt != s.FireAtRaw || e.ID != "mv" || e.Subject != "ev.move" {
		t.Fatalf("rescheduled event on %s: %+v; want tag %s, fire_at %s, previous_fire_at %s", subj, e, moved.Tag, moved.FireAt, s.FireAtRaw)
	}
	limit := 10
	var rep wire.BulkReply
	apiCall(t, h.nc, wire.VerbBulk+".FIRE", wire.BulkRequest{Filter: wire.Filter{Subject: "ev.move"}, Limit: &limit}, &rep)
	if _, e = h.nextEvent(t, wire.EventRescheduled); e.PreviousFireAt != moved.FireAt || rep.Count != 1 || e.Tag != rep.Sample[0].Tag {
		t.Fatalf("rescheduled event of BULK.FIRE: %+v, reply %+v", e, rep)
	}

	deliveries := subscribe(t, h.nc, "ev.dead")
	d := schedule(t, h.nc, newMsg("ev.dead", "x"))
	ackSync(t, h.nc, next(t, deliveries, "delivery").Msg, "+TERM")
	h.nextEvent(t, wire.EventDead)
	apiCall(t, h.nc, wire.VerbBulk+".REPLAY", wire.BulkRequest{Filter: wire.Filter{Subject: "ev.dead"}, ReplayTo: "ev.again"}, &rep)
	subj, e = h.nextEvent(t, wire.EventReplayed)
	if subj != wire.DefaultEventPrefix+".replayed.ev.again" || rep.Count != 1 || e.Tag != rep.Sample[0].Tag || e.Tag == d.Tag ||
		e.To != "ev.again" || e.Attempt != 1 || e.Subject != "ev.again" || parseTime(t, e.FireAt).After(time.Now()) {
		t.Fatalf("replayed event on %s: %+v, reply %+v", subj, e, rep)
	}
}
