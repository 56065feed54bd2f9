package integration_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// reschedule sends RESCHEDULE and fails tb unless the message moved.
func reschedule(tb testing.TB, h *harness, req wire.RescheduleRequest) wire.RescheduleReply {
	tb.Helper()
	var out wire.RescheduleReply
	apiCall(tb, h.nc, wire.VerbReschedule, req, &out)
	return out
}

// fire sends FIRE and fails tb unless the message is due now.
func fire(tb testing.TB, h *harness, ref wire.MessageRef) wire.RescheduleReply {
	tb.Helper()
	var out wire.RescheduleReply
	apiCall(tb, h.nc, wire.VerbFire, ref, &out)
	return out
}

// TestReschedule_NeverEarly_KeepsOrder checks that RESCHEDULE (at, shift,
// a time past) and FIRE (by tag, by subject and id) deliver each message
// at its new fire time and never before it, under the tag they answer,
// and that messages moved to the same time go out in publish order, as
// per-subject order requires.
func TestReschedule_NeverEarly_KeepsOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	got := subscribe(t, h.nc, "move.>")
	msgs := scheduleMany(t, h.nc, []*nats.Msg{
		newMsg("move.order", "first", "Delay", "1h"),
		newMsg("move.order", "second", "Delay", "1h"),
		newMsg("move.order", "third", "Delay", "1h", "Delay-Id", "third"),
		newMsg("move.shift", "shifted", "Delay", "1h"),
		newMsg("move.past", "past", "Delay", "1h"),
	})
	// Moved in reverse order to one time, they still go out in publish order.
	at := time.Now().Add(400 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	second := reschedule(t, h, wire.RescheduleRequest{Tag: msgs[1].Tag, At: at})
	first := reschedule(t, h, wire.RescheduleRequest{Tag: msgs[0].Tag, At: at})
	if first.FireAt != second.FireAt || first.Tag == msgs[0].Tag {
		t.Fatalf("moved to %s and %s, tags %s (was %s); want one time and a new tag", first.FireAt, second.FireAt, first.Tag, msgs[0].Tag)
	}
	fireAt := parseTime(t, first.FireAt)
	for _, want := range []wire.RescheduleReply{first, second} {
		r := next(t, got, "moved delivery")
		notEarly(t, r, fireAt)
		if tag := r.Header.Get(wire.HeaderTag); tag != want.Tag {
			t.Fatalf("delivered %s %q, want %s: publish order among equal fire times", tag, r.Data, want.Tag)
		}
		ackSync(t, h.nc, r.Msg, "+ACK")
	}

	before := time.Now()
	fired := fire(t, h, wire.MessageRef{Subject: "move.order", ID: "third"})
	r := next(t, got, "fired delivery")
	if tag := r.Header.Get(wire.HeaderTag); tag != fired.Tag || string(r.Data) != "third" {
		t.Fatalf("delivered %s %q, want the fired %s", tag, r.Data, fired.Tag)
	}
	notEarly(t, r, before)
	ackSync(t, h.nc, r.Msg, "+ACK")

	shifted := reschedule(t, h, wire.RescheduleRequest{Tag: msgs[3].Tag, Shift: "-59m59.5s"})
	r = next(t, got, "shifted delivery")
	notEarly(t, r, parseTime(t, shifted.FireAt))
	if string(r.Data) != "shifted" || parseTime(t, shifted.FireAt).Before(msgs[3].FireAt.Add(-time.Hour)) {
		t.Fatalf("shifted delivery %q at fire time %s, want shifted at %s less 59m59.5s", r.Data, shifted.FireAt, msgs[3].FireAtRaw)
	}
	ackSync(t, h.nc, r.Msg, "+ACK")

	before = time.Now().Truncate(time.Millisecond)
	past := reschedule(t, h, wire.RescheduleRequest{Tag: msgs[4].Tag, At: "2001-01-01T00:00:00Z"})
	if parseTime(t, past.FireAt).Before(before) {
		t.Fatalf("a time past moved the message to %s, before now (%s): want due now", past.FireAt, before)
	}
	r = next(t, got, "delivery moved to the past")
	notEarly(t, r, before)
	ackSync(t, h.nc, r.Msg, "+ACK")
	quiet(t, got, 200*time.Millisecond, "a second delivery")
	waitPending(t, h.nc, 0)
}

// TestReschedule_Refused checks that RESCHEDULE and FIRE refuse, changing
// nothing, a message in flight (409: its answer decides it), an
// occurrence of a recurring schedule (409), one that is not pending
// (404), also the tag a moved message had before it moved, and bad
// requests (400).
func TestReschedule_Refused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = time.Minute })
	got := subscribe(t, h.nc, "refuse.>")
	now := schedule(t, h.nc, newMsg("refuse.flight", "x"))
	r := next(t, got, "delivery")
	apiError(t, h.nc, wire.VerbFire, wire.MessageRef{Tag: now.Tag}, 409, "in flight")
	apiError(t, h.nc, wire.VerbReschedule, wire.RescheduleRequest{Tag: now.Tag, Shift: "1h"}, 409, "in flight")
	ackSync(t, h.nc, r.Msg, "+ACK")
	apiError(t, h.nc, wire.VerbFire, wire.MessageRef{Tag: now.Tag}, 404, "no pending message")

	every := schedule(t, h.nc, newMsg("refuse.every", "x", "Delay-Every", "1h", "Delay", "1h"))
	apiError(t, h.nc, wire.VerbFire, wire.MessageRef{Tag: every.Tag}, 409, "recurring schedule")

	later := schedule(t, h.nc, newMsg("refuse.later", "x", "Delay", "1h"))
	for _, c := range []struct {
		req  wire.RescheduleRequest
		want string
	}{
		{wire.RescheduleRequest{Tag: later.Tag}, `give one of "at"`},
		{wire.RescheduleRequest{Tag: later.Tag, At: "2030-01-01T00:00:00Z", Shift: "1h"}, `give one of "at"`},
		{wire.RescheduleRequest{Tag: later.Tag, Shift: "soon"}, `"shift" "soon"`},
		{wire.RescheduleRequest{Tag: later.Tag, At: "tomorrow"}, `"at" "tomorrow"`},
		{wire.RescheduleRequest{Tag: later.Tag, Shift: "2562047h"}, "latest time"},
		{wire.RescheduleRequest{Tag: "zz", Shift: "1h"}, "tag"},
	} {
		apiError(t, h.nc, wire.VerbReschedule, c.req, 400, c.want)
	}
	var mi wire.MessageInfo
	apiCall(t, h.nc, wire.VerbGet, wire.MessageRef{Tag: later.Tag}, &mi)
	if mi.FireAt != later.FireAtRaw {
		t.Fatalf("after refused requests the message fires at %s, want %s unchanged", mi.FireAt, later.FireAtRaw)
	}
	quiet(t, got, 100*time.Millisecond, "a delivery of a refused message")

	// Moved an hour on, the message has a new tag; its old one names
	// nothing pending: 404, not 409 as if it were in flight.
	moved := reschedule(t, h, wire.RescheduleRequest{Tag: later.Tag, Shift: "1h"})
	if moved.Tag == later.Tag {
		t.Fatalf("moved an hour on, the message kept its tag %s", later.Tag)
	}
	apiError(t, h.nc, wire.VerbFire, wire.MessageRef{Tag: later.Tag}, 404, "no pending message")
	apiError(t, h.nc, wire.VerbReschedule, wire.RescheduleRequest{Tag: later.Tag, Shift: "1h"}, 404, "no pending message")
	fired := fire(t, h, wire.MessageRef{Tag: moved.Tag})
	if r := next(t, got, "the moved message, fired"); r.Header.Get(wire.HeaderTag) != fired.Tag {
		t.Fatalf("delivered %s, want the moved message, fired, %s", r.Header.Get(wire.HeaderTag), fired.Tag)
	}
}
