package dispatch

import (
	"context"
	"sync"

	"github.com/natsdelay/natsdelay/keys"
)

// flushQueue is the passes whose deliveries wait for their flush, which
// the flusher goroutine (flushLoop) does while the next passes go on.
type flushQueue struct {
	sync.Mutex
	cond    *sync.Cond
	batches []flushBatch
	// unflushed counts the deliveries queued or being flushed; a pass
	// waits while it is at PassLimit, so a flush that hangs holds up
	// delivery as it did when every pass waited for its own.
	unflushed int
	stopped   bool // run has returned: flush what is queued, then stop
	// For Health: when the flush under way began (0 if none), when
	// the last one succeeded (or Start), and the last one's error and
	// when it failed.
	busySince int64
	lastOK    int64
	lastErr   error
	lastFail  int64
}

// queue hands b to the flusher, waiting while limit deliveries already
// wait for a flush.
func (q *flushQueue) queue(b flushBatch, limit int) {
	q.Lock()
	for q.unflushed >= limit {
		q.cond.Wait()
	}
	q.batches = append(q.batches, b)
	q.unflushed += len(b.sent)
	q.Unlock()
	q.cond.Broadcast()
}

// stop tells the flusher that no more batches come.
func (q *flushQueue) stop() {
	q.Lock()
	q.stopped = true
	q.Unlock()
	q.cond.Broadcast()
}

// take waits for batches and takes them all, noting that their flush
// begins at now(); none once stopped with nothing left.
func (q *flushQueue) take(now func() int64) []flushBatch {
	q.Lock()
	defer q.Unlock()
	for len(q.batches) == 0 && !q.stopped {
		q.cond.Wait()
	}
	batches := q.batches
	q.batches = nil
	if len(batches) > 0 {
		q.busySince = now()
	}
	return batches
}

// flushed notes that the flush of n deliveries ended at now with err, and
// lets passes waiting for room in the queue go on.
func (q *flushQueue) flushed(n int, err error, now int64) {
	q.Lock()
	q.unflushed -= n
	q.busySince = 0
	if err == nil {
		q.lastOK, q.lastErr = now, nil
	} else {
		q.lastErr, q.lastFail = err, now
	}
	q.Unlock()
	q.cond.Broadcast()
}

// queueFlush hands b to the flusher, waiting while PassLimit deliveries
// already wait for a flush.
func (d *Dispatcher) queueFlush(b flushBatch) { d.flushing.queue(b, d.cfg.PassLimit) }

// stopFlushing tells the flusher that no more batches come.
func (d *Dispatcher) stopFlushing() { d.flushing.stop() }

// flushLoop flushes whatever batches wait, in one round trip for all of
// them, and settles them, until run has stopped and nothing is left.
func (d *Dispatcher) flushLoop() {
	var sc settleScratch
	for {
		batches := d.flushing.take(d.nowNs)
		if len(batches) == 0 {
			return // stopped, and everything is settled
		}
		// One marker covers every batch taken: each was queued after
		// its deliveries were published, and the marker goes out after.
		ctx, cancel := context.WithTimeout(context.Background(), d.cfg.FlushTimeout)
		err := d.pub.Flush(ctx)
		cancel()
		n := 0
		for _, b := range batches {
			d.settleFlushed(b, err, &sc)
			n += len(b.sent)
		}
		d.flushing.flushed(n, err, d.nowNs())
		d.signal() // probes were put back; flights may have been forgotten
	}
}

// settleScratch is what settleFlushed collects of a pass, kept by
// flushLoop from one pass to the next: made per pass, the lists of
// deliveries reached and counts to write were 3.7% of what the
// end-to-end bench allocated in serve.
type settleScratch struct {
	settle           []keys.Key
	updates, reached []outgoing
	terms            []*flight
}

// settleFlushed finishes a pass once its flush returned err: it settles
// what needs no ACK, records attempt counts, settles +TERMs that arrived
// during the pass, and puts probed topics back in the due heap. It
// collects in sc, which it leaves empty.
func (d *Dispatcher) settleFlushed(b flushBatch, err error, sc *settleScratch) {
	settle, updates, reached, terms := sc.settle[:0], sc.updates[:0], sc.reached[:0], sc.terms[:0]
	defer func() {
		sc.settle, sc.updates, sc.reached, sc.terms = emptied(settle), emptied(updates), emptied(reached), emptied(terms)
	}()
	now := d.nowNs()
	d.mu.Lock()
	for _, o := range b.sent {
		f := o.f
		// Counted whatever became of its flight since: an ACK may
		// have settled it before this flush came back.
		if err == nil && f.lostPass != b.pass && !(f.pass == b.pass && f.term != nil && f.bounced) {
			reached = append(reached, o)
		}
		if f.pass != b.pass {
			continue // delivered again since
		}
		if f.term != nil {
			// TERMed during the pass: this delivery counts unless it
			// bounced or the flush failed. Before the check below,
			// so the TERM is answered even if its flight is gone.
			if !f.bounced && err == nil {
				f.counted = f.attempt
			}
			terms = append(terms, f)
			continue
		}
		if d.mu.flights.byKey[f.key] != f {
			continue // bounced (no subscriber), replaced, or settled
		}
		if err != nil {
			// Unknown whether it went out: deliver again, uncounted.
			if f.state == stateSent {
				d.unsendLocked(f)
				d.mu.subjects.block(f.topic, now)
			}
			continue
		}
		if f.ackNone && f.state == stateSent {
			d.mu.flights.settling(f)
			settle = append(settle, f.key)
			continue
		}
		f.counted = f.attempt
		if f.state == stateSettling {
			// NB: its delete is queued or committed (an ACK, a cancel,
			// expiry) and its flight not yet forgotten. Writing its count
			// would read it under the write lock only to find it gone,
			// and keep the message in the deleter's queue for the
			// AttemptWriteDelay until then: after a burst ACKed as fast
			// as it went out, that was most of the messages of the
			// burst's last second.
			continue
		}
		o.msg.Attempt = f.attempt
		updates = append(updates, o)
	}
	d.mu.subjects.closeProbes(b.probed, b.pass, err, now)
	d.mu.Unlock()
	d.countReached(reached)
	for _, f := range terms {
		d.deadLetter(f.key, nil, f.counted, f.term.reason, f.term.answer, f.term.done)
	}
	if err != nil {
		d.log.Warn("flushing deliveries", "err", err, "deliveries", len(b.sent))
		return
	}
	for _, k := range settle {
		d.del.delete(k, nil)
	}
	for _, o := range updates {
		d.del.update(o.f.key, o.msg)
	}
}

// countReached counts deliveries that reached a subscriber, and tells the
// observer.
func (d *Dispatcher) countReached(reached []outgoing) {
	obs := d.cfg.Observer
	for _, o := range reached {
		if o.attempt > 1 {
			d.stats.redelivered.Add(1)
		} else {
			d.stats.delivered.Add(1)
		}
		if obs != nil {
			obs.Delivered(o.msg, o.attempt, o.lateness, o.held)
		}
		if lc := d.cfg.Lifecycle; lc != nil {
			lc.Happened(LifecycleEvent{Kind: Delivered, Key: o.f.key, Subject: o.msg.Subject, ID: o.msg.ClientId, FireAtNs: o.msg.FireAtNs,
				Attempt: o.attempt, AtNs: o.msg.FireAtNs + int64(o.lateness), TraceID: o.msg.TraceID()})
		}
	}
}
