package delaystore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"natsdelay/keys"
)

// ErrPlanned is returned by Advance when the occurrence's successor was
// planned already: planning it again would store one occurrence twice.
var ErrPlanned = errors.New("delaystore: occurrence already planned")

// Advance plans the successor of the occurrence of a recurring schedule
// pending under k, in one batch committed with sync:
//
//   - the occurrence is rewritten as cur, which must have
//     Recurrence.Planned set and may set an expiry time, or deleted when drop is true (the catch-up
//     policy skips it);
//   - next, when not nil, is stored under a new event key, and the
//     schedule's (subject, client id) index entry is moved to it: cur
//     loses its client id, so only the newest occurrence is replaced or
//     canceled by id, and deleting cur later leaves the entry alone.
//
// It returns next's key in Scheduled. Like Schedule it sets next.EventId.
// It returns an error wrapping ErrNotFound if nothing is pending under k
// (the occurrence was canceled, replaced or settled), ErrPlanned if the
// stored occurrence is planned already, and ErrInvalidMessage if next or
// cur does not fit the occurrence: another subject, or next's client id
// differs from the stored one. It sets cur.EventId to k's, and clears
// cur.ClientId when next is stored. On error nothing is stored. It blocks while
// another write is in progress and for the commit. It does not keep cur or
// next.
func (r *Repository) Advance(k keys.Key, cur *StoredMessage, drop bool, next *StoredMessage, sync SyncMode) (Scheduled, error) {
	r.wmu.Lock() // held across the commit: see the NB in Schedule.
	defer r.wmu.Unlock()
	if r.closed.Load() {
		return Scheduled{}, ErrClosed
	}
	stored, err := r.get(k)
	if err != nil {
		return Scheduled{}, fmt.Errorf("delaystore: advance %v: %w", k, err)
	}
	switch {
	case stored.GetRecurrence().GetPlanned():
		return Scheduled{}, fmt.Errorf("delaystore: advance %v: %w", k, ErrPlanned)
	case cur.Subject != stored.Subject || (next != nil && next.Subject != stored.Subject):
		return Scheduled{}, fmt.Errorf("delaystore: advance %v: %w: subject differs from the occurrence's", k, ErrInvalidMessage)
	case next != nil && next.ClientId != stored.ClientId:
		return Scheduled{}, fmt.Errorf("delaystore: advance %v: %w: client id %q differs from the occurrence's %q", k, ErrInvalidMessage, keys.Clip(next.ClientId), keys.Clip(stored.ClientId))
	case !drop && (!cur.GetRecurrence().GetPlanned() || (next == nil && cur.ClientId != stored.ClientId)):
		return Scheduled{}, fmt.Errorf("delaystore: advance %v: %w: the rewrite must be planned and, without a successor, keep the client id", k, ErrInvalidMessage)
	}

	b := r.s.NewBatch()
	defer b.Close()
	deltas := r.w.deltas
	clear(deltas)
	if drop {
		// NB: with a successor, its index entry overwrites the one
		// pointing at k below, so the delete must leave it alone.
		if err := r.deleteMessage(b, &k, stored, next == nil); err != nil {
			return Scheduled{}, fmt.Errorf("delaystore: advance %v: %w", k, err)
		}
		deltas[stored.Subject]--
	} else {
		if err := r.unindexSchedule(b, stored); err != nil {
			return Scheduled{}, fmt.Errorf("delaystore: advance %v: %w", k, err)
		}
		if next != nil {
			cur.ClientId = ""
		}
		cur.EventId = k.EventID()
		if cur.ExpireAtNs != stored.ExpireAtNs {
			if stored.ExpireAtNs != 0 {
				r.w.key = appendExpiryKey(r.w.key[:0], stored.ExpireAtNs, k)
				if err := b.Delete(r.w.key); err != nil {
					return Scheduled{}, fmt.Errorf("delaystore: advance %v: move expiry entry: %w", k, err)
				}
			}
			if cur.ExpireAtNs != 0 {
				r.w.key = appendExpiryKey(r.w.key[:0], cur.ExpireAtNs, k)
				if err := b.Set(r.w.key, nil); err != nil {
					return Scheduled{}, fmt.Errorf("delaystore: advance %v: move expiry entry: %w", k, err)
				}
			}
		}
		if err := r.setMessage(b, &k, cur); err != nil {
			return Scheduled{}, fmt.Errorf("delaystore: advance %v: %w", k, err)
		}
	}

	var out Scheduled
	var last uint64
	if next != nil {
		first, l, err := r.reserveIDs(1)
		if err != nil {
			return Scheduled{}, err
		}
		last = l
		next.EventId = first
		out.Key = keys.New(keys.TopicHash(next.Subject), keys.Bucket(keys.FireAtMs(next.FireAtNs), r.bucketMs), first)
		if next.Recurrence != nil {
			next.Recurrence.Name = stored.GetRecurrence().GetName()
		}
		if err := r.setMessage(b, &out.Key, next); err != nil {
			return Scheduled{}, fmt.Errorf("delaystore: advance %v: successor: %w", k, err)
		}
		if next.ClientId != "" {
			r.w.key = appendClientIDKey(r.w.key[:0], next.Subject, next.ClientId)
			if err := b.Set(r.w.key, out.Key[:]); err != nil {
				return Scheduled{}, fmt.Errorf("delaystore: advance %v: index client id: %w", k, err)
			}
		}
		if next.ExpireAtNs != 0 {
			r.w.key = appendExpiryKey(r.w.key[:0], next.ExpireAtNs, out.Key)
			if err := b.Set(r.w.key, nil); err != nil {
				return Scheduled{}, fmt.Errorf("delaystore: advance %v: index expiry: %w", k, err)
			}
		}
		if err := r.indexSchedule(b, out.Key, next); err != nil {
			return Scheduled{}, fmt.Errorf("delaystore: advance %v: %w", k, err)
		}
		deltas[next.Subject]++
		if err := b.Set([]byte(lastIDKey), binary.BigEndian.AppendUint64(r.w.val[:0], last)); err != nil {
			return Scheduled{}, fmt.Errorf("delaystore: advance %v: record last id: %w", k, err)
		}
	}
	counts, err := r.setCounts(b, deltas)
	if err != nil {
		return Scheduled{}, fmt.Errorf("delaystore: advance %v: %w", k, err)
	}
	if err := b.Commit(sync); err != nil {
		return Scheduled{}, fmt.Errorf("delaystore: advance %v: commit: %w", k, err)
	}
	r.committed(counts, last)
	r.trimScratch()
	return out, nil
}
