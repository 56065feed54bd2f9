package delaystore

import (
	"reflect"

	"github.com/natsdelay/natsdelay/keys"
)

// ScratchDeltas identifies the map a write keeps between batches for the
// subject counts it changes, so a test can tell whether it was replaced.
func (r *Repository) ScratchDeltas() uintptr {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	return uintptr(reflect.ValueOf(r.w.deltas).UnsafePointer())
}

// VersionGuardKey is the subject registry entry that keeps earlier versions from
// opening a store (see versionguard.go).
const VersionGuardKey = guardKey

// Bounds of the cache of messages written last (see msgCache).
const (
	MaxCachedMessages     = maxCachedMessages
	MaxCachedMessageBytes = maxCachedMessageBytes
	MaxCachedValue        = maxCachedValue
)

// CachedMessages is how many messages, and encoded bytes, the cache of
// messages written last holds.
func (r *Repository) CachedMessages() (n, bytes int) {
	r.msgs.mu.Lock()
	defer r.msgs.mu.Unlock()
	for _, m := range []map[keys.Key][]byte{r.msgs.mu.cur, r.msgs.mu.prev} {
		for _, v := range m {
			n++
			bytes += len(v)
		}
	}
	return n, bytes
}

// SetGroupedWrites turns the grouping of a batch's writes (see
// groupedbatch.go) on or off, for a benchmark to compare both in one run.
// It is not safe while a repository writes.
func SetGroupedWrites(on bool) { groupWrites = on }
