package delaystore

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// The version guard keeps every earlier version from opening a store this version
// wrote. A version that keeps index-version refuses one newer than it
// knows; a version from before index-version existed does not read it,
// and would take messages without the due index, which this version then
// never delivers. What every such version does read at open is the whole
// subject registry, and it refuses an entry whose value is not an 8-byte
// count, quoting the entry's subject (up to 64 bytes) in its error. The
// version guard is that entry:
//
//	metadata/event-repo/topic/\x00written by a newer natsdelay; ...  -> empty
//
// No subject holds a NUL byte, so no subject's entry is the version guard, and
// the version guard sorts before every subject's. An earlier version's serve
// exits with code 1 and ends its error with:
//
//	delaystore: open repository: pending count of "\x00written by a newer
//	natsdelay; run that version or a later one" is 0 bytes, want 8:
//	delaystore: corrupt value
//
// The store is not corrupt, and the earlier version changed no key of it
// (its bbolt open commits an empty transaction, which rewrites a meta
// page; this version commits nothing at open to a file that has its
// bucket, so its own refusal of a later store leaves the file as it was).
const (
	guardSubject = "\x00written by a newer natsdelay; run that version or a later one"
	guardKey     = topicPrefix + guardSubject

	// NB: index-version 3 was the version guard's own, on top of
	// everything recurIndexVersion says; index-version 4 says it too.

	// NB: index-version 4 says messages may be written with written_once
	// and then removed with a single delete. A version before it would
	// rewrite such a message keeping the flag (an unknown field to it),
	// and a later single delete of the key, set twice, could bring the
	// earlier value back: so 4 keeps every version before it out, as
	// index-version does. plannedByIndexVersion (planned.go) says it
	// too.

	// indexVersion is the index-version this version writes and the
	// newest it opens: plannedByIndexVersion (see planned.go).
	indexVersion = plannedByIndexVersion
)

// Fails to compile if the text grows past the 64 bytes an earlier
// version quotes of a subject.
var _ [64 - len(guardSubject)]struct{}

// isVersionGuard reports whether the subject of a registry entry is the version guard's,
// which no subject can be: registry scans skip it.
func isVersionGuard(subject string) bool { return strings.HasPrefix(subject, "\x00") }

// writeVersionGuard puts the version guard in the store and records indexVersion, in
// one synced batch. It runs in OpenRepository, before any other write,
// after the indexes were built if they needed to be.
func (r *Repository) writeVersionGuard() error {
	b := r.s.NewBatch()
	defer b.Close()
	if err := b.Set([]byte(guardKey), nil); err != nil {
		return fmt.Errorf("write version guard: %w", err)
	}
	if err := b.Set([]byte(indexVersionKey), binary.BigEndian.AppendUint64(nil, indexVersion)); err != nil {
		return fmt.Errorf("record index version: %w", err)
	}
	if err := b.Commit(Sync); err != nil {
		return fmt.Errorf("write version guard: %w", err)
	}
	return nil
}
