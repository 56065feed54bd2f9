package core

import (
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/delaystore"
)

// handOver is a hand-over of n requests of one message each: a single
// one, as ScheduleOnce hands over, when n is 1.
func handOver(n int) handover {
	rs := make([]scheduleRequest, n)
	for i := range rs {
		rs[i] = scheduleRequest{once: delaystore.Once{Msg: &delaystore.StoredMessage{Subject: "s"}}, size: 1}
	}
	if n == 1 {
		return handover{one: rs[0], single: true}
	}
	return handover{many: rs}
}

// pacedWriter is a writer with only its hand-overs, holding the given
// ones, for commitPace.await.
func pacedWriter(waiting ...handover) *writer {
	w := &writer{reqs: make(chan handover, len(waiting)+1)}
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
	if carry.len() != 0 || handovers != 3 || len(b.reqs) != 6 {
		t.Fatalf("carry %d, hand-overs %d, batch %d; want 0, 3 and 6", carry.len(), handovers, len(b.reqs))
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
			if carry.len() != 0 || handovers != tc.handovers || len(b.reqs) != tc.inBatch || len(w.reqs) != 1 {
				t.Fatalf("carry %d, hand-overs %d, batch %d, queued %d; want it to take nothing", carry.len(), handovers, len(b.reqs), len(w.reqs))
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
	if carry.len() != 3 || handovers != 2 || len(b.reqs) != 3 {
		t.Fatalf("carry %d, hand-overs %d, batch %d; want 3, 2 and 3", carry.len(), handovers, len(b.reqs))
	}
}

// The wait is bounded: with nothing more handed over, await returns.
func TestCommitPace_Await_Bounded(t *testing.T) {
	w := pacedWriter()
	b := batchFill{max: 100, maxBytes: 1 << 20}
	b.take(handOver(1))
	p := commitPace{ended: justCommitted, handovers: 4}
	if carry, handovers := p.await(w, &b, 1); carry.len() != 0 || handovers != 1 {
		t.Fatalf("carry %d, hand-overs %d; want 0 and 1", carry.len(), handovers)
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
		if waited || !ok || rs.len() != 1 {
			t.Fatalf("next with a hand-over queued and the linger run out: %d requests, ok %v, waited %v; want the hand-over", rs.len(), ok, waited)
		}
	}
	p := commitPace{timer: time.NewTimer(0)}
	if _, _, waited := p.next(pacedWriter()); !waited {
		t.Fatal("next with nothing queued and the linger run out did not report the wait over")
	}
}

// A request handed over alone that does not fit the batch is carried
// whole, and one that fits leaves nothing to carry.
func TestBatchFill_Take_SingleRequest(t *testing.T) {
	b := batchFill{max: 2, maxBytes: 1 << 20}
	if carry := b.take(handOver(2)); !carry.empty() {
		t.Fatalf("carry %d from a batch with room for 2, want none", carry.len())
	}
	if carry := b.take(handOver(1)); carry.len() != 1 || !carry.single || len(b.reqs) != 2 {
		t.Fatalf("a full batch took a single request: carry %d (single %v), batch %d; want it carried whole", carry.len(), carry.single, len(b.reqs))
	}
	b = batchFill{max: 2, maxBytes: 1 << 20}
	if carry := b.take(handOver(1)); !carry.empty() || len(b.reqs) != 1 {
		t.Fatalf("an empty batch left carry %d and holds %d, want the request taken", carry.len(), len(b.reqs))
	}
}
