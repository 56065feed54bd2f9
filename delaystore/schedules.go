package delaystore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/natsdelay/natsdelay/keys"
)

// The schedule index: one entry per recurring schedule that has an
// occurrence still to plan (the newest, unplanned one), pointing at it,
// and their number, kept in the same batches as the occurrences:
//
//	metadata/event-repo/schedule/<subject> 0x00 <name> -> 24-byte event key
//	metadata/event-repo/schedules                      -> BE uint64 count
//
// A schedule's name is its Delay-Id, or the tag of its first occurrence.
// An occurrence that is planned, or the last, is not indexed: a schedule
// whose last occurrence went out is over. The index of occurrences (see
// recurindex.go) holds the same occurrences in time order, written and
// deleted with these entries.
const (
	schedulePrefix   = "metadata/event-repo/schedule/"
	scheduleCountKey = "metadata/event-repo/schedules"
)

var (
	_ [len(schedulePrefix) - keys.Len - 1]struct{}
	_ [len(scheduleCountKey) - keys.Len - 1]struct{}
)

// ScheduleRef is one entry of the schedule index.
type ScheduleRef struct {
	Subject string
	// Name is the schedule's Delay-Id, or the tag of its first occurrence.
	Name string
	// Key is the key of its next occurrence, pending and not yet out.
	Key keys.Key
}

// scheduleName is the name of a schedule whose first occurrence is under k.
func scheduleName(r *Recurrence, k keys.Key) string {
	if r.Id != "" {
		return r.Id
	}
	return k.Tag()
}

func appendScheduleKey(dst []byte, subject, name string) []byte {
	dst = append(dst, schedulePrefix...)
	dst = append(dst, subject...)
	dst = append(dst, 0)
	return append(dst, name...)
}

// indexSchedule adds to b the entries of m, stored under k, if it is an
// occurrence still to plan: in the schedule index and in the index of
// occurrences (see recurindex.go). wmu must be held.
func (r *Repository) indexSchedule(b Batch, k keys.Key, m *StoredMessage) error {
	if !toPlan(m) {
		return nil
	}
	r.w.key = appendScheduleKey(r.w.key[:0], m.Subject, m.Recurrence.Name)
	r.w.ref = append(r.w.ref[:0], k[:]...)
	if err := b.Set(r.w.key, r.w.ref); err != nil {
		return fmt.Errorf("index schedule: %w", err)
	}
	r.w.key = recurIndex.appendKey(r.w.key[:0], k)
	if err := b.Set(r.w.key, nil); err != nil {
		return fmt.Errorf("index occurrence: %w", err)
	}
	r.w.schedules++
	return nil
}

// unindexSchedule adds to b the removal of the entries of m, stored under
// k, if it has them. wmu must be held.
func (r *Repository) unindexSchedule(b Batch, k keys.Key, m *StoredMessage) error {
	if !toPlan(m) {
		return nil
	}
	r.w.key = appendScheduleKey(r.w.key[:0], m.Subject, m.Recurrence.Name)
	if err := b.Delete(r.w.key); err != nil {
		return err
	}
	r.w.key = recurIndex.appendKey(r.w.key[:0], k)
	if err := b.Delete(r.w.key); err != nil {
		return err
	}
	r.w.schedules--
	return nil
}

// unindexOccurrence is unindexSchedule for an occurrence whose successor
// is indexed in the same batch: it leaves the schedule entry, which the
// successor's overwrites, and removes only k's entry in the index of
// occurrences. wmu must be held.
func (r *Repository) unindexOccurrence(b Batch, k keys.Key, m *StoredMessage) error {
	if !toPlan(m) {
		return nil
	}
	r.w.key = recurIndex.appendKey(r.w.key[:0], k)
	if err := b.Delete(r.w.key); err != nil {
		return err
	}
	r.w.schedules--
	return nil
}

// setScheduleCount adds to b the new number of schedules, if this batch
// changes it. wmu must be held.
func (r *Repository) setScheduleCount(b Batch) error {
	if r.w.schedules == 0 {
		return nil
	}
	r.mu.Lock()
	n := uint64(max(int64(r.mu.schedules)+r.w.schedules, 0))
	r.mu.Unlock()
	if err := b.Set([]byte(scheduleCountKey), binary.BigEndian.AppendUint64(nil, n)); err != nil {
		return fmt.Errorf("write schedule count: %w", err)
	}
	return nil
}

func (r *Repository) readScheduleCount() (uint64, error) {
	v, err := r.s.Get([]byte(scheduleCountKey))
	switch {
	case errors.Is(err, ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("read schedule count: %w", err)
	case len(v) != 8:
		return 0, fmt.Errorf("schedule count is %d bytes, want 8: %w", len(v), ErrCorrupt)
	}
	return binary.BigEndian.Uint64(v), nil
}

// Schedules is the number of recurring schedules with an occurrence still
// to plan, from memory.
func (r *Repository) Schedules() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.schedules
}

// ScheduleRefs lists up to limit entries of the schedule index in (subject,
// name) order: those of subject only when it is not empty, and only those
// after (afterSubject, afterName) when afterSubject is not empty. It reads
// only the index, never the occurrences.
func (r *Repository) ScheduleRefs(subject, afterSubject, afterName string, limit int) ([]ScheduleRef, error) {
	lo := []byte(schedulePrefix)
	hi := prefixEnd(schedulePrefix)
	if subject != "" {
		lo = appendScheduleKey(nil, subject, "")
		hi = prefixEnd(string(lo))
	}
	if afterSubject != "" {
		// The first key after (afterSubject, afterName).
		if a := append(appendScheduleKey(nil, afterSubject, afterName), 0); string(a) > string(lo) {
			lo = a
		}
	}
	var out []ScheduleRef
	var scanErr error
	err := r.s.Scan(IterOptions{LowerBound: lo, UpperBound: hi}, func(k, v []byte) bool {
		if len(out) >= limit {
			return false
		}
		rest := string(k[len(schedulePrefix):])
		var sep int
		for sep < len(rest) && rest[sep] != 0 {
			sep++
		}
		ek, err := keys.Decode(v)
		if err != nil || sep == len(rest) {
			scanErr = fmt.Errorf("delaystore: schedule index entry %q: %w", keys.Clip(rest), ErrCorrupt)
			return false
		}
		out = append(out, ScheduleRef{Subject: rest[:sep], Name: rest[sep+1:], Key: ek})
		return true
	})
	if err == nil {
		err = scanErr
	}
	if err != nil {
		return nil, fmt.Errorf("delaystore: list schedules: %w", err)
	}
	return out, nil
}

// LookupSchedule returns the key of the next occurrence of the schedule
// (subject, name), or an error wrapping ErrNotFound.
func (r *Repository) LookupSchedule(subject, name string) (keys.Key, error) {
	v, err := r.s.Get(appendScheduleKey(nil, subject, name))
	if err != nil {
		return keys.Key{}, fmt.Errorf("delaystore: lookup schedule %q of %q: %w", keys.Clip(name), keys.Clip(subject), err)
	}
	k, err := keys.Decode(v)
	if err != nil {
		return keys.Key{}, fmt.Errorf("delaystore: lookup schedule %q of %q: %w: %w", keys.Clip(name), keys.Clip(subject), ErrCorrupt, err)
	}
	return k, nil
}
