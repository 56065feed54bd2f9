package dispatch

import (
	"bytes"
	"math"
	"time"

	"natsdelay/keys"
)

// dueFrontier is how far the due index has been read: every entry up to
// it, in due order, was handed to its topic, which was put in the due
// heap. Dispatcher.mu guards it.
type dueFrontier struct {
	// at is the last entry read; nil before the first read.
	at *keys.Key
	// next is when the first entry after at becomes scannable, never if
	// none is known.
	next int64
	// scannedUpTo is the bucket below which passes have scanned: a
	// message committed below it goes to its topic, one at or above it to
	// the frontier (see Notify).
	scannedUpTo uint64
}

// from is where the next read starts: a copy of at, nil for the start.
func (fr *dueFrontier) from() *keys.Key {
	if fr.at == nil {
		return nil
	}
	k := *fr.at
	return &k
}

// lower makes the frontier read again by at, and reports whether that is
// sooner than it would have.
func (fr *dueFrontier) lower(at int64) bool {
	if at >= fr.next {
		return false
	}
	fr.next = at
	return true
}

// moved records a read that ended at last (nil: nothing read), with the
// next entry scannable at next.
func (fr *dueFrontier) moved(last *keys.Key, next int64) {
	if last != nil {
		k := *last
		fr.at = &k
	}
	fr.next = min(fr.next, next)
}

// frontierCap bounds the topics in the due heap that the due index may
// add to: past it, the frontier waits for the heap to drain, so a backlog
// of many subjects due at once (after an outage, say) is taken a slice at a
// time and never held in memory whole.
func (d *Dispatcher) frontierCap() int { return 2 * d.cfg.PassLimit }

// dueNowLocked counts the topics in the due heap that are due at now, up
// to limit, visiting only those: by the heap order, the children of a
// topic not yet due are not due either. Topics backing off wait in the
// heap without counting, so subjects nobody listens to cannot stop the
// frontier. mu must be held.
func (d *Dispatcher) dueNowLocked(now int64, limit int) int {
	h := d.mu.subjects.due
	n := 0
	var walk func(i int)
	walk = func(i int) {
		if i >= len(h) || n >= limit || h[i].next > now {
			return
		}
		n++
		walk(2*i + 1)
		walk(2*i + 2)
	}
	walk(0)
	return n
}

// advanceFrontier reads the due index from the frontier to the current
// time bucket and puts the topic of each entry in the due heap at the
// entry's time, up to frontierCap topics due now, then moves the frontier
// past what it read. It replaces a heap of every subject's next message:
// only subjects with something due, in flight or backing off are in
// memory, and a pass reads only entries it had not read before. Entries
// whose message was delivered since (its topic's scan took it with the
// earlier ones) cost an empty scan of their topic.
func (d *Dispatcher) advanceFrontier(now int64) {
	maxBucket := keys.Bucket(now/int64(time.Millisecond), d.bucketMs)
	d.mu.Lock()
	// Set before any scan of this pass, so that Notify sends a
	// message within the range scanned to its topic, and one beyond it
	// to the frontier (see Notify).
	d.mu.frontier.scannedUpTo = max(d.mu.frontier.scannedUpTo, maxBucket+1)
	room := d.frontierCap() - d.dueNowLocked(now, d.frontierCap())
	if d.mu.frontier.next > now || room <= 0 {
		d.mu.Unlock()
		return
	}
	from := d.mu.frontier.from()
	// Notify lowers it during the read for messages committed meanwhile.
	d.mu.frontier.next = never
	d.mu.Unlock()

	limit := min(room, d.cfg.PassLimit)
	found := make([]keys.Key, 0, min(limit, 256))
	// One read, unbounded above, that stops at the first entry not
	// yet due: that entry's time is when to read again, so no second
	// seek is needed to find it.
	next := int64(never)
	err := d.repo.ScanDue(from, math.MaxUint64, func(k keys.Key) bool {
		if k.Bucket() > maxBucket {
			next = msToNs(keys.BucketStartMs(k.Bucket(), d.bucketMs))
			return false
		}
		if len(found) == limit {
			next = now // more is due: read on at the next pass
			return false
		}
		found = append(found, k)
		return true
	})
	last := from
	if len(found) > 0 {
		last = &found[len(found)-1]
	}
	if err != nil {
		d.log.Warn("reading the due index", "err", err)
		next = after(now, d.cfg.NoRespondersBackoff)
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	d.admitLocked(found, now)
	d.mu.frontier.moved(last, next)
}

// admitLocked puts the topic of each due-index entry in found in the due
// heap at the entry's time. mu must be held.
func (d *Dispatcher) admitLocked(found []keys.Key, now int64) {
	for _, k := range found {
		t := d.mu.subjects.topic(k.TopicHash(), d.cfg.SubjectMaxInFlight)
		switch {
		case t.limited:
			// Held at its limit, its cursor is at or below this
			// entry, and room brings it back (see roomFreedLocked).
			continue
		case t.idx < 0 && t.rewind == nil && !t.probing && !t.probeOpen && t.blockedUntil <= now &&
			(t.cursor == nil || bytes.Compare(t.cursor, k[:]) <= 0):
			// NB: a topic not waiting for a scan, with nothing arrived or
			// bounced since its last one, has nothing pending from its
			// cursor up to this entry but parked messages (see
			// evictLongWaitsLocked): any other would have an entry the
			// frontier passed before (same subject, so due order is key
			// order), whose scan took it or left the topic waiting for
			// another. So its scan starts at the entry, and, while that
			// entry is its only one, is a point read of it.
			t.cursor = k.Bytes()
			single := k
			t.single = &single
		case t.single != nil && *t.single != k:
			t.single = nil // more than one entry: a range scan
		}
		at := max(msToNs(keys.BucketStartMs(k.Bucket(), d.bucketMs)), t.blockedUntil)
		if t.idx < 0 || at < t.next {
			d.mu.subjects.due.schedule(t, at)
		}
	}
}
