package pebblestore_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
)

// Guarantee: handing memory back loses and changes nothing committed.
// ReleaseMemory, after writes that went through several memtables and
// with a NoSync write still only in the memtable, leaves every key
// readable with its value; the store takes writes after it; and a reopen
// finds every write, with and without a WAL. (What it frees is resident
// memory, which the bench measures: docs/performance.md.)
func TestStore_ReleaseMemory_KeepsEveryWrite(t *testing.T) {
	for _, noWAL := range []bool{false, true} {
		t.Run(fmt.Sprintf("no_wal=%v", noWAL), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "pebble")
			cfg := pebblestore.Config{Dir: dir, DisableWAL: noWAL, MemTableSize: 256 << 10,
				Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}
			s, err := pebblestore.Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			const n = 6000 // ~1.2 MiB of values: several 256 KiB memtables
			put(t, s, 0, n)
			for range 2 { // twice: the second finds fresh memtables
				if err := s.ReleaseMemory(); err != nil {
					t.Fatalf("ReleaseMemory: %v", err)
				}
			}
			check(t, s, n)
			put(t, s, n, 2*n)
			if err := s.ReleaseMemory(); err != nil {
				t.Fatalf("ReleaseMemory after more writes: %v", err)
			}
			check(t, s, 2*n)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = open(t, cfg)
			check(t, s, 2*n)
		})
	}
}

// Guarantee: a closed store refuses the call with ErrClosed, as it refuses
// every other, and a store in memory, which has nothing to hand back,
// keeps its data.
func TestStore_ReleaseMemory_ClosedAndInMemory(t *testing.T) {
	s, err := pebblestore.Open(pebblestore.Config{Dir: filepath.Join(t.TempDir(), "pebble")})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseMemory(); !errors.Is(err, delaystore.ErrClosed) {
		t.Fatalf("ReleaseMemory on a closed store: %v, want ErrClosed", err)
	}

	m := open(t, pebblestore.Config{InMemory: true})
	put(t, m, 0, 100)
	if err := m.ReleaseMemory(); err != nil {
		t.Fatalf("ReleaseMemory in memory: %v", err)
	}
	check(t, m, 100)
}

func releaseKey(i int) []byte { return fmt.Appendf(nil, "release/%08d", i) }

func releaseValue(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 200) }

// put writes keys [from, to) in NoSync batches of 500.
func put(t *testing.T, s delaystore.Store, from, to int) {
	t.Helper()
	for lo := from; lo < to; lo += 500 {
		b := s.NewBatch()
		for i := lo; i < min(lo+500, to); i++ {
			if err := b.Set(releaseKey(i), releaseValue(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(delaystore.NoSync); err != nil {
			t.Fatal(err)
		}
		_ = b.Close()
	}
}

// check reads keys [0, n) back and finds nothing else.
func check(t *testing.T, s delaystore.Store, n int) {
	t.Helper()
	got := 0
	err := s.Scan(delaystore.IterOptions{LowerBound: []byte("release/"), UpperBound: []byte("release0")}, func(k, v []byte) bool {
		if !bytes.Equal(k, releaseKey(got)) || !bytes.Equal(v, releaseValue(got)) {
			t.Errorf("key %d: got %q (%d bytes of value)", got, k, len(v))
			return false
		}
		got++
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != n {
		t.Fatalf("found %d keys, want %d", got, n)
	}
}
