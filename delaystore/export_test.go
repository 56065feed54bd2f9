package delaystore

import "reflect"

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
