package core

import (
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
)

// handOver is a hand-over of n requests of one message each.
func handOver(n int) []scheduleRequest {
	rs := make([]scheduleRequest, n)
	for i := range rs {
		rs[i] = scheduleRequest{once: delaystore.Once{Msg: &delaystore.StoredMessage{Subject: "s"}}, size: 1}
	}
	return rs
}

// pacedWriter is a writer with only its hand-overs, holding the given
// ones, for commitPace.await.
func pacedWriter(waiting ...[]scheduleRequest) *writer {
	w := &writer{reqs: make(chan []scheduleRequest, len(waiting)+1)}
	for _, rs := range waiting {
		w.reqs <- rs
	}
	return w
}

// justCommitted is when a test's last commit ended: an hour ahead, so
// that however long a loaded machine takes to reach await, the writer
// counts itself under load (busyWithin is 1 ms).
var justCommitted = time.Now().Add(time.Hour)

// Under load, a batch from fewer hand-overs than the last commit's takes
// the hand-overs that come before it is committed, up to as many as the
// last commit had: a router's batch or a synchronous publisher's next
// message joins the commit it would have missed by a few µs.
func TestCommitPace_Await_TakesTheHandOversExpected(t *testing.T) {
	w := pacedWriter(handOver(2), handOver(3), handOver(1))
	b := batchFill{max: 100, maxBytes: 1 << 20}
	b.take(handOver(1))
	p := commitPace{ended: justCommitted, handovers: 3}
	carry, handovers := p.await(w, &b, 1)
	if len(carry) != 0 || handovers != 3 || len(b.reqs) != 6 {
		t.Fatalf("carry %d, hand-overs %d, batch %d; want 0, 3 and 6", len(carry), handovers, len(b.reqs))
	}
	if len(w.reqs) != 1 {
		t.Fatalf("%d hand-overs left waiting, want the one past the last commit's count", len(w.reqs))
	}
}

// The writer does not wait where waiting buys nothing, or is not
// expected: it leaves the hand-over already queued for the next batch.
func TestCommitPace_Await_DoesNotWait(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pace      commitPace
		inBatch   int
		handovers int
	}{
		{"one caller alone, as its last commit", commitPace{ended: justCommitted, handovers: 1}, 1, 1},
		{"as many hand-overs as the last commit", commitPace{ended: justCommitted, handovers: 2}, 2, 2},
		{"idle since its last commit", commitPace{ended: time.Now().Add(-10 * busyWithin), handovers: 5}, 1, 1},
		{"a batch large enough", commitPace{ended: justCommitted, handovers: 5}, lingerUnder, 1},
		{"never committed", commitPace{}, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := pacedWriter(handOver(1))
			b := batchFill{max: 100, maxBytes: 1 << 20}
			b.take(handOver(tc.inBatch))
			carry, handovers := tc.pace.await(w, &b, tc.handovers)
			if len(carry) != 0 || handovers != tc.handovers || len(b.reqs) != tc.inBatch || len(w.reqs) != 1 {
				t.Fatalf("carry %d, hand-overs %d, batch %d, queued %d; want it to take nothing", len(carry), handovers, len(b.reqs), len(w.reqs))
			}
		})
	}
}

// What does not fit the batch comes back as carry, for the next.
func TestCommitPace_Await_CarriesWhatDoesNotFit(t *testing.T) {
	w := pacedWriter(handOver(5))
	b := batchFill{max: 3, maxBytes: 1 << 20}
	b.take(handOver(1))
	p := commitPace{ended: justCommitted, handovers: 4}
	carry, handovers := p.await(w, &b, 1)
	if len(carry) != 3 || handovers != 2 || len(b.reqs) != 3 {
		t.Fatalf("carry %d, hand-overs %d, batch %d; want 3, 2 and 3", len(carry), handovers, len(b.reqs))
	}
}

// The wait is bounded: with nothing more handed over, await returns.
func TestCommitPace_Await_Bounded(t *testing.T) {
	w := pacedWriter()
	b := batchFill{max: 100, maxBytes: 1 << 20}
	b.take(handOver(1))
	p := commitPace{ended: justCommitted, handovers: 4}
	if carry, handovers := p.await(w, &b, 1); len(carry) != 0 || handovers != 1 {
		t.Fatalf("carry %d, hand-overs %d; want 0 and 1", len(carry), handovers)
	}
}

// A hand-over queued already is taken even when the linger ran out
// first: a writer descheduled past its timer on a loaded machine took
// either, by chance, and left the hand-over to a commit of its own.
func TestCommitPace_Next_QueuedBeforeTheTimer(t *testing.T) {
	for range 100 {
		w := pacedWriter(handOver(1))
		p := commitPace{timer: time.NewTimer(0)} // run out already
		rs, ok, waited := p.next(w)
		if waited || !ok || len(rs) != 1 {
			t.Fatalf("next with a hand-over queued and the linger run out: %d requests, ok %v, waited %v; want the hand-over", len(rs), ok, waited)
		}
	}
	p := commitPace{timer: time.NewTimer(0)}
	if _, _, waited := p.next(pacedWriter()); !waited {
		t.Fatal("next with nothing queued and the linger run out did not report the wait over")
	}
}
