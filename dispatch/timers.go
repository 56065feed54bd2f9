package dispatch

// flightTimers orders the flights waiting for a deadline, earliest first.
//
// Most deadlines are a delivery's send time plus the one ack wait, so they
// arrive in order, and most flights leave in about that order too, at
// their ACK. Those wait in a queue: joining is an append and leaving
// clears a slot, where a heap the size of a full window moved each ACKed
// flight down a dozen levels (4% of the serve process in the end-to-end
// bench). A deadline earlier than the queue's last (a retry's back-off, a
// NAK's delay) goes to a heap beside it.
type flightTimers struct {
	// queue holds flights with deadlines in order, nil where one left;
	// queue[:head] is all nil, and queue[head] is a flight when live > 0.
	queue []*flight
	head  int
	live  int
	// last is the deadline of the flight appended last: a later one may
	// join the queue without breaking its order.
	last   int64
	others flightHeap
}

// len is the number of flights waiting.
func (ts *flightTimers) len() int { return ts.live + len(ts.others) }

// first is the flight with the earliest deadline, nil when none waits.
func (ts *flightTimers) first() *flight {
	var q *flight
	if ts.live > 0 {
		q = ts.queue[ts.head]
	}
	switch {
	case len(ts.others) == 0:
		return q
	case q == nil || ts.others[0].deadline < q.deadline:
		return ts.others[0]
	}
	return q
}

// schedule sets f's deadline to at and makes it wait for it, wherever it
// waited before.
func (ts *flightTimers) schedule(f *flight, at int64) {
	if f.queued > 0 {
		ts.dequeue(f)
	}
	if ts.live == 0 || at >= ts.last {
		ts.others.unschedule(f)
		f.deadline = at
		ts.queue = append(ts.queue, f)
		f.queued = len(ts.queue)
		ts.live++
		ts.last = at
		return
	}
	ts.others.schedule(f, at)
}

// unschedule stops f waiting, if it did.
func (ts *flightTimers) unschedule(f *flight) {
	if f.queued > 0 {
		ts.dequeue(f)
		return
	}
	ts.others.unschedule(f)
}

// waiting reports whether f waits for a deadline.
func (f *flight) waiting() bool { return f.queued > 0 || f.idx >= 0 }

// dequeue takes f, which is in the queue, out of it. The slots it frees
// are given back when the queue empties, or in one copy once they
// outnumber the flights left, so each flight costs O(1) on average.
func (ts *flightTimers) dequeue(f *flight) {
	i := f.queued - 1
	ts.queue[i] = nil
	f.queued = 0
	ts.live--
	if ts.live == 0 {
		clear(ts.queue[ts.head:])
		ts.queue, ts.head = ts.queue[:0], 0
		return
	}
	for ts.queue[ts.head] == nil {
		ts.head++
	}
	if gone := len(ts.queue) - ts.live; gone > 64 && gone > ts.live {
		ts.compact()
	}
}

// compact moves the queue's flights to its front, in order.
func (ts *flightTimers) compact() {
	n := 0
	for _, f := range ts.queue[ts.head:] {
		if f != nil {
			ts.queue[n] = f
			n++
			f.queued = n
		}
	}
	clear(ts.queue[n:])
	ts.queue, ts.head = ts.queue[:n], 0
}

// each calls fn for every waiting flight, in no order; fn must not
// schedule or unschedule.
func (ts *flightTimers) each(fn func(*flight)) {
	for _, f := range ts.queue[ts.head:] {
		if f != nil {
			fn(f)
		}
	}
	for _, f := range ts.others {
		fn(f)
	}
}

// capacity is what the two hold room for; release lets their arrays go
// when nothing waits and they are larger than keep.
func (ts *flightTimers) capacity() int { return cap(ts.queue) + cap(ts.others) }

func (ts *flightTimers) release(keep int) {
	if ts.len() != 0 {
		return
	}
	if cap(ts.queue) > keep {
		ts.queue, ts.head = nil, 0
	}
	if cap(ts.others) > keep {
		ts.others = nil
	}
}
