package delaystore

import "github.com/natsdelay/natsdelay/keys"

// Single deletes
//
// Most messages are written once, at ingest, and deleted once, at their
// ACK, and so is their due entry. Deleting such a key with the engine's
// SingleDelete lets Pebble drop the delete together with the one set it
// meets, in the memtable or the first compaction, where a Delete leaves a
// tombstone that every compaction carries down to the last level. A key
// set twice must not be single-deleted: the delete cancels the newest set
// only, and the older value comes back once a compaction has separated
// them.
//
// So the repository stores WrittenOnce in a value it writes under a key
// that never held one (ingest, the successor of an occurrence, whose keys
// hold event IDs never handed out before) and false in every value it
// writes over one (an update such as an attempt count, a move, a plan
// that rewrites its occurrence: see planned.go), and deletes a message's key and due entry with
// SingleDelete only when the message as last written says WrittenOnce. A
// move writes false even under a new key: a move back to the first
// key's time would set that key a second time. Every other index entry
// keeps plain deletes: the client id and schedule entries are overwritten
// by design, and an expiry entry moves with updates.
//
// A delete that takes the message from its caller (Op.Pending) may carry
// the value as read before a rewrite, so the repository remembers, until
// its delete, every key it rewrote in this process from a value written
// once; a restart forgets them, but then every reader reads the values
// again. The entries are pending messages that were updated or moved in
// place after being written once, 24 bytes of key each.

// singleDeletable reports whether the message m, under k, may have its key
// and due entry single-deleted. wmu must be held.
func (r *Repository) singleDeletable(k *keys.Key, m *StoredMessage) bool {
	if !m.WrittenOnce {
		return false
	}
	if _, ok := r.w.rewrites[*k]; ok {
		// Rewritten or deleted earlier in this batch.
		return false
	}
	_, rewritten := r.rewritten[*k]
	return !rewritten
}

// noteRewrite records that this batch writes k over prior, the message it
// held, if a reader may still hold a copy that says written once. wmu
// must be held.
func (r *Repository) noteRewrite(k keys.Key, prior *StoredMessage) {
	if _, ok := r.rewritten[k]; ok || prior.WrittenOnce {
		r.w.rewrites[k] = true
	}
}

// noteDelete records that this batch deletes k. wmu must be held.
func (r *Repository) noteDelete(k keys.Key) {
	r.w.rewrites[k] = false
}

// committedRewrites applies the rewrites and deletes of a committed batch
// to the keys remembered as rewritten. wmu must be held.
func (r *Repository) committedRewrites() {
	for k, rewritten := range r.w.rewrites {
		if rewritten {
			r.rewritten[k] = struct{}{}
		} else {
			delete(r.rewritten, k)
		}
	}
	if len(r.w.rewrites) > maxKeptDeltas {
		r.w.rewrites = make(map[keys.Key]bool)
	}
	clear(r.w.rewrites)
	if len(r.rewritten) == 0 && r.rewrittenPeak > maxKeptDeltas {
		// A map keeps its buckets when emptied: one that a burst of
		// updates grew is dropped once the burst is settled.
		r.rewritten, r.rewrittenPeak = make(map[keys.Key]struct{}), 0
	}
	r.rewrittenPeak = max(r.rewrittenPeak, len(r.rewritten))
}
