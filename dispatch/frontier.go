package dispatch

import (
	"bytes"
	"math"
	"time"

	"github.com/natsdelay/natsdelay/keys"
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
	// scannedUpTo is the bucket below which passes have scanned, or a
	// hand-off moved its topic's cursor (see handOffLocked): a message
	// committed below it goes to its topic, one at or above it to the
	// frontier (see Notify).
	scannedUpTo uint64
	// reading is set while a read is under way, from begin to moved;
	// failed if the last read failed. Either way entries before next may
	// still be unread (see clearBy).
	reading, failed bool
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

// ahead reports whether the due-index entry k is still to be read.
func (fr *dueFrontier) ahead(k keys.Key) bool { return fr.at == nil || dueBefore(*fr.at, k) }

// begin starts a read of the due index at now, up to the time bucket
// maxBucket, for up to room topics, and returns where it starts. It
// returns false when no read is due: the next entry is not due yet, or
// the due heap has no room. It notes before any scan of the pass how far
// passes scan, so that Notify sends a message within the range scanned to
// its topic, and one beyond it to the frontier.
func (fr *dueFrontier) begin(now int64, maxBucket uint64, room int) (*keys.Key, bool) {
	fr.scannedUpTo = max(fr.scannedUpTo, maxBucket+1)
	if fr.next > now || room <= 0 {
		return nil, false
	}
	// Notify lowers it during the read for messages committed meanwhile.
	fr.next = never
	fr.reading = true
	return fr.from(), true
}

// moved records a read that ended at last (nil: nothing read), with the
// next entry scannable at next, or that failed.
func (fr *dueFrontier) moved(last *keys.Key, next int64, failed bool) {
	if last != nil {
		k := *last
		fr.at = &k
	}
	fr.next = min(fr.next, next)
	fr.reading, fr.failed = false, failed
}

// clearBy reports whether every due-index entry scannable by at has been
// read, or its message told to its topic (see Notify): no read is under
// way or failed, and the next entry to read is not scannable by at. An
// entry committed and not yet told of is the committer's to count (see
// Dispatcher.Committing).
func (fr *dueFrontier) clearBy(at int64) bool {
	return !fr.reading && !fr.failed && fr.next > at
}

// frontierCap bounds the topics in the due heap that the due index may
// add to: past it, the frontier waits for the heap to drain, so a backlog
// of many subjects due at once (after an outage, say) is taken a slice at a
// time and never held in memory whole.
func (d *Dispatcher) frontierCap() int { return 2 * d.cfg.PassLimit }

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
	room := d.frontierCap() - d.mu.subjects.dueNow(now, d.frontierCap())
	from, ok := d.mu.frontier.begin(now, maxBucket, room)
	d.mu.Unlock()
	if !ok {
		return
	}

	limit := min(room, d.cfg.PassLimit)
	found := make([]keys.Key, 0, min(limit, 256))
	// One read, unbounded above, that stops at the first entry not
	// yet due: that entry's time is when to read again, so no second
	// seek is needed to find it.
	next := int64(never)
	var lastRead keys.Key
	read := 0
	err := d.repo.ScanDue(from, math.MaxUint64, func(k keys.Key) bool {
		if k.Bucket() > maxBucket {
			next = msToNs(keys.BucketStartMs(k.Bucket(), d.bucketMs))
			return false
		}
		if len(found) == limit || read == limit*frontierSkipFactor {
			next = now // more is due: read on at the next pass
			return false
		}
		read++
		lastRead = k
		// NB: an entry that needs nothing costs a lookup, not a place
		// among the pass's entries, so a backlog of them (held by a
		// pause, taken by their topics already) is passed in one pass,
		// not a pass's worth at a time ahead of what falls due after it.
		d.mu.Lock()
		skip := d.mu.subjects.passed(k, now)
		d.mu.Unlock()
		if !skip {
			found = append(found, k)
		}
		return true
	})
	last := from
	if read > 0 {
		last = &lastRead
	}
	if err != nil {
		d.log.Warn("reading the due index", "err", err)
		next = after(now, d.cfg.NoRespondersBackoff)
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	d.mu.subjects.admit(found, now, d.mu.commits.earliest())
	d.mu.frontier.moved(last, next, err != nil)
}

// frontierSkipFactor bounds the due-index entries one read of the
// frontier passes, those that need nothing included, to this many times
// the entries it may hand to topics.
const frontierSkipFactor = 16

// passed reports whether the due-index entry k needs nothing of the
// frontier at now: its topic is held at its limit or released by a change
// of limits (their return resumes at their cursors, with a range scan),
// its topic's scans
// are past it (everything below a cursor is in flight or settled), or
// its topic is due already, to be scanned in a range from a cursor at or
// below it (a bulk FIRE of one subject's backlog).
func (st *subjectTable) passed(k keys.Key, now int64) bool {
	t := st.byHash[k.TopicHash()]
	switch {
	case t == nil:
		return false
	case st.groupHeld(t):
		// An entry its last scan did not read may be of another
		// group: it wakes the topic (see admit).
		return groupRead(t, k)
	case t.limited || t.released:
		// NB: the scan its return brings must read its range from the
		// cursor, this entry within it, not just the entry that brought
		// it into memory: admit no longer sees this one to say so.
		if t.single != nil && *t.single != k {
			t.single = nil
		}
		return true
	case t.cursor != nil && bytes.Compare(k[:], t.cursor) < 0:
		return true
	}
	return t.idx >= 0 && t.next <= now && t.single == nil
}

// admit puts the topic of each due-index entry in found in the due heap
// at the entry's time. earliestNs is the earliest fire time a commit not
// yet told of holds, never if none (see pendingCommits.earliest).
func (st *subjectTable) admit(found []keys.Key, now, earliestNs int64) {
	for _, k := range found {
		t := st.topic(k.TopicHash())
		switch {
		case st.groupHeld(t):
			// Held for a group's room, its cursor at that group's
			// first message left: the entry may be of another group,
			// so it scans from the cursor (see groups.go).
			st.unhold(t)
		case t.limited || t.released:
			// Held at its limit, its cursor is at or below this
			// entry, and room brings it back (see lostFlight);
			// released, its turn does (see readmitReleased).
			continue
		case t.idx < 0 && t.rewind == nil && !t.probing && !t.probeOpen && t.blockedUntil <= now &&
			(t.cursor == nil || bytes.Compare(t.cursor, k[:]) <= 0):
			// NB: a topic not waiting for a scan, with nothing arrived or
			// bounced since its last one, has nothing pending from its
			// cursor up to this entry but parked messages (see
			// Dispatcher.evictLongWaitsLocked): any other would have an entry the
			// frontier passed before (same subject, so due order is key
			// order), whose scan took it or left the topic waiting for
			// another. So its scan starts at the entry, and, while that
			// entry is its only one, is a point read of it; unless a
			// commit not yet told of may hold an older message of the
			// subject, whose entry the frontier is past (see commits.go).
			start := scanStart(t.hash, k, earliestNs, st.bucketMs)
			if t.cursor == nil || bytes.Compare(t.cursor, start[:]) < 0 {
				t.cursor = start.Bytes()
			}
			t.single = nil
			if bytes.Equal(t.cursor, k[:]) {
				single := k
				t.single = &single
			}
		case t.single != nil && *t.single != k:
			t.single = nil // more than one entry: a range scan
		}
		at := max(msToNs(keys.BucketStartMs(k.Bucket(), st.bucketMs)), t.blockedUntil)
		if t.idx < 0 || at < t.next {
			st.due.schedule(t, at)
		}
	}
}
