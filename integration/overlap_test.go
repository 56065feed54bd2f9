package integration_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestRecurring_OverlapSkip_ConsumerNeverAnswers checks Delay-Overlap
// skip with a consumer that does not answer its first occurrence: no
// other occurrence goes out while it is unanswered, each one whose time
// comes is counted as skipped (GET shows it) and told as a skipped event
// with reason overlap; once the consumer ACKs it, the schedule goes on.
func TestRecurring_OverlapSkip_ConsumerNeverAnswers(t *testing.T) {
	t.Parallel()
	const every = 200 * time.Millisecond
	h := newEventHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = time.Minute })
	skippedEvents := subscribe(t, h.nc, wire.DefaultEventPrefix+"."+wire.EventSkipped+".>")
	got := subscribe(t, h.nc, "overlap.skip")
	schedule(t, h.nc, newMsg("overlap.skip", "x", "Delay-Every", every.String(), "Delay-Id", "s", "Delay-Overlap", "skip"))
	first := next(t, got, "first occurrence")
	for i := range 2 {
		e := next(t, skippedEvents, "a skipped event")
		var ev wire.Event
		if err := json.Unmarshal(e.Data, &ev); err != nil || ev.Subject != "overlap.skip" || ev.ID != "s" || ev.Reason != "overlap" {
			t.Fatalf("skipped event %d: %s (%v)", i+1, e.Data, err)
		}
	}
	if len(got) > 0 {
		t.Fatalf("an occurrence went out while the first is unanswered: %v", (<-got).Header)
	}
	mi, err := api(h.nc).Get(context.Background(), wire.MessageRef{Subject: "overlap.skip", ID: "s"})
	if err != nil || mi.Schedule.Skipped < 2 || mi.Schedule.Overlap != "skip" || mi.Schedule.Fired != 1 {
		t.Fatalf("GET while the first is unanswered: %+v %v, want 2 skipped or more, 1 fired", mi.Schedule, err)
	}
	answered := time.Now()
	ackSync(t, h.nc, first.Msg, "")
	r := next(t, got, "an occurrence after the answer")
	if occ := occurrenceOf(t, r); !occ.After(answered.Add(-every)) {
		t.Fatalf("after the answer at %v went the occurrence of %v, one that was skipped", answered, occ)
	}
	ackSync(t, h.nc, r.Msg, "")
}

// TestRecurring_OverlapBufferOne_ConsumerAnswersLate checks Delay-Overlap
// buffer-one with a consumer that answers its first occurrence late: the
// second waits, unsent, until the first is ACKed and then goes out with
// its own planned time, and only one waits: the one after it is planned
// from then on, as Delay-Catch-Up one says, none of them skipped.
func TestRecurring_OverlapBufferOne_ConsumerAnswersLate(t *testing.T) {
	t.Parallel()
	const every = 200 * time.Millisecond
	h := newHarness(t, func(c *bridge.Config) { c.Delivery.AckWait = time.Minute })
	got := subscribe(t, h.nc, "overlap.buffer")
	rep := schedule(t, h.nc, newMsg("overlap.buffer", "x", "Delay-Every", every.String(), "Delay-Id", "b", "Delay-Overlap", "buffer-one"))
	first := next(t, got, "first occurrence")
	quiet(t, got, 3*every, "an occurrence while the first is unanswered")
	answered := time.Now()
	ackSync(t, h.nc, first.Msg, "")
	second := next(t, got, "the occurrence that waited")
	if occ := occurrenceOf(t, second); !occ.Equal(rep.FireAt.Add(every)) {
		t.Fatalf("the occurrence that waited is of %v, want the second planned time %v", occ, rep.FireAt.Add(every))
	}
	if second.at.Before(answered) {
		t.Fatalf("the waiting occurrence went out at %v, before the first was answered at %v", second.at, answered)
	}
	ackSync(t, h.nc, second.Msg, "")
	third := next(t, got, "the occurrence after the one that waited")
	if occ := occurrenceOf(t, third); !occ.After(answered) {
		t.Fatalf("after the one that waited came the occurrence of %v, before the answer at %v", occ, answered)
	}
	ackSync(t, h.nc, third.Msg, "")
	mi, err := api(h.nc).Get(context.Background(), wire.MessageRef{Subject: "overlap.buffer", ID: "b"})
	if err != nil || mi.Schedule.Skipped != 0 || mi.Schedule.Overlap != "buffer-one" {
		t.Fatalf("GET: %+v %v, want none skipped", mi.Schedule, err)
	}
}
