package delaystore

import (
	"errors"
	"fmt"
	"sync"

	"github.com/natsdelay/natsdelay/keys"
)

// Which occurrence is planned
//
// An occurrence of a recurring schedule is planned once the batch that
// stores its successor (or finds it the last) has committed; it is then
// never planned again. Which occurrences are planned is one rule, applied
// here to every message the repository reads, so that every reader (a
// restart's scan, the planner, the API, CANCEL, a schedule edit, Check,
// a hand-over to another cell) sees the same answer:
//
//	an occurrence is planned when its stored value says so, or when the
//	index of occurrences (see recurindex.go) holds no entry for its key.
//
// The index of occurrences holds exactly the occurrences still to plan,
// written with each in the batch that stores it and removed in the batch
// that plans it, so its entry is what a crash inside planning leaves
// consistent with the successor: both or neither. The stored value says
// planned when a version before index-version 5 planned it (it rewrote
// every occurrence it planned) or when planning had to change it anyway
// (see Repository.advance): those are honored as they are.
//
// Planning no longer rewrites the occurrence, so what a planned one's
// value lacks is made up from what it holds (see plannedView): its
// successor's planned time, next_ns, was written into it, as what its
// plan would give on time, when its predecessor stored it, and planning
// that gives another time (or finds a different end) rewrites it; and its
// Delay-Id, which moved to its successor when there is one.
//
// An entry, once removed, never comes back for the same key: an
// occurrence enters the index only when its key is first written (or an
// edit writes the unplanned occurrence anew, keeping its entry). And the
// entry goes in the same batch as any rewrite of the occurrence its plan
// makes. So a reader that finds no entry and then reads the value reads
// what the plan left (or nothing, if it was deleted since): the value
// read before the index may predate a rewrite, and is read again.

// plannedByIndexVersion is what index-version holds once an occurrence
// may be planned without being rewritten: its planned-ness is read from
// the index of occurrences. A version before it would read such an
// occurrence as still to plan and plan it a second time, so
// index-version 5 keeps every version before it out.
const plannedByIndexVersion = 5

// The repository remembers the occurrences it planned in place itself
// (plannedHere), from the commit of the plan to the commit of the
// delete, so that the reads of an occurrence that follow its plan (the
// pass that publishes it, a delete that reads it) need not read the
// index. And a value from the message cache, written by this process,
// is of an occurrence still to plan unless this process planned it since:
// in place, which plannedHere holds, or with a rewrite, which replaced
// the cached value. So only a value read from the store, of an
// occurrence the repository has not planned in place itself, costs a
// read of the index. The record is added to with wmu held after the
// plan's commit: a reader in between reads the occurrence as still to
// plan, as a reader just before the commit would, and its plan is
// refused (ErrPlanned).

// resolvePlanned applies the rule above to m, read from under k: if m is
// an occurrence its value does not mark planned and the index of
// occurrences has no entry for k, it reads the value again (see above)
// and returns it as the planned occurrence it is (see plannedView), with
// its size as stored; else m and n as they are, and so if the occurrence
// was deleted meanwhile. locked says m and the index are read with wmu
// held, so no plan came between: m is then the value the plan left, not
// read again. cached says m came from the message cache. It may be
// called inside a Scan of the store (Store.Scan allows it).
func (r *Repository) resolvePlanned(k *keys.Key, m *StoredMessage, n int, locked, cached bool) (*StoredMessage, int, error) {
	rec := m.GetRecurrence()
	switch {
	case rec == nil || rec.Planned:
		return m, n, nil
	case r.plannedHere.has(k):
		// In place: the value is as it was before the plan.
		plannedView(m)
		return m, n, nil
	case cached:
		return m, n, nil
	}
	var buf [len(recurPrefix) + keys.Len]byte
	_, err := r.s.Get(recurIndex.appendKey(buf[:0], *k))
	switch {
	case err == nil:
		return m, n, nil // still to plan
	case !errors.Is(err, ErrNotFound):
		return nil, 0, fmt.Errorf("read index of occurrences for %v: %w", k, err)
	}
	if locked {
		plannedView(m)
		return m, n, nil
	}
	v, ok := r.msgs.lookup(k)
	if !ok {
		v, err = r.s.Get(k[:])
		switch {
		case errors.Is(err, ErrNotFound):
			// Deleted since it was read, maybe by its plan (skipped):
			// as read, like any value read before its delete.
			return m, n, nil
		case err != nil:
			return nil, 0, err
		}
	}
	if m, err = unmarshalMessage(v); err != nil {
		return nil, 0, fmt.Errorf("decode %v: %w: %w", k, ErrCorrupt, err)
	}
	if m.GetRecurrence() != nil && !m.Recurrence.Planned {
		plannedView(m)
	}
	return m, len(v), nil
}

// plannedView makes m, an occurrence planned without a rewrite, what the
// rewrite would have stored: planned, its successor's time the next_ns it
// holds, and without its Delay-Id when a successor took it (it has one
// exactly when next_ns is not 0: see Repository.advance).
func plannedView(m *StoredMessage) {
	m.Recurrence.Planned = true
	if m.Recurrence.NextNs != 0 {
		m.ClientId = ""
	}
}

// plannedInPlace reports whether planning leaves the stored occurrence as
// it is, stored, when its plan is cur: cur differs from it only in what
// the rule above makes up (planned, and the Delay-Id a successor takes),
// its successor's time is the one stored and its expiry unchanged. Else
// planning rewrites it, marked planned. next says whether the plan stores
// a successor, at nextNs.
func plannedInPlace(stored, cur *StoredMessage, next *StoredMessage) bool {
	sr, cr := stored.GetRecurrence(), cur.GetRecurrence()
	switch {
	case cur.ExpireAtNs != stored.ExpireAtNs || cr.GetNextNs() != sr.GetNextNs():
		return false
	case next == nil:
		return sr.GetNextNs() == 0
	default:
		return sr.GetNextNs() != 0 && next.GetRecurrence().GetOccurrenceNs() == sr.GetNextNs()
	}
}

// plannedSet is the record of the occurrences a repository planned in
// place (see resolvePlanned): 24 bytes of key for each occurrence out and
// not yet ACKed, the keys of a second's schedules that a second's ACKs
// delete.
type plannedSet struct {
	mu   sync.Mutex
	keys map[keys.Key]struct{}
	peak int
}

// has reports whether k was planned in place and not deleted since.
func (p *plannedSet) has(k *keys.Key) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.keys[*k]
	return ok
}

// committed records a committed batch: the occurrences it planned in
// place, and the keys it rewrote or deleted (rewrites, false for a
// delete; a rewrite keeps the key recorded, as a rewrite of a planned
// occurrence stores it planned). wmu must be held.
func (p *plannedSet) committed(inPlace []keys.Key, rewrites map[keys.Key]bool) {
	if len(inPlace) == 0 && len(rewrites) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.keys) > 0 {
		for k, rewritten := range rewrites {
			if !rewritten {
				delete(p.keys, k)
			}
		}
	}
	if len(inPlace) > 0 && p.keys == nil {
		p.keys = make(map[keys.Key]struct{}, len(inPlace))
	}
	for _, k := range inPlace {
		p.keys[k] = struct{}{}
	}
	if len(p.keys) == 0 && p.peak > maxKeptDeltas {
		// A map keeps its buckets when emptied: one that a burst grew
		// is dropped once the burst is ACKed.
		p.keys, p.peak = nil, 0
	}
	p.peak = max(p.peak, len(p.keys))
}
