package delaystore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/natsdelay/natsdelay/keys"
)

// A cell of a fleet that hands a partition to another moves, besides its
// pending messages (ScanEvents, Import), the records the partition keeps
// beside them: its dead letters and the duplicate window's records of its
// subjects. They are read as they are stored (ScanSideRecords), written
// at the other end with their indexes and counts (ImportSideRecords), and
// deleted where they were once the other cell owns the partition
// (DropSideRecords).

// SideRecord is a dead letter or a duplicate window's record, under its
// key in the store.
type SideRecord struct {
	Key, Value []byte
}

// sideTopic returns the topic hash of the side record under key, and
// whether key is one (a dead letter or a duplicate record).
func sideTopic(key []byte) (uint64, bool) {
	switch {
	case bytes.HasPrefix(key, []byte(deadPrefix)) && len(key) == deadKeyLen:
		return keys.Key(key[len(deadPrefix):]).TopicHash(), true
	case bytes.HasPrefix(key, []byte(dedupPrefix)) && len(key) > len(dedupPrefix)+1:
		subject, _, ok := bytes.Cut(key[len(dedupPrefix)+1:], []byte{0})
		return keys.TopicHash(string(subject)), ok
	}
	return 0, false
}

// ScanSideRecords yields the dead letters and duplicate records whose
// topic keep accepts, in key order, after the key after (from the first
// when nil), until yield returns false. Duplicate records expired at
// nowNs are passed by: they answer no resend.
func (r *Repository) ScanSideRecords(after []byte, keep func(topicHash uint64) bool, nowNs int64, yield func(SideRecord) bool) error {
	if r.closed.Load() {
		return ErrClosed
	}
	stopped := false
	for _, prefix := range []string{deadPrefix, dedupPrefix} {
		lo, hi := []byte(prefix), prefixEnd(prefix)
		if after != nil && bytes.Compare(after, lo) >= 0 {
			lo = append(bytes.Clone(after), 0)
		}
		if bytes.Compare(lo, hi) >= 0 {
			continue
		}
		err := r.s.Scan(IterOptions{LowerBound: lo, UpperBound: hi}, func(k, v []byte) bool {
			h, ok := sideTopic(k)
			if !ok || !keep(h) || (prefix == dedupPrefix && len(v) == dedupRecordLen && int64(binary.BigEndian.Uint64(v)) <= nowNs) {
				return true
			}
			stopped = !yield(SideRecord{Key: bytes.Clone(k), Value: bytes.Clone(v)})
			return !stopped
		})
		if err != nil {
			return fmt.Errorf("delaystore: scan dead letters and duplicate records: %w", err)
		}
		if stopped {
			return nil
		}
	}
	return nil
}

// ImportSideRecords stores recs, dead letters and duplicate records of
// another repository, under their keys, with their index entries and the
// dead letter counts, in one batch committed with sync, and returns how
// many it stored. A record whose key is stored already is skipped, so
// importing the same records twice stores them once. It returns an error
// wrapping ErrInvalidMessage, storing nothing, for a record that is
// neither.
func (r *Repository) ImportSideRecords(recs []SideRecord, sync SyncMode) (int, error) {
	type decoded struct {
		rec SideRecord
		dl  *DeadLetter
	}
	in := make([]decoded, 0, len(recs))
	for i, rec := range recs {
		d := decoded{rec: rec}
		_, ok := sideTopic(rec.Key)
		if ok && bytes.HasPrefix(rec.Key, []byte(deadPrefix)) {
			d.dl = new(DeadLetter)
			ok = proto.Unmarshal(rec.Value, d.dl) == nil && d.dl.GetMessage().GetSubject() != ""
		} else if ok {
			ok = len(rec.Value) == dedupRecordLen
		}
		if !ok {
			return 0, fmt.Errorf("delaystore: import record %d of %d: %w: key %q is not a dead letter or duplicate record", i+1, len(recs), ErrInvalidMessage, keys.Clip(string(rec.Key)))
		}
		in = append(in, d)
	}
	r.wmu.Lock() // held across the commit: see the NB in Schedule.
	defer r.wmu.Unlock()
	if r.closed.Load() {
		return 0, ErrClosed
	}
	b := r.s.NewBatch()
	defer b.Close()
	r.resetScratch()
	stored := 0
	seen := map[string]bool{}
	for _, d := range in {
		if seen[string(d.rec.Key)] {
			continue
		}
		seen[string(d.rec.Key)] = true
		_, err := r.s.Get(d.rec.Key)
		switch {
		case err == nil:
			continue // imported before
		case !errors.Is(err, ErrNotFound):
			return 0, fmt.Errorf("delaystore: import records: %w", err)
		}
		if err := r.writeSide(b, d.rec, d.dl); err != nil {
			return 0, fmt.Errorf("delaystore: import records: %w", err)
		}
		stored++
	}
	if stored == 0 {
		return 0, nil
	}
	return stored, r.commitSide(b, sync)
}

// writeSide adds to b the record rec (dl, for a dead letter) and its
// index entry. wmu must be held.
func (r *Repository) writeSide(b Batch, rec SideRecord, dl *DeadLetter) error {
	if err := b.Set(rec.Key, rec.Value); err != nil {
		return err
	}
	if dl != nil {
		r.w.deadDeltas[dl.GetMessage().GetSubject()]++
		return b.Set(appendDeadAtKey(r.w.key[:0], dl.DiedAtNs, keys.Key(rec.Key[len(deadPrefix):])), nil)
	}
	expire := int64(binary.BigEndian.Uint64(rec.Value))
	// NB: the sweep must find the entry: it starts at dedupSwept, and
	// reads nothing below dedupNext (see dedup.go). Lowered before the
	// commit, they only make a sweep read more if it fails.
	r.dedupSwept = min(r.dedupSwept, expiryOrder(expire))
	r.dedupNext = min(r.dedupNext, expiryOrder(expire))
	return b.Set(appendDedupAtKey(r.w.key[:0], expire, string(rec.Key[len(dedupPrefix):])), nil)
}

// dropSide adds to b the delete of the record rec and its index entry.
// wmu must be held.
func (r *Repository) dropSide(b Batch, rec SideRecord) error {
	if bytes.HasPrefix(rec.Key, []byte(deadPrefix)) {
		dl := new(DeadLetter)
		if err := proto.Unmarshal(rec.Value, dl); err != nil {
			return fmt.Errorf("decode dead letter %x: %w: %w", rec.Key, ErrCorrupt, err)
		}
		return r.dropDead(b, keys.Key(rec.Key[len(deadPrefix):]), dl)
	}
	if err := b.Delete(rec.Key); err != nil {
		return err
	}
	if len(rec.Value) != dedupRecordLen {
		return nil
	}
	expire := int64(binary.BigEndian.Uint64(rec.Value))
	return b.Delete(appendDedupAtKey(r.w.key[:0], expire, string(rec.Key[len(dedupPrefix):])))
}

// commitSide writes the dead letter counts b changes and commits it.
// wmu must be held.
func (r *Repository) commitSide(b Batch, sync SyncMode) error {
	total, err := r.setDeadCounts(b)
	if err != nil {
		return fmt.Errorf("delaystore: records: %w", err)
	}
	if err := b.Commit(sync); err != nil {
		return fmt.Errorf("delaystore: records: commit: %w", err)
	}
	r.committedDead(total)
	return nil
}

// DropSideRecords deletes up to limit dead letters and duplicate records
// whose topic keep accepts (expired ones too), with their index entries
// and counts, in one batch committed with sync, and returns how many it
// deleted: fewer than limit once none is left.
func (r *Repository) DropSideRecords(keep func(topicHash uint64) bool, limit int, sync SyncMode) (int, error) {
	r.wmu.Lock() // held from the scan across the commit: see the NB in Schedule.
	defer r.wmu.Unlock()
	var recs []SideRecord
	if err := r.ScanSideRecords(nil, keep, -1<<63, func(rec SideRecord) bool {
		recs = append(recs, rec)
		return len(recs) < limit
	}); err != nil {
		return 0, err
	}
	if len(recs) == 0 {
		return 0, nil
	}
	b := r.s.NewBatch()
	defer b.Close()
	r.resetScratch()
	for _, rec := range recs {
		if err := r.dropSide(b, rec); err != nil {
			return 0, fmt.Errorf("delaystore: drop records: %w", err)
		}
	}
	return len(recs), r.commitSide(b, sync)
}
