package delaystore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/natsdelay/natsdelay/keys"
)

// Moving messages between repositories: a cell of a fleet that hands a
// partition to another reads the partition's pending messages with
// ScanEvents and the other stores them with Import, under the keys they
// had, so their tags stay valid and their event ids keep their order
// among the subject's later messages.

// Imported is a pending message to Import, under the key it had where it
// came from.
type Imported struct {
	Key keys.Key
	Msg *StoredMessage
}

// ScanEvents yields the pending messages whose topic hash keep accepts,
// after the key after (from the first when nil), in key order, on one
// consistent snapshot, until yield returns false. Each message is decoded
// for the caller and may be kept. It reads every pending key: the hashes
// keep accepts are spread over the whole keyspace.
func (r *Repository) ScanEvents(after *keys.Key, keep func(topicHash uint64) bool, yield func(keys.Key, *StoredMessage) bool) error {
	if r.closed.Load() {
		return ErrClosed
	}
	var lo []byte
	if after != nil {
		lo = append(after.Bytes(), 0)
	}
	err := r.scanMessages(IterOptions{LowerBound: lo}, keep, yield)
	if err != nil {
		return fmt.Errorf("delaystore: scan events: %w", err)
	}
	return nil
}

// Import stores msgs, pending messages of another repository, in one batch
// committed with sync, each under the key of its topic, fire time and
// event id, with every index a scheduled message has (pending counts, due
// index, client id, expiry, schedule index). A message whose key is
// stored already is skipped, so importing the same messages twice stores
// them once: a move that starts again after a crash sends them again. It
// returns the keys of those it stored. Later event ids are above every id
// imported.
//
// The keys are made again from each message, so a repository with another
// time bucket stores a message under the key of its own bucket (and its
// tag changes); with the same bucket the key is the one given. It returns
// an error wrapping ErrInvalidMessage, storing nothing, for a message
// without a subject or event id, or whose key's topic is not its subject's.
func (r *Repository) Import(msgs []Imported, sync SyncMode) ([]keys.Key, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	for i, in := range msgs {
		m := in.Msg
		if err := validateSubject(m.GetSubject()); err != nil {
			return nil, fmt.Errorf("delaystore: import message %d of %d: %w", i+1, len(msgs), err)
		}
		if m.EventId == 0 || in.Key.TopicHash() != keys.TopicHash(m.Subject) || in.Key.EventID() != m.EventId {
			return nil, fmt.Errorf("delaystore: import message %d of %d: %w: key %v does not name the message of %q, event id %d",
				i+1, len(msgs), ErrInvalidMessage, in.Key, keys.Clip(m.Subject), m.EventId)
		}
	}
	r.wmu.Lock() // held across the commit: see the NB in Schedule.
	defer r.wmu.Unlock()
	if r.closed.Load() {
		return nil, ErrClosed
	}
	b := r.s.NewBatch()
	defer b.Close()
	r.resetScratch()
	stored, maxID, err := r.writeImported(b, msgs)
	if err != nil || len(stored) == 0 {
		return nil, err
	}
	counts, err := r.setCounts(b, r.w.deltas)
	if err != nil {
		return nil, fmt.Errorf("delaystore: import %d messages: %w", len(msgs), err)
	}
	last := r.observeReserved(maxID)
	if err := b.Set([]byte(lastIDKey), binary.BigEndian.AppendUint64(r.w.val[:0], last)); err != nil {
		return nil, fmt.Errorf("delaystore: import %d messages: record last id: %w", len(msgs), err)
	}
	if err := r.leaseIDs(); err != nil {
		return nil, fmt.Errorf("delaystore: import %d messages: %w", len(msgs), err)
	}
	if err := b.Commit(sync); err != nil {
		return nil, fmt.Errorf("delaystore: import %d messages: commit: %w", len(msgs), err)
	}
	r.committed(counts, last)
	r.trimScratch()
	return stored, nil
}

// writeImported adds to b each of msgs not stored yet, with its indexes,
// and returns their keys and the highest event id among msgs. wmu must be
// held.
func (r *Repository) writeImported(b Batch, msgs []Imported) (stored []keys.Key, maxID uint64, err error) {
	seen := make(map[keys.Key]bool, len(msgs))
	for _, in := range msgs {
		m := in.Msg
		maxID = max(maxID, m.EventId)
		k := keys.New(in.Key.TopicHash(), keys.Bucket(keys.FireAtMs(m.FireAtNs), r.bucketMs), m.EventId)
		if seen[k] {
			continue
		}
		seen[k] = true
		_, err := r.get(k)
		switch {
		case err == nil:
			continue // imported before
		case !errors.Is(err, ErrNotFound):
			return nil, 0, fmt.Errorf("delaystore: import %v: %w", k, err)
		}
		if err := r.writeOneScheduled(b, &k, m); err != nil {
			return nil, 0, fmt.Errorf("delaystore: import %v: %w", k, err)
		}
		r.w.deltas[m.Subject]++
		stored = append(stored, k)
	}
	return stored, maxID, nil
}

// observeReserved raises the ids handed out to at least id and returns the
// last id to record. wmu must be held.
func (r *Repository) observeReserved(id uint64) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.reserved = max(r.mu.reserved, id)
	return max(r.mu.reserved, r.mu.lastID)
}
