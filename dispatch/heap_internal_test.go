package dispatch

import (
	"math/rand/v2"
	"testing"
)

// TestMinHeap_RandomOps checks the timer heap against its contract through
// random schedules, reschedules and unschedules: every element's index is
// its place, each parent is no later than its children, and popping in
// order yields the keys sorted.
func TestMinHeap_RandomOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	var h flightHeap
	fs := waitingNowhere(200)
	check := func(step int) {
		t.Helper()
		for i, f := range h {
			if f.idx != i {
				t.Fatalf("step %d: element at %d has index %d", step, i, f.idx)
			}
			if p := (i - 1) / 2; i > 0 && h[p].deadline > f.deadline {
				t.Fatalf("step %d: parent %d (%d) after child %d (%d)", step, p, h[p].deadline, i, f.deadline)
			}
		}
		in := 0
		for _, f := range fs {
			if f.idx >= 0 {
				in++
			}
		}
		if in != len(h) {
			t.Fatalf("step %d: %d elements say they are in a heap of %d", step, in, len(h))
		}
	}
	for step := range 20_000 {
		f := fs[rng.IntN(len(fs))]
		if rng.IntN(3) == 0 {
			h.unschedule(f)
		} else {
			h.schedule(f, rng.Int64N(50)) // few keys: many ties
		}
		check(step)
	}
	last := int64(-1)
	for len(h) > 0 {
		f := h[0]
		h.unschedule(f)
		if f.deadline < last || f.idx != -1 {
			t.Fatalf("popped %d (index %d) after %d", f.deadline, f.idx, last)
		}
		last = f.deadline
		check(-1)
	}
}

// TestFlightTimers_RandomOps checks the flight timers against a sorted
// list through random schedules, reschedules and unschedules, most of
// them in deadline order as deliveries make them: the flight first is
// always one of the earliest, each flight is in one of queue and heap
// exactly when it waits, and draining takes them in deadline order.
func TestFlightTimers_RandomOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	var ts flightTimers
	fs := waitingNowhere(300)
	waiting := make(map[*flight]bool)
	check := func(step int) {
		t.Helper()
		if ts.len() != len(waiting) {
			t.Fatalf("step %d: %d waiting, want %d", step, ts.len(), len(waiting))
		}
		var earliest int64 = never
		for f := range waiting {
			earliest = min(earliest, f.deadline)
		}
		if f := ts.first(); (f == nil) != (len(waiting) == 0) || f != nil && f.deadline != earliest {
			t.Fatalf("step %d: first is %v, want deadline %d", step, f, earliest)
		}
		last := int64(-1 << 62)
		for i, f := range ts.queue[ts.head:] {
			if f == nil {
				continue
			}
			if f.queued != ts.head+i+1 || f.idx >= 0 || f.deadline < last {
				t.Fatalf("step %d: queue slot %d holds queued %d, heap index %d, deadline %d after %d", step, ts.head+i, f.queued, f.idx, f.deadline, last)
			}
			last = f.deadline
		}
		for _, f := range fs {
			if f.waiting() != waiting[f] {
				t.Fatalf("step %d: waiting %v, want %v", step, f.waiting(), waiting[f])
			}
		}
	}
	now := int64(0)
	for step := range 50_000 {
		f := fs[rng.IntN(len(fs))]
		switch r := rng.IntN(10); {
		case r < 4:
			ts.unschedule(f)
			delete(waiting, f)
		case r < 8: // a delivery: now plus the ack wait
			now += rng.Int64N(3)
			ts.schedule(f, now+100)
			waiting[f] = true
		default: // a back-off or a NAK's delay: anywhere
			ts.schedule(f, now+rng.Int64N(200))
			waiting[f] = true
		}
		check(step)
	}
	last := int64(-1 << 62)
	for f := ts.first(); f != nil; f = ts.first() {
		if f.deadline < last {
			t.Fatalf("drained %d after %d", f.deadline, last)
		}
		last = f.deadline
		ts.unschedule(f)
		delete(waiting, f)
		check(-1)
	}
}

// waitingNowhere is n flights in no heap and no queue.
func waitingNowhere(n int) []*flight {
	fs := make([]*flight, n)
	for i := range fs {
		fs[i] = &flight{idx: -1}
	}
	return fs
}
