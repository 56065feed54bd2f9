package bench

import (
	"testing"
	"time"
)

// TestRecurStats_MissedDoubledLateness checks the sums of the recurring
// run on made-up deliveries: planned times within the window, those
// missed, doubled by a second tag or by a delivery after the ACK, early
// and off the plan, and lateness over the first delivery of each.
func TestRecurStats_MissedDoubledLateness(t *testing.T) {
	s := int64(time.Second)
	ms := int64(time.Millisecond)
	first := []int64{10 * s, 10 * s}
	end := 13 * s // planned 10s, 11s, 12s for each
	ds := []recurDelivery{
		{sched: 0, planned: 10 * s, at: 10*s + 2*ms, id: "a"},
		{sched: 0, planned: 11 * s, at: 11*s + 4*ms, id: "b"},
		{sched: 0, planned: 11 * s, at: 11*s + 9*ms, id: "b2"}, // the same planned time under a second tag
		{sched: 0, planned: 12 * s, at: 12*s - 1*ms, id: "c"},  // early
		{sched: 1, planned: 10 * s, at: 10*s + 6*ms, id: "d"},
		{sched: 1, planned: 10 * s, at: 10*s + 30*s, id: "d"}, // again after its ACK
		{sched: 1, planned: 12*s + 5*ms, at: 12*s + 8*ms, id: "e"},
		// 11s and 12s of schedule 1 never arrive; 13s is after the window.
		{sched: 1, planned: 13 * s, at: 13*s + 1*ms, id: "f"},
	}
	r := recurStats(SystemDelay, first, s, end, ds)
	want := RecurLateness{System: SystemDelay, Planned: 6, Delivered: 4, Missed: 2, Doubled: 2, Early: 1, OffPlan: 1, Deliveries: 8}
	got := r
	got.P50Ms, got.P99Ms, got.MaxMs = 0, 0, 0
	if got != want {
		t.Fatalf("recurStats = %+v, want %+v", got, want)
	}
	// Lateness of 10s/a 2ms, 11s/b 4ms, 12s/c -1ms, 10s/d 6ms.
	if r.P50Ms != 4 || r.MaxMs != 6 {
		t.Fatalf("lateness p50 %v, max %v; want 4 and 6", r.P50Ms, r.MaxMs)
	}
}

// TestJSPlanned_Chain checks how JetStream's planned times are worked
// out: the first from the schedule's start, each later one from the
// Nats-Schedule-Next of the firing before it, so a firing the server
// skipped ahead over shows as missed, and a redelivery keeps its first
// planned time.
func TestJSPlanned_Chain(t *testing.T) {
	s := int64(time.Second)
	first := []int64{5 * s}
	ds := []recurDelivery{
		{sched: 0, at: 5*s + 300*int64(time.Millisecond), next: 6 * s, id: "1"},
		// Late past the next planned time: the server plans the one after
		// from now, so 7s is skipped.
		{sched: 0, at: 7*s + 600*int64(time.Millisecond), next: 9 * s, id: "2"},
		{sched: 0, at: 7*s + 700*int64(time.Millisecond), next: 9 * s, id: "2"},
		{sched: 0, at: 9 * s, next: 10 * s, id: "3"},
	}
	jsPlanned(first, ds)
	for i, want := range []int64{5 * s, 6 * s, 6 * s, 9 * s} {
		if ds[i].planned != want {
			t.Fatalf("delivery %d planned at %v, want %v", i, time.Duration(ds[i].planned), time.Duration(want))
		}
	}
	r := recurStats(SystemJS, first, s, 10*s, ds)
	if r.Planned != 5 || r.Delivered != 3 || r.Missed != 2 || r.Doubled != 1 || r.MaxMs != 1600 {
		t.Fatalf("recurStats = %+v, want 5 planned, 3 delivered, 2 missed (7s, 8s), 1 doubled, max 1600 ms", r)
	}
}
