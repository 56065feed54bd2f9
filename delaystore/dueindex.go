package delaystore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/natsdelay/natsdelay/keys"
)

// The due index, the due counts and the totals: what lets the service
// know what is due, and how much is pending, without one entry per subject
// in memory and without a seek per subject at start.
//
//	metadata/event-repo/due-at/<BE bucket><BE topic hash><BE event id>  -> empty
//	metadata/event-repo/due-count/<BE uint64 second>                 -> BE uint64 count
//	metadata/event-repo/pending                                      -> BE uint64 total pending
//	metadata/event-repo/subjects                                     -> BE uint64 subjects with pending messages
//	metadata/event-repo/index-version                                -> BE uint64 index version
//
// A due entry is the event key with its first two fields swapped: time
// first, so everything due by a time is one range read in time order over
// all subjects, and within one subject the order is the event keys' own
// (bucket, event id). A due count is the number of pending messages whose
// key's bucket starts in that second, so the messages due within any window
// are the sum of a few counts plus the due entries of one partial second.
//
// All of them change in the same batch as the messages they describe, as
// the expiry index does. A store written before they existed has none: the
// first open builds them from the messages and the subject registry, then
// records index-version (see buildIndexes).
const (
	duePrefix        = "metadata/event-repo/due-at/"
	dueCountPrefix   = "metadata/event-repo/due-count/"
	pendingTotalKey  = "metadata/event-repo/pending"
	subjectsTotalKey = "metadata/event-repo/subjects"
	indexVersionKey  = "metadata/event-repo/index-version"

	dueCountKeyLen = len(dueCountPrefix) + 8

	// dueIndexVersion is what index-version holds once the due index, the
	// due counts and the totals are complete; recurIndexVersion (see
	// recurindex.go) once the index of recurring occurrences is too. An
	// older version refuses a store with a version it does not know,
	// rather than write messages without the index it cannot keep.
	dueIndexVersion = 1
)

var (
	_ [len(duePrefix) - keys.Len - 1]struct{}
	_ [len(dueCountPrefix) - keys.Len - 1]struct{}
	_ [len(pendingTotalKey) - keys.Len - 1]struct{}
	_ [len(subjectsTotalKey) - keys.Len - 1]struct{}
	_ [len(indexVersionKey) - keys.Len - 1]struct{}
)

// timeOrder is an index of event keys in due order, the prefix its
// entries share: an entry is the event key with its first two fields
// swapped, time bucket first, so everything due by a time is one range
// read. The due index and the index of occurrences (see recurindex.go)
// are two of them.
type timeOrder string

const (
	dueIndex   timeOrder = duePrefix
	recurIndex timeOrder = recurPrefix
)

// appendKey appends the entry of the event key k to dst.
func (ix timeOrder) appendKey(dst []byte, k keys.Key) []byte {
	dst = append(dst, ix...)
	dst = append(dst, k[8:16]...) // bucket
	dst = append(dst, k[0:8]...)  // topic hash
	return append(dst, k[16:24]...)
}

// bucketBound is the key below every entry of bucket and above every
// entry of the buckets before it.
func (ix timeOrder) bucketBound(bucket uint64) []byte {
	dst := append(make([]byte, 0, len(ix)+8), ix...)
	return binary.BigEndian.AppendUint64(dst, bucket)
}

// entryKey is the event key an entry stands for.
func (ix timeOrder) entryKey(entry []byte) (keys.Key, error) {
	if len(entry) != len(ix)+keys.Len {
		return keys.Key{}, fmt.Errorf("entry %x under %q is %d bytes, want %d: %w", entry, string(ix), len(entry), len(ix)+keys.Len, ErrCorrupt)
	}
	e := entry[len(ix):]
	var k keys.Key
	copy(k[0:8], e[8:16])
	copy(k[8:16], e[0:8])
	copy(k[16:24], e[16:24])
	return k, nil
}

// scan yields the event keys of ix's entries, in due order, from the first
// after *after (all of them when after is nil) to the last whose bucket is
// at or before maxBucket, until yield returns false. It reads entries
// only, on one consistent snapshot of s, never a message.
func (ix timeOrder) scan(s Store, after *keys.Key, maxBucket uint64, yield func(keys.Key) bool) error {
	lo := []byte(ix)
	if after != nil {
		lo = append(ix.appendKey(nil, *after), 0)
	}
	hi := prefixEnd(string(ix))
	if maxBucket < math.MaxUint64 {
		hi = ix.bucketBound(maxBucket + 1)
	}
	var entryErr error
	err := s.Scan(IterOptions{LowerBound: lo, UpperBound: hi}, func(kb, _ []byte) bool {
		k, err := ix.entryKey(kb)
		if err != nil {
			entryErr = err
			return false
		}
		return yield(k)
	})
	if err == nil {
		err = entryErr
	}
	return err
}

// DueCompare orders event keys as the due index does: by bucket, then
// topic hash, then event ID. Within one topic it is the event keys' order.
func DueCompare(a, b keys.Key) int {
	if c := bytes.Compare(a[8:16], b[8:16]); c != 0 {
		return c
	}
	if c := bytes.Compare(a[0:8], b[0:8]); c != 0 {
		return c
	}
	return bytes.Compare(a[16:24], b[16:24])
}

func appendDueCountKey(dst []byte, second int64) []byte {
	dst = append(dst, dueCountPrefix...)
	return binary.BigEndian.AppendUint64(dst, uint64(max(second, 0)))
}

// dueSecond is the second a message under k is counted in: the one its
// key's bucket starts in, so the count agrees with what a scan of keys
// finds due.
func (r *Repository) dueSecond(k keys.Key) int64 {
	return keys.BucketStartMs(k.Bucket(), r.bucketMs) / 1000
}

// indexDue adds to b the due entry of the message stored under k, and
// counts it. wmu must be held.
func (r *Repository) indexDue(b Batch, k *keys.Key) error {
	r.w.key = dueIndex.appendKey(r.w.key[:0], *k)
	if err := b.Set(r.w.key, nil); err != nil {
		return fmt.Errorf("index due time of %v: %w", k, err)
	}
	r.w.due[r.dueSecond(*k)]++
	return nil
}

// unindexDue removes, with del, the due entry of the message under k, and
// uncounts it. del is a batch's Delete, or its SingleDelete for an entry
// written once (see singledelete.go). wmu must be held.
func (r *Repository) unindexDue(del func([]byte) error, k *keys.Key) error {
	r.w.key = dueIndex.appendKey(r.w.key[:0], *k)
	if err := del(r.w.key); err != nil {
		return fmt.Errorf("delete due entry of %v: %w", k, err)
	}
	r.w.due[r.dueSecond(*k)]--
	return nil
}

// readCount reads a BE uint64 count, 0 when missing.
func (r *Repository) readCount(key []byte) (uint64, error) {
	v, err := r.s.Get(key)
	switch {
	case errors.Is(err, ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, err
	case len(v) != 8:
		return 0, fmt.Errorf("count under %q is %d bytes, want 8: %w", key, len(v), ErrCorrupt)
	}
	return binary.BigEndian.Uint64(v), nil
}

// setDueCounts adds to b the due counts this batch changes. wmu must be
// held.
func (r *Repository) setDueCounts(b Batch) error {
	for second, d := range r.w.due {
		if d == 0 {
			continue
		}
		r.w.key = appendDueCountKey(r.w.key[:0], second)
		cur, err := r.count(r.w.key)
		if err != nil {
			return fmt.Errorf("read due count of second %d: %w", second, err)
		}
		n := int64(cur) + d
		if n < 0 {
			r.log.Error("due count would go negative", "second", second, "count", cur, "delta", d)
			n = 0
		}
		if err := r.writeCount(b, r.w.key, uint64(n)); err != nil {
			return fmt.Errorf("write due count of second %d: %w", second, err)
		}
	}
	return nil
}

// ScanDue yields the keys of pending messages from the due index, in due
// order (see DueCompare), from the first after *after (all of them when
// after is nil) to the last whose bucket is at or before maxBucket, until
// yield returns false. It reads index entries only, on one consistent
// snapshot, never a message. It returns an error wrapping ErrCorrupt for a
// malformed entry.
func (r *Repository) ScanDue(after *keys.Key, maxBucket uint64, yield func(keys.Key) bool) error {
	if r.closed.Load() {
		return ErrClosed
	}
	if err := dueIndex.scan(r.s, after, maxBucket, yield); err != nil {
		return fmt.Errorf("delaystore: scan due index: %w", err)
	}
	return nil
}

// CountDueAll counts the pending messages of every subject due at each of
// dueMs (Unix milliseconds, ascending): n[i] is how many have a key whose
// time bucket starts at or before dueMs[i], as CountDue counts them. It
// reads the due counts of the seconds before the last of dueMs, one entry
// per second that has messages, and the due entries of the partial second
// each time falls in; never a message.
func (r *Repository) CountDueAll(dueMs ...int64) ([]uint64, error) {
	if r.closed.Load() {
		return nil, ErrClosed
	}
	n := make([]uint64, len(dueMs))
	if len(dueMs) == 0 {
		return n, nil
	}
	seconds := make([]int64, len(dueMs))
	for i, t := range dueMs {
		seconds[i] = floorDiv(max(t, 0), 1000)
	}
	var entryErr error
	opts := IterOptions{LowerBound: []byte(dueCountPrefix), UpperBound: appendDueCountKey(nil, seconds[len(seconds)-1])}
	err := r.s.Scan(opts, func(kb, v []byte) bool {
		if len(kb) != dueCountKeyLen || len(v) != 8 {
			entryErr = fmt.Errorf("due count %x=%x is malformed: %w", kb, v, ErrCorrupt)
			return false
		}
		second := int64(binary.BigEndian.Uint64(kb[len(dueCountPrefix):]))
		c := binary.BigEndian.Uint64(v)
		for i := len(seconds) - 1; i >= 0 && second < seconds[i]; i-- {
			n[i] += c
		}
		return true
	})
	if err == nil {
		err = entryErr
	}
	if err != nil {
		return nil, fmt.Errorf("delaystore: count due: %w", err)
	}
	bms := max(r.bucketMs, 1)
	for i, t := range dueMs {
		if t < 0 {
			continue
		}
		// The buckets that start within t's second, up to t's own.
		first := uint64((seconds[i]*1000 + bms - 1) / bms)
		last := keys.Bucket(t, r.bucketMs)
		if first > last {
			continue
		}
		opts := IterOptions{LowerBound: dueIndex.bucketBound(first), UpperBound: dueIndex.bucketBound(last + 1)}
		if err := r.s.Scan(opts, func([]byte, []byte) bool { n[i]++; return true }); err != nil {
			return nil, fmt.Errorf("delaystore: count due: %w", err)
		}
	}
	return n, nil
}

func floorDiv(a, b int64) int64 { return a / b } // a >= 0 here

// buildIndexes writes the due index, the due counts and the totals of a
// store that has none (written before they existed, or new), then records
// index-version. It reads every event key and the subject registry once,
// in chunks, each committed in its own batch, so no read is held open
// across a commit; a crash part way leaves index-version unset, and the
// next open builds again, overwriting what it wrote. It runs in
// OpenRepository, before any other write.
func (r *Repository) buildIndexes() error {
	counts, entries, err := r.buildDueIndex()
	if err != nil {
		return err
	}
	pending, subjects, err := r.readPendingTotals()
	if err != nil {
		return fmt.Errorf("read subject registry: %w", err)
	}
	if err := r.writeDueCountsAndTotals(counts, pending, subjects); err != nil {
		return err
	}
	if entries > 0 {
		r.log.Info("built the due index of a store written without it", "messages", entries, "subjects", subjects)
	}
	return nil
}

// indexBuildChunk bounds the keys buildIndexes reads, and the writes it
// commits, at a time.
const indexBuildChunk = 4096

// buildDueIndex writes the due index entry of every event key, a chunk at
// a time, and returns the count of messages due in each second and the
// number of keys.
func (r *Repository) buildDueIndex() (map[int64]uint64, int, error) {
	counts := make(map[int64]uint64)
	var from []byte
	entries := 0
	for {
		var ks []keys.Key
		var next []byte
		err := r.s.Scan(IterOptions{LowerBound: from}, func(kb, _ []byte) bool {
			if len(kb) != keys.Len {
				return true
			}
			ks = append(ks, keys.Key(kb))
			if len(ks) == indexBuildChunk {
				next = keys.Key(kb).Successor()
				return false
			}
			return true
		})
		if err != nil {
			return nil, 0, fmt.Errorf("read event keys: %w", err)
		}
		b := r.s.NewBatch()
		for _, k := range ks {
			if err := b.Set(dueIndex.appendKey(nil, k), nil); err != nil {
				b.Close()
				return nil, 0, fmt.Errorf("index due time of %v: %w", k, err)
			}
			counts[r.dueSecond(k)]++
		}
		err = b.Commit(NoSync)
		b.Close()
		if err != nil {
			return nil, 0, fmt.Errorf("write due index: %w", err)
		}
		entries += len(ks)
		if next == nil {
			return counts, entries, nil
		}
		from = next
	}
}

// readPendingTotals reads the subject registry: the messages pending in
// all, and the subjects with any.
func (r *Repository) readPendingTotals() (pending, subjects uint64, err error) {
	var entryErr error
	err = r.s.Scan(IterOptions{LowerBound: []byte(topicPrefix), UpperBound: prefixEnd(topicPrefix)}, func(k, v []byte) bool {
		if isVersionGuard(string(k[len(topicPrefix):])) {
			return true
		}
		if len(v) != 8 {
			entryErr = fmt.Errorf("pending count of %q is %d bytes, want 8: %w", keys.Clip(string(k[len(topicPrefix):])), len(v), ErrCorrupt)
			return false
		}
		if n := binary.BigEndian.Uint64(v); n > 0 {
			pending += n
			subjects++
		}
		return true
	})
	if err == nil {
		err = entryErr
	}
	return pending, subjects, err
}

// writeDueCountsAndTotals writes the due counts per second, the totals
// and index-version, the last in a synced commit.
func (r *Repository) writeDueCountsAndTotals(counts map[int64]uint64, pending, subjects uint64) error {
	b := r.s.NewBatch()
	defer func() { b.Close() }()
	for second, c := range counts {
		if b.Len() >= indexBuildChunk {
			if err := b.Commit(NoSync); err != nil {
				return fmt.Errorf("write due counts: %w", err)
			}
			b.Close()
			b = r.s.NewBatch()
		}
		if err := b.Set(appendDueCountKey(nil, second), binary.BigEndian.AppendUint64(nil, c)); err != nil {
			return fmt.Errorf("write due counts: %w", err)
		}
	}
	for _, kv := range []struct {
		key string
		n   uint64
	}{{pendingTotalKey, pending}, {subjectsTotalKey, subjects}, {indexVersionKey, dueIndexVersion}} {
		if err := b.Set([]byte(kv.key), binary.BigEndian.AppendUint64(nil, kv.n)); err != nil {
			return fmt.Errorf("write totals: %w", err)
		}
	}
	if err := b.Commit(Sync); err != nil {
		return fmt.Errorf("write totals: %w", err)
	}
	return nil
}

// openIndexes builds the indexes if the store lacks them and reads the
// totals into memory.
func (r *Repository) openIndexes() error {
	v, err := r.readCount([]byte(indexVersionKey))
	if err != nil {
		return fmt.Errorf("read index version: %w", err)
	}
	if v > indexVersion {
		return fmt.Errorf("index version %d is newer than this version knows (%d): %w", v, indexVersion, ErrCorrupt)
	}
	if v < dueIndexVersion {
		if err := r.buildIndexes(); err != nil {
			return fmt.Errorf("build due index: %w", err)
		}
	}
	if v < recurIndexVersion {
		if err := r.buildRecurIndex(); err != nil {
			return fmt.Errorf("build index of recurring occurrences: %w", err)
		}
	}
	if v < indexVersion {
		if err := r.writeVersionGuard(); err != nil {
			return err
		}
	}
	if r.mu.pending, err = r.readCount([]byte(pendingTotalKey)); err != nil {
		return fmt.Errorf("read pending total: %w", err)
	}
	if r.mu.subjects, err = r.readCount([]byte(subjectsTotalKey)); err != nil {
		return fmt.Errorf("read subjects total: %w", err)
	}
	if r.mu.dead, err = r.readCount([]byte(deadTotalKey)); err != nil {
		return fmt.Errorf("read dead-letter total: %w", err)
	}
	return nil
}
