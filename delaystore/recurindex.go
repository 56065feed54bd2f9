package delaystore

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/natsdelay/natsdelay/keys"
)

// The index of occurrences: one entry per pending occurrence of a
// recurring schedule still to plan, in the due index's order:
//
//	metadata/event-repo/recur-at/<BE bucket><BE topic hash><BE event id>  -> empty
//
// The dispatcher plans occurrences ahead of their time (see package
// dispatch): it reads this index over its look-ahead window, so what it
// reads follows the occurrences due in the window, not every message due
// in it. An entry is the event key with its first two fields swapped, as
// in the due index, so a cursor into either orders the same way.
//
// It holds the same occurrences as the schedule index (see schedules.go),
// ordered by time rather than by name, and changes with it, in the same
// batches as the occurrences: an occurrence enters when it is stored
// unplanned, and leaves when it is planned or deleted. A store written
// before it existed has none: the first open builds it from the messages,
// then records index-version 2 (see buildRecurIndex).
const (
	recurPrefix = "metadata/event-repo/recur-at/"

	// recurIndexVersion is what index-version holds once the index of
	// occurrences is complete too.
	recurIndexVersion = 2
)

var _ [len(recurPrefix) - keys.Len - 1]struct{}

// toPlan reports whether m is an occurrence of a recurring schedule still
// to plan: the ones the schedule index and the index of occurrences hold.
func toPlan(m *StoredMessage) bool {
	r := m.GetRecurrence()
	return r != nil && !r.Planned
}

// ScanOccurrences yields the keys of the occurrences of recurring
// schedules still to plan, in due order (see DueCompare), from the first
// after *after (all of them when after is nil) to the last whose bucket is
// at or before maxBucket, until yield returns false. It reads index
// entries only, on one consistent snapshot, never a message: what it
// reads follows the occurrences in the range, whatever else is due there.
// It returns an error wrapping ErrCorrupt for a malformed entry.
func (r *Repository) ScanOccurrences(after *keys.Key, maxBucket uint64, yield func(keys.Key) bool) error {
	if r.closed.Load() {
		return ErrClosed
	}
	if err := recurIndex.scan(r.s, after, maxBucket, yield); err != nil {
		return fmt.Errorf("delaystore: scan occurrences: %w", err)
	}
	return nil
}

// buildRecurIndex writes the index of occurrences of a store that has
// none (written before it existed), then records index-version 2. It
// reads and decodes every message once, in chunks, each chunk's entries
// committed in a batch of their own, so no read is held open across a
// commit; a crash part way leaves index-version as it was, and the next
// open builds again, overwriting what it wrote. It runs in
// OpenRepository, before any other write, after buildIndexes if that ran.
func (r *Repository) buildRecurIndex() error {
	const chunk = 4096
	var from []byte
	messages, entries := 0, 0
	for {
		var found []keys.Key
		var next []byte
		n := 0
		var decodeErr error
		err := r.s.Scan(IterOptions{LowerBound: from}, func(kb, v []byte) bool {
			if len(kb) != keys.Len {
				return true
			}
			k := keys.Key(kb)
			var m StoredMessage
			if err := proto.Unmarshal(v, &m); err != nil {
				decodeErr = fmt.Errorf("decode %v: %w: %w", k, ErrCorrupt, err)
				return false
			}
			if toPlan(&m) {
				found = append(found, k)
			}
			if n++; n == chunk {
				next = k.Successor()
				return false
			}
			return true
		})
		if err == nil {
			err = decodeErr
		}
		if err != nil {
			return fmt.Errorf("read messages: %w", err)
		}
		messages += n
		if len(found) > 0 {
			b := r.s.NewBatch()
			for _, k := range found {
				if err := b.Set(recurIndex.appendKey(nil, k), nil); err != nil {
					b.Close()
					return fmt.Errorf("index occurrence %v: %w", k, err)
				}
			}
			err = b.Commit(NoSync)
			b.Close()
			if err != nil {
				return fmt.Errorf("write index of occurrences: %w", err)
			}
			entries += len(found)
		}
		if next == nil {
			break
		}
		from = next
	}
	b := r.s.NewBatch()
	defer b.Close()
	if err := b.Set([]byte(indexVersionKey), binary.BigEndian.AppendUint64(nil, recurIndexVersion)); err != nil {
		return fmt.Errorf("record index version: %w", err)
	}
	// Synced, so the NoSync chunks before it are durable once the
	// version says the index is whole.
	if err := b.Commit(Sync); err != nil {
		return fmt.Errorf("record index version: %w", err)
	}
	if messages > 0 {
		r.log.Info("built the index of recurring occurrences of a store written without it", "messages", messages, "occurrences", entries)
	}
	return nil
}
