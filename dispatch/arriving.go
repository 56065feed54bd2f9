package dispatch

import (
	"bytes"
	"cmp"
	"slices"

	"github.com/natsdelay/natsdelay/keys"
)

// Arrivals: the keys a commit is about to store, known to the dispatcher
// from before the commit until it has been told of each.
//
// Per subject, messages on disk together go out in key order. A message
// committed below its topic's cursor (published later with a shorter
// delay than one a scan took) is found by no scan: everything below the
// cursor is in flight or settled. Its tell rewinds the cursor to it. But
// between its commit and its tell a scan of its subject reads on from the
// cursor and takes what is above it, which was on disk with it, and the
// message below goes out after those (docs/architecture.md, "A message
// due at ingest"). So a writer tells the dispatcher the keys of its batch
// before it commits (Arriving): a scan whose range starts above one of
// them, for its topic, takes nothing, and its topic waits for the
// arrival's end, when the tell has rewound its cursor. A scan whose range
// starts at or below such a key read it, if its read came after the
// commit; before the commit, the key was not on disk with what it took.
//
// Only a scan that starts above a key of its topic in the batch waits: a
// message due at ingest is above its topic's cursor, so the hot path pays
// a binary search per scan while a batch commits, and nothing per message.

// arrival is the keys of one commit under way, and the topics whose scans
// wait for its end.
type arrival struct {
	ks      []keys.Key // in key order
	waiting []*topic
}

// Arriving tells d that a commit is about to store the messages under ks,
// which are in key order and stay unchanged until done is called. Until
// then a scan of their subjects does not take a message above one of them
// that it could not have read (see "Arrivals"). Call done once d has been
// told of each of them that was stored (Notify, NotifyMessage), or the
// commit failed; it is safe to call once only. Arriving is safe for
// concurrent use.
func (d *Dispatcher) Arriving(ks []keys.Key) (done func()) {
	if len(ks) == 0 {
		return func() {}
	}
	a := &arrival{ks: ks}
	d.mu.Lock()
	d.mu.arriving = append(d.mu.arriving, a)
	d.mu.Unlock()
	return func() { d.arrived(a) }
}

// arrived ends the arrival a: the topics whose scans waited for it are due
// again, their cursors rewound by the tells of its keys below them.
func (d *Dispatcher) arrived(a *arrival) {
	now := d.nowNs()
	d.mu.Lock()
	defer d.mu.Unlock()
	if i := slices.Index(d.mu.arriving, a); i >= 0 {
		d.mu.arriving = slices.Delete(d.mu.arriving, i, i+1)
	}
	for _, t := range a.waiting {
		t.awaiting--
		if d.mu.subjects.byHash[t.hash] != t || t.limited || t.released {
			// NB: held or released since, its cursor at or below what
			// its scan left; room or its turn brings it back.
			continue
		}
		d.mu.subjects.reschedule(t, now)
		if t.idx == 0 {
			d.signal()
		}
	}
}

// arrivalBelowLocked returns the arrival under way with a key of topic t
// below from, where a scan of t started, if any: such a key was not in
// the scan's range, and the scan must not take what it read. A scan from
// the topic's first key (from nil) read every key committed before it.
// mu must be held.
func (d *Dispatcher) arrivalBelowLocked(t *topic, from []byte) *arrival {
	if from == nil {
		return nil
	}
	for _, a := range d.mu.arriving {
		i, _ := slices.BinarySearchFunc(a.ks, t.hash, func(k keys.Key, h uint64) int { return cmp.Compare(k.TopicHash(), h) })
		if i < len(a.ks) && a.ks[i].TopicHash() == t.hash && bytes.Compare(a.ks[i][:], from) < 0 {
			return a
		}
	}
	return nil
}
