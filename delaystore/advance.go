package delaystore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/natsdelay/natsdelay/keys"
)

// Plan is one occurrence of a recurring schedule for Advance to plan.
type Plan struct {
	// Key is where the occurrence is pending.
	Key keys.Key
	// Cur is the occurrence as planned: Recurrence.Planned set, and it
	// may set an expiry time; its other fields are the stored ones.
	// Advance sets its EventId to Key's and its WrittenOnce to what the
	// store holds, and clears its ClientId when Next is stored. It is
	// stored only when it changes more than planning leaves to the index
	// of occurrences (see planned.go).
	Cur *StoredMessage
	// Drop deletes the occurrence instead (the catch-up policy skips it).
	Drop bool
	// Next is the successor, or nil after the last occurrence. Advance
	// sets its EventId.
	Next *StoredMessage
}

// Planned is what Advance did with one Plan.
type Planned struct {
	// Next is the successor's key, when one was stored.
	Next keys.Key
	// Err is why nothing was done for this Plan: it wraps ErrNotFound if
	// nothing is pending under Key (canceled, replaced or settled),
	// ErrPlanned if the stored occurrence is planned already, or
	// ErrInvalidMessage if Cur or Next does not fit the occurrence
	// (another subject, or Next's client id differs from the stored one).
	Err error
}

// Advance plans the successors of occurrences of recurring schedules, all
// in one batch committed with sync. For each Plan:
//
//   - the occurrence becomes Cur (rewritten only if its expiry or its
//     successor's time changes: see planned.go), or is deleted when Drop
//     is set;
//   - Next, when not nil, is stored under a new event key, and the
//     schedule's entries in the (subject, client id) index and in the
//     schedule index move to it: Cur loses its client id, so only the
//     newest occurrence is replaced or canceled by id, and deleting Cur
//     later leaves the entries alone.
//
// A Plan that cannot be carried out is reported in its Planned.Err and
// leaves the others be. The error returned is for the whole batch: then
// nothing is stored. It blocks while another write is in progress and for
// the commit. It does not keep the messages.
func (r *Repository) Advance(plans []Plan, sync SyncMode) ([]Planned, error) {
	if len(plans) == 0 {
		return nil, nil
	}
	r.wmu.Lock() // held across the commit: see the NB in Schedule.
	defer r.wmu.Unlock()
	if r.closed.Load() {
		return nil, ErrClosed
	}
	r.resetScratch()
	out := make([]Planned, len(plans))
	stored := make([]*StoredMessage, len(plans))
	size := 0
	for i := range plans {
		m, n, err := r.getSized(plans[i].Key)
		size += planBytes(n, m)
		if err == nil {
			err = check(&plans[i], m)
		}
		if err != nil {
			out[i].Err = fmt.Errorf("delaystore: advance %v: %w", plans[i].Key, err)
			continue
		}
		stored[i] = m
	}
	if err := r.advanceBatch(plans, stored, out, size, sync); err != nil {
		return nil, err
	}
	return out, nil
}

// PlanFunc returns the plan of the occurrence stored under k, or false to
// leave it be. It is called with the writers' lock held, so it must not
// call the Repository; stored is the caller's to keep.
type PlanFunc func(k keys.Key, stored *StoredMessage) (Plan, bool)

// AdvanceEach is Advance for occurrences the caller has not read: it reads
// the message under each of ks once, under the writers' lock, asks plan
// for its Plan, and commits the plans in one batch with sync. Keys with
// nothing pending, and those plan leaves be, are skipped; an occurrence
// that was planned already is skipped too, whatever plan says. It returns
// the plans carried out or refused, with what became of each, in the
// order of ks; the error is for the whole batch, and then nothing is
// stored.
//
// Reading the occurrence here, with the lock that keeps it from
// changing until the commit, spares the caller a read of its own before
// Advance reads it again to check it.
func (r *Repository) AdvanceEach(ks []keys.Key, plan PlanFunc, sync SyncMode) ([]Plan, []Planned, error) {
	if len(ks) == 0 {
		return nil, nil, nil
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if r.closed.Load() {
		return nil, nil, ErrClosed
	}
	r.resetScratch()
	var plans []Plan
	var stored []*StoredMessage
	var out []Planned
	size := 0
	for _, k := range ks {
		m, n, err := r.getSized(k)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("delaystore: advance %v: %w", k, err)
		}
		if m.GetRecurrence().GetPlanned() {
			continue
		}
		p, ok := plan(k, m)
		if !ok {
			continue
		}
		p.Key = k
		plans = append(plans, p)
		if err := check(&p, m); err != nil {
			stored = append(stored, nil)
			out = append(out, Planned{Err: fmt.Errorf("delaystore: advance %v: %w", k, err)})
			continue
		}
		stored = append(stored, m)
		out = append(out, Planned{})
		size += planBytes(n, m)
	}
	if err := r.advanceBatch(plans, stored, out, size, sync); err != nil {
		return nil, nil, err
	}
	return plans, out, nil
}

// planBytes is about how many bytes the plan of an occurrence of n bytes
// as stored, m, adds to a batch: the occurrence rewritten and its
// successor, each about as large, and the index entries and the count
// (see TestRepository_Advance_KeysWrittenPerOccurrence), keys of a few
// dozen bytes, some with the subject in them. With 128-byte payloads it
// comes to 3% over the batch written (898 bytes a plan against 868).
func planBytes(n int, m *StoredMessage) int {
	if m == nil {
		return 0
	}
	return 2*n + 4*len(m.Subject) + 384
}

// advanceBatch writes plans[i] for every stored[i] that is not nil, in
// one batch committed with sync, setting out[i].Next; size is about how
// many bytes they write (see planBytes). wmu must be held and the scratch
// reset.
func (r *Repository) advanceBatch(plans []Plan, stored []*StoredMessage, out []Planned, size int, sync SyncMode) error {
	// NB: sized up front: the planner's batch of thousands of
	// occurrences, grown as it was filled, was copied at each doubling.
	b := grouped(r.newBatch(size), &r.w.held)
	defer b.Close()
	deltas := r.w.deltas
	var last uint64
	wrote := false
	for i := range plans {
		if stored[i] == nil {
			continue
		}
		k, ok, err := r.advance(b, deltas, &plans[i], stored[i])
		if err != nil {
			return fmt.Errorf("delaystore: advance %v: %w", plans[i].Key, err)
		}
		if ok {
			out[i].Next = k
			last = k.EventID()
		}
		wrote = true
	}
	if !wrote {
		return nil
	}
	counts, err := r.setCounts(b, deltas)
	if err != nil {
		return fmt.Errorf("delaystore: advance batch of %d: %w", len(plans), err)
	}
	if last != 0 {
		if err := b.Set([]byte(lastIDKey), binary.BigEndian.AppendUint64(r.w.val[:0], last)); err != nil {
			return fmt.Errorf("delaystore: advance batch of %d: record last id: %w", len(plans), err)
		}
	}
	if err := r.leaseIDs(); err != nil {
		return fmt.Errorf("delaystore: advance batch of %d: %w", len(plans), err)
	}
	if r.advanceHook != nil {
		r.advanceHook(AdvanceBeforeCommit)
	}
	if err := b.Commit(sync); err != nil {
		return fmt.Errorf("delaystore: advance batch of %d: commit: %w", len(plans), err)
	}
	if r.advanceHook != nil {
		r.advanceHook(AdvanceAfterCommit)
	}
	r.committed(counts, last)
	r.trimScratch()
	return nil
}

// check checks that p fits the occurrence stored, as read under wmu.
func check(p *Plan, stored *StoredMessage) error {
	cur, next := p.Cur, p.Next
	switch {
	case stored.GetRecurrence() == nil:
		return fmt.Errorf("%w: not an occurrence of a recurring schedule", ErrInvalidMessage)
	case stored.GetRecurrence().GetPlanned():
		return ErrPlanned
	case cur == nil:
		return fmt.Errorf("%w: no rewrite of the occurrence", ErrInvalidMessage)
	case cur.Subject != stored.Subject || (next != nil && next.Subject != stored.Subject):
		return fmt.Errorf("%w: subject differs from the occurrence's", ErrInvalidMessage)
	case next != nil && (next.ClientId != stored.ClientId || next.Recurrence == nil):
		return fmt.Errorf("%w: the successor must be an occurrence with the client id %q", ErrInvalidMessage, keys.Clip(stored.ClientId))
	case !p.Drop && (!cur.GetRecurrence().GetPlanned() || (next == nil && cur.ClientId != stored.ClientId)):
		return fmt.Errorf("%w: the rewrite must be planned and, without a successor, keep the client id", ErrInvalidMessage)
	}
	return nil
}

// advance adds p to b and returns the successor's key, if one is stored.
// wmu must be held.
func (r *Repository) advance(b Batch, deltas map[string]int64, p *Plan, stored *StoredMessage) (keys.Key, bool, error) {
	k, cur, next := p.Key, p.Cur, p.Next
	if p.Drop {
		// NB: with a successor, its index entries overwrite the ones
		// pointing at k below, so the delete must leave them alone.
		if err := r.deleteMessage(b, &k, stored, next == nil); err != nil {
			return keys.Key{}, false, err
		}
		deltas[stored.Subject]--
	} else {
		unindex := r.unindexSchedule
		if next != nil && toPlan(next) {
			// The successor's entry below overwrites the schedule's,
			// the same key, in this batch: deleting it first would be
			// one more key written for each occurrence.
			unindex = r.unindexOccurrence
		}
		if err := unindex(b, k, stored); err != nil {
			return keys.Key{}, false, fmt.Errorf("move schedule entry: %w", err)
		}
		if next != nil {
			cur.ClientId = ""
		}
		cur.EventId = k.EventID()
		if plannedInPlace(stored, cur, next) {
			// NB: the stored value is left as it is: with its entry in
			// the index of occurrences gone, it reads as cur (see
			// planned.go), and its key, still written once, may be
			// single-deleted.
			cur.WrittenOnce = stored.WrittenOnce
			r.w.inPlace = append(r.w.inPlace, k)
		} else if err := r.rewritePlanned(b, k, cur, stored); err != nil {
			return keys.Key{}, false, err
		}
	}
	if next == nil {
		return keys.Key{}, false, nil
	}
	return r.storeSuccessor(b, deltas, stored, next)
}

// rewritePlanned adds to b the occurrence under k rewritten as cur, its
// plan, marked planned, for a plan that changes more than planning leaves
// to the index (see plannedInPlace): its expiry or its successor's time.
// wmu must be held.
func (r *Repository) rewritePlanned(b Batch, k keys.Key, cur, stored *StoredMessage) error {
	if cur.ExpireAtNs != stored.ExpireAtNs {
		if stored.ExpireAtNs != 0 {
			r.w.key = appendExpiryKey(r.w.key[:0], stored.ExpireAtNs, k)
			if err := b.Delete(r.w.key); err != nil {
				return fmt.Errorf("move expiry entry: %w", err)
			}
		}
		if cur.ExpireAtNs != 0 {
			r.w.key = appendExpiryKey(r.w.key[:0], cur.ExpireAtNs, k)
			if err := b.Set(r.w.key, nil); err != nil {
				return fmt.Errorf("move expiry entry: %w", err)
			}
		}
	}
	// NB: a reader may hold a copy read before, which says written once
	// (see singledelete.go).
	r.noteRewrite(k, stored)
	cur.WrittenOnce = false
	return r.setMessage(b, &k, cur, false)
}

// storeSuccessor adds to b next, the successor of the occurrence stored,
// under a new key, with its index entries, and returns its key. wmu must
// be held.
func (r *Repository) storeSuccessor(b Batch, deltas map[string]int64, stored, next *StoredMessage) (keys.Key, bool, error) {
	id, _, err := r.reserveIDs(1)
	if err != nil {
		return keys.Key{}, false, err
	}
	next.EventId = id
	nk := keys.New(keys.TopicHash(next.Subject), keys.Bucket(keys.FireAtMs(next.FireAtNs), r.bucketMs), id)
	next.Recurrence.Name = stored.GetRecurrence().GetName()
	if err := r.setMessage(b, &nk, next, true); err != nil {
		return keys.Key{}, false, fmt.Errorf("successor: %w", err)
	}
	if err := r.indexDue(b, &nk); err != nil {
		return keys.Key{}, false, fmt.Errorf("successor: %w", err)
	}
	if next.ClientId != "" {
		r.w.key = appendClientIDKey(r.w.key[:0], next.Subject, next.ClientId)
		if err := b.Set(r.w.key, nk[:]); err != nil {
			return keys.Key{}, false, fmt.Errorf("index client id: %w", err)
		}
	}
	if next.ExpireAtNs != 0 {
		r.w.key = appendExpiryKey(r.w.key[:0], next.ExpireAtNs, nk)
		if err := b.Set(r.w.key, nil); err != nil {
			return keys.Key{}, false, fmt.Errorf("index expiry: %w", err)
		}
	}
	if err := r.indexSchedule(b, nk, next); err != nil {
		return keys.Key{}, false, err
	}
	deltas[next.Subject]++
	return nk, true, nil
}
