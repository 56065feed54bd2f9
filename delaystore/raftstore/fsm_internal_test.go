package raftstore

import (
	"bytes"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
)

// memStore opens a store in memory, closed when the test ends.
func memStore(t testing.TB) delaystore.Store {
	t.Helper()
	s, err := pebblestore.Open(pebblestore.Config{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// snapshotOf returns the snapshot stream of n keys with 64-byte values.
func snapshotOf(t testing.TB, n int) []byte {
	t.Helper()
	src := memStore(t)
	b := src.NewBatch()
	value := bytes.Repeat([]byte("v"), 64)
	for i := range n {
		if err := b.Set(fmt.Appendf(nil, "key-%08d-%016x", i, i*7919), value); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(delaystore.NoSync); err != nil {
		t.Fatal(err)
	}
	b.Close()
	it, err := src.NewIter(delaystore.IterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	s := &snapshot{it: it, applied: 7}
	if err := s.write(&buf); err != nil {
		t.Fatal(err)
	}
	s.Release()
	return buf.Bytes()
}

// restoreMallocs restores snap into an empty store and returns the heap
// allocations the restore made.
func restoreMallocs(t *testing.T, snap []byte) uint64 {
	t.Helper()
	f := &fsm{local: memStore(t), log: slog.New(slog.DiscardHandler), restoreMarker: filepath.Join(t.TempDir(), "restoring"), onFail: func(error) {}}
	r := bytes.NewReader(snap)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if _, err := f.restore(r); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	return after.Mallocs - before.Mallocs
}

// TestFSM_Restore_NoAllocationPerKey checks that restoring a snapshot
// reads its keys and values into buffers it reuses: the allocations of a
// restore do not grow with the number of keys (the local store's batch
// grows, by doubling, and is committed a chunk at a time).
func TestFSM_Restore_NoAllocationPerKey(t *testing.T) {
	const small, large = 1000, 3000
	a, b := restoreMallocs(t, snapshotOf(t, small)), restoreMallocs(t, snapshotOf(t, large))
	if perKey := float64(int64(b)-int64(a)) / (large - small); perKey > 0.1 {
		t.Fatalf("restore of %d keys made %d allocations, of %d keys %d: %.2f per key, want none", small, a, large, b, perKey)
	}
}
