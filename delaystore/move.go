package delaystore

import (
	"fmt"

	"github.com/natsdelay/natsdelay/keys"
)

// MoveFunc decides the new fire time of the pending message m, for Move,
// or returns an error, which Move returns unchanged, to leave it as it is.
// It must not keep or modify m.
type MoveFunc func(m *StoredMessage) (fireAtNs int64, err error)

// Move gives the pending message under k a new fire time, chosen by to
// from the message as stored, in one batch committed with sync: the
// message moves to the key of that time with the same event id (so among
// messages due at the same time it keeps its publish order), its expiry
// moves with it (fire time + TTL), and its indexes follow. The returned
// Scheduled has the new key and, as Replaced, k; the two are equal when
// the time stays in the same time bucket.
//
// It returns an error wrapping ErrNotFound when k is not pending, the
// error of to, and one wrapping ErrInvalidMessage for an occurrence of a
// recurring schedule still to plan, changing nothing in each case. It blocks while another
// write is in progress and for the commit.
//
// movedBy, when not empty, is stored as the message's MovedBy: the bulk
// operation that moved it.
func (r *Repository) Move(k keys.Key, to MoveFunc, movedBy string, sync SyncMode) (Scheduled, error) {
	r.wmu.Lock() // held across the commit: see the NB in Schedule.
	defer r.wmu.Unlock()
	if r.closed.Load() {
		return Scheduled{}, ErrClosed
	}
	m, err := r.get(k)
	if err != nil {
		return Scheduled{}, fmt.Errorf("delaystore: move %v: %w", k, err)
	}
	fireAtNs, err := to(m)
	if err != nil {
		return Scheduled{}, err
	}
	if toPlan(m) {
		// NB: an occurrence still to plan is in the schedule index and
		// the index of occurrences under its key; Move does not keep
		// them, so the caller refuses such a message through to.
		return Scheduled{}, fmt.Errorf("delaystore: move %v: %w: an occurrence of a recurring schedule still to plan", k, ErrInvalidMessage)
	}
	nk := keys.New(k.TopicHash(), keys.Bucket(keys.FireAtMs(fireAtNs), r.bucketMs), k.EventID())

	b := r.s.NewBatch()
	defer b.Close()
	r.resetScratch()
	// NB: within a batch the last write to a key wins, so when nk is k
	// the deletes below are undone by the writes after them; they are
	// plain deletes then, since k is set again.
	if nk == k {
		r.noteRewrite(k, m)
	}
	if err := r.deleteMessage(b, &k, m, false); err != nil {
		return Scheduled{}, fmt.Errorf("delaystore: move %v: %w", k, err)
	}
	if nk == k {
		r.noteRewrite(k, m)
	}
	m.FireAtNs = fireAtNs
	if m.TtlNs != 0 {
		m.ExpireAtNs = fireAtNs + m.TtlNs
	}
	m.EventId = k.EventID()
	if movedBy != "" {
		m.MovedBy = movedBy
	}
	// NB: written as set more than once, even under a new key: a move
	// back to the first time would set k again (see singledelete.go).
	if err := r.setMessage(b, &nk, m, false); err != nil {
		return Scheduled{}, fmt.Errorf("delaystore: move %v: %w", k, err)
	}
	if err := r.indexDue(b, &nk); err != nil {
		return Scheduled{}, fmt.Errorf("delaystore: move %v: %w", k, err)
	}
	if m.ClientId != "" {
		r.w.key = appendClientIDKey(r.w.key[:0], m.Subject, m.ClientId)
		if err := b.Set(r.w.key, nk[:]); err != nil {
			return Scheduled{}, fmt.Errorf("delaystore: move %v: index client id: %w", k, err)
		}
	}
	if m.ExpireAtNs != 0 {
		r.w.key = appendExpiryKey(r.w.key[:0], m.ExpireAtNs, nk)
		if err := b.Set(r.w.key, nil); err != nil {
			return Scheduled{}, fmt.Errorf("delaystore: move %v: index expiry: %w", k, err)
		}
	}
	counts, err := r.setCounts(b, r.w.deltas)
	if err != nil {
		return Scheduled{}, fmt.Errorf("delaystore: move %v: %w", k, err)
	}
	if err := b.Commit(sync); err != nil {
		return Scheduled{}, fmt.Errorf("delaystore: move %v: commit: %w", k, err)
	}
	r.committed(counts, 0)
	r.trimScratch()
	return Scheduled{Key: nk, Replaced: k, HasReplaced: true}, nil
}

// Flush makes every write committed without sync durable (see
// Store.Flush): a bulk step answers once what it did is on disk.
func (r *Repository) Flush() error {
	if r.closed.Load() {
		return ErrClosed
	}
	if err := r.s.Flush(); err != nil {
		return fmt.Errorf("delaystore: flush: %w", err)
	}
	return nil
}
