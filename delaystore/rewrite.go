package delaystore

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/natsdelay/natsdelay/keys"
)

// The stages of a Rewrite batch at which RepositoryConfig.AdvanceHook is
// called, as for Advance's.
const (
	// RewriteBeforeCommit is after the batch is built, before its commit.
	RewriteBeforeCommit AdvanceStage = AdvanceAfterCommit + 1 + iota
	// RewriteAfterCommit is right after the commit synced.
	RewriteAfterCommit
)

// RewriteFunc changes m, the occurrence still to plan as stored, in
// place: its fire time, payload, headers and Recurrence. It returns an
// error, which Rewrite returns unchanged, to leave it as it is. m is the
// caller's only for the call.
type RewriteFunc func(m *StoredMessage) error

// Rewrite changes the occurrence of a recurring schedule still to plan
// under k, as edit decides from the occurrence as stored, in one batch
// committed with sync: the occurrence moves to the key of its new fire
// time with the same event id, and its entries in the due index, the
// (subject, client id) index, the schedule index and the index of
// occurrences follow it. So a crash leaves the schedule as it was or as
// rewritten, never both and never neither. The returned Scheduled has
// the new key and, as Replaced, k; the two are equal when the time stays
// in the same time bucket.
//
// It returns an error wrapping ErrNotFound when k is not pending,
// ErrPlanned when the occurrence there was planned already (the schedule
// went on to its successor), ErrInvalidMessage when it is no occurrence,
// or when edit changed its subject, client id or schedule name, and the
// error of edit; each changes nothing. It blocks while another write is in
// progress and for the commit.
func (r *Repository) Rewrite(k keys.Key, edit RewriteFunc, sync SyncMode) (Scheduled, error) {
	r.wmu.Lock() // held across the commit: see the NB in Schedule.
	defer r.wmu.Unlock()
	if r.closed.Load() {
		return Scheduled{}, ErrClosed
	}
	old, err := r.get(k)
	if err != nil {
		return Scheduled{}, fmt.Errorf("delaystore: rewrite %v: %w", k, err)
	}
	if err := checkRewritable(old); err != nil {
		return Scheduled{}, fmt.Errorf("delaystore: rewrite %v: %w", k, err)
	}
	m := proto.Clone(old).(*StoredMessage)
	if err := edit(m); err != nil {
		return Scheduled{}, err
	}
	if m.Subject != old.Subject || m.ClientId != old.ClientId || !toPlan(m) || m.Recurrence.Name != old.Recurrence.Name {
		return Scheduled{}, fmt.Errorf("delaystore: rewrite %v: %w: the subject, client id and schedule name stay, and it stays to plan", k, ErrInvalidMessage)
	}
	nk := keys.New(k.TopicHash(), keys.Bucket(keys.FireAtMs(m.FireAtNs), r.bucketMs), k.EventID())
	if err := r.rewriteBatch(k, nk, old, m, sync); err != nil {
		return Scheduled{}, fmt.Errorf("delaystore: rewrite %v: %w", k, err)
	}
	return Scheduled{Key: nk, Replaced: k, HasReplaced: true}, nil
}

// checkRewritable says why old, read under wmu, cannot be rewritten.
func checkRewritable(old *StoredMessage) error {
	switch {
	case old.GetRecurrence() == nil:
		return fmt.Errorf("%w: not an occurrence of a recurring schedule", ErrInvalidMessage)
	case old.GetRecurrence().GetPlanned():
		return ErrPlanned
	}
	return nil
}

// rewriteBatch replaces old under k by m under nk, with every index entry,
// in one batch committed with sync. wmu must be held.
func (r *Repository) rewriteBatch(k, nk keys.Key, old, m *StoredMessage, sync SyncMode) error {
	b := r.s.NewBatch()
	defer b.Close()
	r.resetScratch()
	// NB: within a batch the last write to a key wins, so when nk is k,
	// or the schedule's name keeps its schedule index key, the deletes
	// below are undone by the writes after them. The client id entry is
	// overwritten, not deleted. When nk is k, k is set again: its deletes
	// are plain ones, and a copy read before says it was written once, so
	// it is noted as rewritten (see singledelete.go), as Move does.
	if nk == k {
		r.noteRewrite(k, old)
	}
	if err := r.deleteMessage(b, &k, old, false); err != nil {
		return err
	}
	if nk == k {
		r.noteRewrite(k, old)
	}
	m.EventId = k.EventID()
	// NB: written as set more than once, even under a new key: a rewrite
	// back to the first time would set k again.
	if err := r.setMessage(b, &nk, m, false); err != nil {
		return err
	}
	if err := r.indexDue(b, &nk); err != nil {
		return err
	}
	if m.ClientId != "" {
		r.w.key = appendClientIDKey(r.w.key[:0], m.Subject, m.ClientId)
		if err := b.Set(r.w.key, nk[:]); err != nil {
			return fmt.Errorf("index client id: %w", err)
		}
	}
	if m.ExpireAtNs != 0 {
		r.w.key = appendExpiryKey(r.w.key[:0], m.ExpireAtNs, nk)
		if err := b.Set(r.w.key, nil); err != nil {
			return fmt.Errorf("index expiry: %w", err)
		}
	}
	if err := r.indexSchedule(b, nk, m); err != nil {
		return err
	}
	counts, err := r.setCounts(b, r.w.deltas)
	if err != nil {
		return err
	}
	if r.advanceHook != nil {
		r.advanceHook(RewriteBeforeCommit)
	}
	if err := b.Commit(sync); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if r.advanceHook != nil {
		r.advanceHook(RewriteAfterCommit)
	}
	r.committed(counts, 0)
	r.trimScratch()
	return nil
}
