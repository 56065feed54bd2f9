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
	fs := make([]*flight, 200)
	for i := range fs {
		fs[i] = &flight{idx: -1}
	}
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
